"""envs.py: the environments both scripts play (pqn_lake.py and dqn_single_baseline.py import them, as they import
lake.py): Atari through ale-py's AtariVectorEnv with PQN's and envpool's preprocessing, MinAtar through the minatar
package, registered gymnasium ids with uint8 frames; all with ale-py's vector interface (reset(seed), send/recv,
step, next-step autoreset, info["lives"]); and the film of an evaluation game (make_camera, minatar_rgb,
write_video).

This is plumbing, not the algorithm: a fork of the loop changes the scripts (the loop, the networks, the learners) and
keeps this file. Every function takes the script's `args` and reads only its environment flags: env_id, frame_height,
frame_width, rgb, stack_size, repeat_action_probability, max_episode_frames (the same names and meanings in both
scripts' Args). Fixed for both: frame skip 4 and up to 30 no-op starts (FRAME_SKIP, NOOP_MAX), FIRE after a lost life
in the games that have it, one ale-py thread per core this process may use.
"""

import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import av
import gymnasium as gym
import numpy as np


def atari_game(env_id: str) -> Optional[str]:
    """envpool-style id -> ale-py ROM name ("MsPacman-v5" -> "ms_pacman"); None for other ids."""
    m = re.fullmatch(r"([A-Z][A-Za-z0-9]*)-v5", env_id)
    return None if m is None else re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()


# Atari's frame skip (the last two frames max-pooled) and no-op starts: PQN's, CleanRL's and envpool's settings
FRAME_SKIP, NOOP_MAX = 4, 30
MINATAR_GAMES = {
    g: re.sub(r"(?<!^)(?=[A-Z])", "_", g).lower()
    for g in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
}


def minatar_game(env_id: str) -> Optional[tuple]:
    """`MinAtar/SpaceInvaders-v1` -> ("space_invaders", True: the minimal action set; -v0: all 6); None: others."""
    m = re.fullmatch(r"MinAtar/([A-Za-z]+)-v([01])", env_id)
    return None if m is None or m[1] not in MINATAR_GAMES else (MINATAR_GAMES[m[1]], m[2] == "1")


def minatar_environment():
    """minatar.Environment, imported without the pyplot and seaborn that the package imports for a GUI never drawn
    here (~3-5 s of every MinAtar run's start); they import normally afterwards."""
    if "minatar" not in sys.modules and "matplotlib.pyplot" not in sys.modules:
        import logging

        sys.modules["matplotlib.pyplot"] = None  # `from matplotlib import pyplot` raises ImportError
        logging.disable(logging.WARNING)
        try:
            import minatar  # noqa: F401
        finally:
            del sys.modules["matplotlib.pyplot"]
            logging.disable(logging.NOTSET)
    from minatar import Environment

    return Environment


def check_env_id(env_id: str) -> None:
    """A clear error for an id that is neither an ale-py ROM, a MinAtar game nor a gymnasium registration."""
    import difflib

    if minatar_game(env_id) is not None:
        try:
            minatar_environment()
        except ImportError:
            raise ValueError(f"--env-id {env_id!r} needs the minatar package (pip install minatar)") from None
        return
    if env_id.lower().startswith("minatar"):
        close = difflib.get_close_matches(env_id, [f"MinAtar/{g}-v{v}" for g in MINATAR_GAMES for v in (0, 1)], 3, 0.5)
        raise ValueError(
            f"--env-id {env_id!r} is no MinAtar game: the ids are MinAtar/<Game>-v1 (minimal action set) "
            f"or -v0 (all 6 actions) for {', '.join(MINATAR_GAMES)}; close matches: {close or 'none'}"
        )
    from ale_py.roms import get_all_rom_ids  # here: a MinAtar run needs no ale-py

    roms, game = get_all_rom_ids(), atari_game(env_id)
    ale_gym_ids = {k for k, spec in gym.registry.items() if "ale_py" in str(spec.entry_point)}
    if game in roms or game is None and env_id not in ale_gym_ids and (":" in env_id or env_id in gym.registry):
        return  # an Atari game, or a gymnasium id ("module:EnvId" imports the module that registers it)
    if env_id in ale_gym_ids:  # e.g. ALE/Breakout-v5: one env, full-size RGB frames, no vector env
        raise ValueError(
            f"--env-id {env_id!r} is ale-py's single-env gymnasium id; use the envpool-style id "
            f"{env_id.split('/')[-1].split('-')[0]}-v5 (ale-py's AtariVectorEnv, PQN's preprocessing)"
        )
    ids = ["".join(p.capitalize() for p in rom.split("_")) + "-v5" for rom in roms] + [
        k for k in gym.registry if k not in ale_gym_ids
    ]
    close = difflib.get_close_matches(env_id, ids, 5, 0.5)
    raise ValueError(
        f"--env-id {env_id!r} is neither an Atari game of ale-py (envpool-style ids such as Breakout-v5) "
        f"nor a registered gymnasium id; close matches: {close or 'none'}"
    )


def check_env(args) -> None:
    """check_env_id, and for a gymnasium id one env made and closed: its frames must be uint8 of frame_shape(args) and
    its actions Discrete. Raises ValueError naming the flag."""
    check_env_id(args.env_id)
    if atari_game(args.env_id) is not None or minatar_game(args.env_id) is not None:
        return
    try:
        env = gym.make(args.env_id)
    except (gym.error.Error, ImportError) as error:
        raise ValueError(f"--env-id {args.env_id!r}: {error}") from None
    frames, actions, want = env.observation_space, env.action_space, frame_shape(args)
    env.close()
    if getattr(frames, "shape", None) != want or getattr(frames, "dtype", None) != np.uint8:
        raise ValueError(
            f"--env-id {args.env_id} gives frames {getattr(frames, 'shape', frames)} {getattr(frames, 'dtype', '')}, "
            f"the flags ask for uint8 {want}: set --frame-height/--frame-width/--rgb to match"
        )
    if not isinstance(actions, gym.spaces.Discrete):
        raise ValueError(f"--env-id {args.env_id} has actions {actions}: Q-networks need a Discrete action space")


class GymnasiumVectorEnv:
    """Registered gymnasium envs with ale-py's vector interface: frames stacked like ale-py's (zeros, then the reset
    frame), next-step autoreset, send/recv, and info["lives"] (0 when the env has none)."""

    def __init__(self, env_id: str, num_envs: int, stack_size: int):
        make = lambda: gym.wrappers.FrameStackObservation(gym.make(env_id), stack_size, padding_type="zero")  # noqa
        self.envs = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
        self.single_action_space, self.num_envs, self.actions = self.envs.single_action_space, num_envs, None
        self.single_observation_space = self.envs.single_observation_space

    def reset(self, seed: int):
        return self.envs.reset(seed=seed)[0], {"lives": np.zeros(self.num_envs, np.int64)}

    def send(self, actions: np.ndarray) -> None:
        self.actions = actions

    def recv(self):
        obs, rewards, terminated, truncated, info = self.envs.step(self.actions)
        return obs, rewards, terminated, truncated, {"lives": np.asarray(info.get("lives", 0 * terminated))}

    def step(self, actions: np.ndarray):  # send, then recv
        return self.send(actions) or self.recv()

    def close(self) -> None:
        self.envs.close()


class FireAfterLifeLoss:
    """ale-py's AtariVectorEnv whose step after a life loss plays FIRE (SB3's FireResetEnv, as CleanRL dqn_atari): an
    ordinary step, marked info["forced"] and treated as an autoreset step, since its recorded action was not played:
    no learning transition (PQN's loss mask, the Lake, replay); its reward counts in the game."""

    def __init__(self, envs, fire: int):
        self.envs, self.fire = envs, fire
        self.fire_next = np.zeros(envs.num_envs, bool)

    def __getattr__(self, name):  # spaces, num_envs, ale, ...: the wrapped env's
        return getattr(self.envs, name)

    def reset(self, seed: int):
        self.fire_next = np.zeros(self.envs.num_envs, bool)
        return self.envs.reset(seed=seed)

    def send(self, actions: np.ndarray) -> None:
        self.envs.send(np.where(self.fire_next, self.fire, actions).astype(actions.dtype))

    def recv(self):
        obs, rewards, terminated, truncated, info = self.envs.recv()
        info["forced"] = self.fire_next
        self.fire_next = terminated & ~truncated & (info["lives"] > 0)
        return obs, rewards, terminated, truncated, info

    def step(self, actions: np.ndarray):  # send, then recv
        return self.send(actions) or self.recv()


class MinAtarVectorEnv:
    """MinAtar games with ale-py's vector interface, stepped in one Python loop (5-60 µs a step): uint8 0/1 grids,
    next-step autoreset, a game truncated (bootstrapped) after `max_steps` steps. Env n is seeded with seed + n at
    reset, which also forgets the action a sticky step would repeat: a reset gives the same games in any process."""

    def __init__(self, game: str, num_envs: int, stack_size: int, minimal_actions: bool, sticky: float, max_steps: int):
        Environment = minatar_environment()
        self.games = [Environment(game, sticky_action_prob=sticky) for _ in range(num_envs)]
        self.action_set = np.array(self.games[0].minimal_action_set() if minimal_actions else range(6))
        self.single_observation_space = gym.spaces.Box(0, 1, (stack_size, *self.games[0].state_shape()), np.uint8)
        self.single_action_space = gym.spaces.Discrete(len(self.action_set))
        self.num_envs, self.max_steps, self.actions = num_envs, max_steps, None
        self.obs = np.zeros((num_envs, *self.single_observation_space.shape), np.uint8)
        self.steps, self.over = np.zeros(num_envs, np.int64), np.zeros(num_envs, bool)
        self.no_lives = {"lives": np.zeros(num_envs, np.int64)}

    def _start(self, n: int) -> None:
        self.games[n].reset()
        self.games[n].last_action = 0
        self.obs[n], self.steps[n] = 0, 0

    def reset(self, seed: int):
        for n, game in enumerate(self.games):
            game.seed(seed + n)
            self._start(n)
            self.obs[n, -1] = game.state()
        self.over[:] = False
        return self.obs.copy(), self.no_lives

    def send(self, actions: np.ndarray) -> None:
        self.actions = self.action_set[actions]

    def recv(self):
        rewards, terminated = np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, bool)
        stacked = self.obs.shape[1] > 1
        for n, game in enumerate(self.games):
            if self.over[n]:  # the step after a game's end returns the next game's reset obs, reward 0
                self._start(n)
            else:
                rewards[n], terminated[n] = game.act(self.actions[n])
                self.steps[n] += 1
                if stacked:
                    self.obs[n, :-1] = self.obs[n, 1:]
            self.obs[n, -1] = game.state()
        truncated = (self.steps >= self.max_steps) & ~terminated
        self.over = terminated | truncated
        return self.obs.copy(), rewards, terminated, truncated, self.no_lives

    def step(self, actions: np.ndarray):  # send, then recv
        return self.send(actions) or self.recv()

    def close(self) -> None:  # nothing to free
        return None


def make_envs(args, num_envs: int):
    """`num_envs` envs: uint8 observations (num_envs, stack, *frame), next-step autoreset, info["lives"]; a life loss
    is `terminated` while the game goes on, rewards raw (the learners clip them)."""
    game, minatar = atari_game(args.env_id), minatar_game(args.env_id)
    if minatar is not None:
        envs = MinAtarVectorEnv(
            minatar[0], num_envs, args.stack_size, minatar[1], args.repeat_action_probability, args.max_episode_frames
        )
    elif game is not None:
        from ale_py import Action
        from ale_py.vector_env import AtariVectorEnv

        envs = AtariVectorEnv(
            game,
            num_envs,
            frameskip=FRAME_SKIP,
            maxpool=True,
            img_height=args.frame_height,
            img_width=args.frame_width,
            grayscale=not args.rgb,
            stack_num=args.stack_size,
            noop_max=NOOP_MAX,
            episodic_life=False,
            life_loss_info=True,
            reward_clipping=False,
            use_fire_reset=True,
            repeat_action_probability=args.repeat_action_probability,
            max_num_frames_per_episode=args.max_episode_frames,
            num_threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        )
        action_set = list(envs.ale.get_action_set())
        if Action.FIRE in action_set:  # Breakout waits for FIRE after a lost life (CleanRL dqn_atari's FireReset)
            envs = FireAfterLifeLoss(envs, action_set.index(Action.FIRE))
    else:
        envs = GymnasiumVectorEnv(args.env_id, num_envs, args.stack_size)
    want = (args.stack_size, *frame_shape(args))
    space = envs.single_observation_space
    if tuple(space.shape) != want or space.dtype != np.uint8:
        raise ValueError(
            f"--env-id {args.env_id} gives observations {tuple(space.shape)} {space.dtype}, the flags "
            f"ask for uint8 {want}: set --frame-height/--frame-width/--rgb/--stack-size to match"
        )
    return envs


def frame_shape(args) -> tuple:
    """One frame: MinAtar's (10, 10, channels) grid (the channels are the game's), else (H, W), (H, W, 3) with --rgb."""
    minatar = minatar_game(args.env_id)
    if minatar is not None:
        return tuple(minatar_environment()(minatar[0]).state_shape())
    return (args.frame_height, args.frame_width) + ((3,) if args.rgb else ())


def minatar_rgb(grid: np.ndarray, scale: int = 32) -> np.ndarray:
    """A MinAtar grid (10, 10, C) in the package's own palette (black, then cubehelix at C inner points of [0, 1];
    a cell in several channels shows the last), each cell `scale` x `scale` pixels."""
    import matplotlib

    C = grid.shape[-1]
    palette = np.vstack([[0, 0, 0], matplotlib.colormaps["cubehelix"](np.linspace(0, 1, C + 2)[1:-1])[:, :3]])
    rgb = (palette[(grid * np.arange(1, C + 1)).max(-1)] * 255).round().astype(np.uint8)
    return rgb.repeat(scale, 0).repeat(scale, 1)


def frames_per_step(args) -> int:
    return FRAME_SKIP if atari_game(args.env_id) is not None else 1


def make_camera(args):
    """The env that films an Atari evaluation game in colour at 210x160 (ale-py's vector env never gives the screen):
    one more env of the same flags, reset with the filmed env's seed and sent its actions, plays the very same game."""
    return make_envs(replace(args, frame_height=210, frame_width=160, rgb=True, stack_size=1), 1)


def write_video(path: Path, frames: list, fps: int = 15) -> None:
    """An H.264 MP4 (yuv420p: browsers and wandb play it) of uint8 frames (H, W) or (H, W, 3), 15 fps (real time at
    frame skip 4), with PyAV (its wheel ships FFmpeg); odd sizes are padded to even (yuv420p halves them)."""
    frames = np.asarray(frames)
    if frames.ndim == 3:
        frames = np.repeat(frames[..., None], 3, axis=3)
    frames = np.pad(frames, ((0, 0), (0, frames.shape[1] % 2), (0, frames.shape[2] % 2), (0, 0)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width, stream.pix_fmt = frames.shape[1], frames.shape[2], "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())  # flush the encoder's delayed frames
