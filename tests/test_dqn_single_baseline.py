"""dqn_single_baseline.py on CPU: the replay memory against real ale-py streams (bit-exact stacks, wrap-around,
memory per transition), the TD target of dqn_update on fixed Q-tables, learning on tests/synthetic_env.py (and
the number of gradient steps, from Adam's own counter), a real SIGTERM stopping a run mid-round and its resume
reaching --total-frames, a stop at a round end and a SIGKILL mid-round each resumed bit-identical to an
uninterrupted run (best.pt too), the videos (MP4, also in the offline wandb run).
The script runs as a subprocess, as a user runs it.
"""

import functools
import glob
import json
from types import SimpleNamespace
import signal
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

import compare
from script_runs import load, metrics, only_run_dir, read_video, run, start
import dqn_single_baseline as dqn
from lake import Lake

# 8 envs x 60 steps = 480 frames a round (= an evaluation period), 3 rounds; the memory (120 steps per env)
# wraps in round 2. gamma 0.5 and lr 3e-4 make PondGlyph (a one-step problem) quick to learn.
SMALL = [
    "--env-id",
    "tests.synthetic_env:PondGlyphSmall-v0",
    "--frame-height",
    "36",
    "--frame-width",
    "36",
    "--num-envs",
    "8",
    "--total-frames",
    "1440",
    "--learning-starts",
    "240",
    "--buffer-size",
    "960",
    "--eval-every-frames",
    "480",
    "--log-every-frames",
    "240",
    "--eval-episodes",
    "8",
    "--eval-epsilon",
    "0",
    "--exploration-fraction",
    "0.3",
    "--target-network-frequency",
    "200",
    "--gamma",
    "0.5",
    "--learning-rate",
    "3e-4",
]
CKPTS = [f"ckpt_{f:013d}.pt" for f in (480, 960, 1440)]
LAST, LAST_REPLAY = CKPTS[-1], "replay_0000000001440"
# Gradient steps of a SMALL run, derived from the flags (PondGlyph: 1 frame per env step, so frames =
# transitions). The updates owed are paid at the start of each env step, before its transitions arrive:
# int((transitions - learning_starts) * replay_ratio / batch_size) in total. The last step starts with
# total_frames - num_envs transitions, so the run ends with (1440 - 8 - 240) new transitions after learning
# starts x replay ratio 8 (the default) / batch size 32 (the default) = 1192 x 8 / 32 = 298 gradient steps.
SMALL_UPDATES = (1440 - 8 - 240) * 8 // 32


run_script = functools.partial(run, "dqn_single_baseline.py")


def without_timings(rows: list) -> list:
    return [{k: v for k, v in r.items() if k != "charts/SPS"} for r in rows]


def assert_same_state(a: dict, b: dict) -> None:
    assert (
        a["global_frames"] == b["global_frames"]
        and a["updates"] == b["updates"]
        and a["target_syncs"] == b["target_syncs"]
    )
    for net in ("q_network", "target_network"):
        assert a[net].keys() == b[net].keys()
        assert all(torch.equal(a[net][k], b[net][k]) for k in a[net]), net
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert all(
        torch.equal(sa[i]["exp_avg"], sb[i]["exp_avg"]) and torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"])
        for i in sa
    )
    assert a["replay_rng"] == b["replay_rng"]


# ====================================================================== replay memory
def feed(memory, envs, num_steps: int, rng: np.random.Generator, round_ends=(), seed: int = 1) -> list:
    """Step `envs` with random actions, adding every step to `memory` as the script does (a round end adds the
    obs after the last step as a last step, then resets; a FIRE forced after a life loss is no transition, its next
    obs no reset obs); returns what each added step was."""
    steps = []

    def add(obs, actions, rewards, terminated, truncated, episode_start, reset_obs):
        steps.append(
            dict(
                obs=obs.copy(),
                actions=actions.copy(),
                rewards=np.asarray(rewards, np.float32).copy(),
                terminated=terminated.copy(),
                truncated=truncated.copy(),
                episode_start=episode_start.copy(),
                reset_obs=reset_obs.copy(),
            )
        )
        memory.add(obs, actions, rewards, terminated, truncated, episode_start, reset_obs)

    obs, _ = envs.reset(seed=seed)
    N = obs.shape[0]
    episode_start, game_over = np.ones(N, bool), np.zeros(N, bool)
    reset_obs = episode_start
    for t in range(num_steps):
        if t in round_ends:
            no_flag = np.zeros(N, bool)
            add(obs, np.zeros(N, np.int64), np.zeros(N, np.float32), no_flag, no_flag, episode_start, reset_obs)
            obs, _ = envs.reset(seed=seed + t)
            episode_start, game_over = np.ones(N, bool), np.zeros(N, bool)
            reset_obs = episode_start
        actions = rng.integers(envs.single_action_space.n, size=N)
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
        add(obs, actions, rewards, terminated, truncated, episode_start, reset_obs)
        now_over = truncated | (terminated & (info["lives"] == 0))
        reset_obs, episode_start, game_over = game_over, game_over | info.get("forced", False), now_over
        obs = next_obs
    return steps


def expected_transitions(steps: list, capacity_per_env: int, stack: int) -> dict:
    """{(env, step): (obs, next_obs, action, reward, terminated, truncated)} of every transition the memory
    must hold: step k in the ring's window, step k+1 added and no episode start, and every frame of obs_k
    (back to its episode's reset obs, at most stack - 1 steps back) still in the window."""
    K, N = len(steps), steps[0]["actions"].shape[0]
    oldest = max(0, K - capacity_per_env)
    out = {}
    for n in range(N):
        start = None
        for k in range(K):
            if steps[k]["reset_obs"][n]:
                start = k
            age = min(k - start, stack - 1)
            if k >= oldest and k + 1 < K and not steps[k + 1]["episode_start"][n] and k - age >= oldest:
                s = steps[k]
                out[(n, k)] = (
                    s["obs"][n],
                    steps[k + 1]["obs"][n],
                    s["actions"][n],
                    s["rewards"][n],
                    s["terminated"][n],
                    s["truncated"][n],
                )
    return out


def check_samples(memory, steps: list, stack: int, draws: int = 2000) -> None:
    """The memory holds exactly the expected transitions, and every sampled one is bit-for-bit what the env
    stream gave."""
    expected = expected_transitions(steps, memory.C, stack)
    oldest = max(0, memory.steps - memory.C)
    held = {(n, k) for n in range(memory.N) for k in range(oldest, memory.steps) if memory.valid[n, k % memory.C]}
    assert held == set(expected) and memory.num_transitions == len(expected) > 0
    rng = np.random.default_rng(0)
    for _ in range(draws // 250):
        batch = memory.sample(250, rng)
        keys = [tuple(w) for w in batch.where.tolist()]
        assert all(key in expected for key in keys), [key for key in keys if key not in expected][:5]
        want = [expected[key] for key in keys]
        for i, (name, dtype) in enumerate(
            [
                ("obs", None),
                ("next_obs", None),
                ("actions", torch.int64),
                ("rewards", torch.float32),
                ("terminated", torch.bool),
                ("truncated", torch.bool),
            ]
        ):
            got = getattr(batch, name)
            assert dtype is None or got.dtype == dtype, (name, got.dtype)
            assert torch.equal(got.cpu(), torch.from_numpy(np.stack([w[i] for w in want])).to(got.dtype)), name


def test_replay_memory_rebuilds_atari_stacks_bit_exactly(tmp_path):
    """A real AtariVectorEnv stream (30-step games: truncations, life losses with the FIRE forced after them,
    next-step autoresets; a round end with a fresh reset), before and after the ring wraps around; a reset stack's
    zeros are not stored, the stack after a forced FIRE goes on; a saved and loaded memory samples the same; about
    one frame per transition."""
    args = dqn.Args(env_id="Breakout-v5", num_envs=4, max_episode_frames=120)
    envs = dqn.make_envs(args, args.num_envs)
    memory = dqn.ReplayMemory(4 * 60, 4, (84, 84), 4, torch.device("cpu"))
    rng = np.random.default_rng(1)
    steps = feed(memory, envs, 45, rng)  # not wrapped yet
    check_samples(memory, steps, 4)
    steps += feed(memory, envs, 175, rng, round_ends=(80,), seed=7)  # wraps (about 3.7 times around each ring)
    envs.close()
    assert memory.steps == len(steps) > 3 * memory.C
    flags = {k: np.stack([s[k] for s in steps]) for k in ("terminated", "truncated", "episode_start", "reset_obs")}
    assert flags["truncated"].any() and flags["terminated"].any() and flags["reset_obs"][1:].sum() > 10
    assert (flags["episode_start"] & ~flags["reset_obs"]).sum() > 10  # the obs after a forced FIRE
    check_samples(memory, steps, 4)

    memory.save(tmp_path / "replay")
    loaded = dqn.ReplayMemory(4 * 60, 4, (84, 84), 4, torch.device("cpu"))
    loaded.load(tmp_path / "replay")
    a, b = memory.sample(64, np.random.default_rng(5)), loaded.sample(64, np.random.default_rng(5))
    assert all(
        torch.equal(getattr(a, k), getattr(b, k)) for k in ("obs", "next_obs", "actions", "rewards", "terminated")
    )

    big = dqn.ReplayMemory(4000, 4, (84, 84), 4, torch.device("cpu"))
    scalars = 8 + 4 + 1 + 1 + 1 + 1  # action, reward, terminated, truncated, age, valid
    assert big.nbytes() / 4000 <= 1.1 * 84 * 84 + scalars


class PaddedStream:
    """A vector env stand-in whose reset stacks are random (not zero-padded), with frequent episode ends. RGB-shaped
    frames."""

    class single_action_space:
        n = 5

    def __init__(self, num_envs: int, stack: int, frame_shape: tuple, seed: int):
        self.N, self.S, self.shape, self.rng = num_envs, stack, frame_shape, np.random.default_rng(seed)

    def _reset_stack(self) -> np.ndarray:
        pads = self.rng.integers(0, 256, (self.S - 1, *self.shape), np.uint8) * (self.rng.random() < 0.7)
        return np.concatenate([pads, self.rng.integers(0, 256, (1, *self.shape), np.uint8)])

    def reset(self, seed: int):
        self.obs = np.stack([self._reset_stack() for _ in range(self.N)])
        self.over = np.zeros(self.N, bool)
        return self.obs.copy(), {}

    def step(self, actions):
        new = self.rng.integers(0, 256, (self.N, 1, *self.shape), np.uint8)
        obs = np.concatenate([self.obs[:, 1:], new], axis=1)
        for n in np.flatnonzero(self.over):  # next-step autoreset
            obs[n] = self._reset_stack()
        terminated = ~self.over & (self.rng.random(self.N) < 0.25)
        truncated = ~self.over & ~terminated & (self.rng.random(self.N) < 0.1)
        self.over = terminated | truncated
        self.obs = obs
        return (
            obs.copy(),
            self.rng.random(self.N).astype(np.float32),
            terminated,
            truncated,
            {"lives": np.zeros(self.N)},
        )


def test_replay_memory_refuses_an_env_whose_reset_stacks_are_not_zero_padded(tmp_path):
    """It stores no reset stack's older frames (every env here pads with zeros): another env's would be learnt from
    as zeros, so its first such reset stops the run (pqn_lake.py's Lake stores reset stacks whole)."""
    envs = PaddedStream(3, 4, (6, 5, 3), seed=0)
    memory = dqn.ReplayMemory(3 * 14, 3, (6, 5, 3), 4, torch.device("cpu"))
    with pytest.raises(ValueError, match="not zeros"):
        feed(memory, envs, 25, np.random.default_rng(2))
    lake = Lake(tmp_path / "lake", frame_shape=(6, 5, 3), stack_size=4, env_id="PaddedStream", capacity=1000)
    steps = feed(lake_feeder(lake), PaddedStream(3, 4, (6, 5, 3), seed=0), 40, np.random.default_rng(2))
    lake.commit(wait=True)
    batch = lake.sample(200, rng=np.random.default_rng(0))
    assert all(np.array_equal(obs, steps[step]["obs"][n]) for obs, (_, n, step) in zip(batch.obs, batch.where))
    lake.close()


def lake_feeder(lake):
    """An add() that appends each step to `lake` (as LakeReplay does, one step at a time; the Lake keeps every stack
    whole, so it takes no reset_obs: fields[:5])."""
    return SimpleNamespace(
        add=lambda obs, *fields: lake.append("g", obs[None], *(np.asarray(f)[None] for f in fields[:5]))
    )


# ====================================================================== the script
@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("small") / "runs"
    run_script(*SMALL, "--runs-dir", str(runs), "--capture-video", "--track")  # wandb offline (script_runs.ENV)
    return only_run_dir(runs)


def test_learns_synthetic_env_and_writes_its_outputs(small_run):
    """eval/return >= 90% of the optimum (16) on PondGlyph; every metric, config.json, checkpoints, videos (also in
    the offline wandb run)."""
    rows = metrics(small_run)
    evals = [r for r in rows if "eval/return" in r]
    assert [r["global_frames"] for r in evals] == [480, 960, 1440]
    assert evals[-1]["eval/return"] >= 0.9 * 16, evals
    keys = set().union(*rows)
    for key in [
        "eval/return",
        "eval/length",
        "charts/episodic_return",
        "charts/episodic_length",
        "losses/td_loss",
        "losses/q_values",
        "charts/epsilon",
        "charts/SPS",
        "charts/replay_ratio",
    ]:
        assert key in keys, key
    frames = [r["global_frames"] for r in rows]
    assert frames == sorted(frames) and frames[-1] == 1440

    env_id, exp_name, seed, stamp = small_run.name.split("__")
    assert (env_id, exp_name, seed) == (
        "tests.synthetic_env_PondGlyphSmall-v0",
        "dqn_single_baseline",
        "1",
    ) and stamp.isdigit()
    config = json.loads((small_run / "config.json").read_text())
    assert config["script"] == "dqn_single_baseline" and config["env_id"] == "tests.synthetic_env:PondGlyphSmall-v0"
    assert config["seed"] == 1 and config["buffer_size"] == 960
    (run,) = compare.load_runs([str(small_run)], "eval/return")
    assert run["script"] == "dqn_single_baseline" and list(run["frames"]) == [480, 960, 1440]

    ckpts = sorted(p.name for p in (small_run / "checkpoints").iterdir())
    assert ckpts == ["best.pt"] + CKPTS + [LAST_REPLAY]
    state = load(small_run / "checkpoints" / LAST)
    assert state["round"] == 3 and state["transitions"] == 1440 and state["replay"] == LAST_REPLAY
    # The replay ratio, independently of the script's own count: Adam counts the steps it took.
    adam_steps = {int(s["step"]) for s in state["optimizer"]["state"].values()}
    assert adam_steps == {state["updates"]} == {SMALL_UPDATES}, (adam_steps, state["updates"], SMALL_UPDATES)
    assert [r["charts/updates"] for r in rows if "charts/updates" in r][-1] == SMALL_UPDATES
    assert set(state["rng"]) >= {"torch", "numpy", "python"}
    replay = torch.load(small_run / "checkpoints" / LAST_REPLAY / "state.pt", weights_only=False)
    assert replay["steps"] == 3 * 61  # 60 steps a round, plus the round's last obs
    assert np.load(small_run / "checkpoints" / LAST_REPLAY / "frames.npy").shape == (8, 120, 36, 36)
    for frames in (480, 960, 1440):  # the first game (16 steps) of every evaluation, its observations as RGB
        assert read_video(small_run / "videos" / f"eval_{frames:013d}.mp4").shape == (16, 36, 36, 3)
    videos = small_run / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "**" / "*.mp4"
    assert len(glob.glob(str(videos), recursive=True)) == 3


def test_best_checkpoint_holds_the_best_evaluation_so_far(small_run):
    """checkpoints/best.pt: the network of the best evaluation in metrics.jsonl, replaced only by a strictly better one
    (the first evaluation reaching the best return); each checkpoint carries the best return so far (--resume)."""
    evals = [(r["eval/return"], r["global_frames"]) for r in metrics(small_run) if "eval/return" in r]
    best = load(small_run / "checkpoints" / "best.pt")
    top = max(e[0] for e in evals)
    assert best["best"] == {"return": top, "global_frames": next(f for e, f in evals if e == top)}
    assert best["global_frames"] == best["best"]["global_frames"] and best["args"]["env_id"] == SMALL[1]
    for name, frames in zip(CKPTS, (480, 960, 1440)):
        assert load(small_run / "checkpoints" / name)["best_return"] == max(e for e, f in evals if f <= frames)
    # an evaluation is at a round end here: best.pt's network is that round's checkpoint's
    ckpt = load(small_run / "checkpoints" / f"ckpt_{best['global_frames']:013d}.pt")
    assert all(torch.equal(ckpt["q_network"][n], best["q_network"][n]) for n in ckpt["q_network"])


def test_evaluate_films_the_first_atari_game_in_colour():
    """Atari: the film is the first game's, one frame per step, in colour at the native 210x160 (make_camera), and
    filming changes no evaluation."""
    args = dqn.Args(env_id="Breakout-v5", eval_episodes=2, max_episode_frames=400, eval_epsilon=0.5)
    envs, cpu = dqn.make_envs(args, 2), torch.device("cpu")
    torch.manual_seed(0)
    q_network = dqn.make_q_network(args, envs.single_action_space.n, cpu)
    results = []
    for film in (True, False):  # (the evaluation's ε is drawn from a generator of its own, seeded by the seed)
        results.append(dqn.evaluate([q_network], args, envs, 5, cpu, film=film))
    envs.close()
    (returns, lengths, video), (plain_returns, plain_lengths, no_video) = results
    assert np.array_equal(returns, plain_returns) and np.array_equal(lengths, plain_lengths) and no_video == []
    assert len(video) == lengths[0, 0] > 1 and video[0].shape == (210, 160, 3)


def assert_same_run(reference: Path, run_dir: Path) -> None:
    """run_dir ended bit-identical to the uninterrupted reference: networks, optimizer, replay draws, the
    replay snapshot, and one metrics.jsonl with the same lines (timings aside)."""
    a, b = (load(r / "checkpoints" / LAST) for r in (reference, run_dir))
    assert_same_state(a, b)
    ra, rb = (
        torch.load(r / "checkpoints" / LAST_REPLAY / "state.pt", weights_only=False) for r in (reference, run_dir)
    )
    assert all(np.array_equal(ra[k], rb[k]) for k in ("actions", "rewards", "terminated", "valid", "age"))
    fa, fb = (np.load(r / "checkpoints" / LAST_REPLAY / "frames.npy") for r in (reference, run_dir))
    assert np.array_equal(fa, fb)
    ba, bb = (load(r / "checkpoints" / "best.pt") for r in (reference, run_dir))  # the best so far came through
    assert ba["best"] == bb["best"] and all(
        torch.equal(ba["q_network"][n], bb["q_network"][n]) for n in ba["q_network"]
    )
    assert without_timings(metrics(reference)) == without_timings(metrics(run_dir))  # one metrics.jsonl, continued


def run_until(line_start: str, *flags: str, sig: int) -> str:
    """Start the script, send `sig` as soon as it prints a line starting with `line_start`, wait for its end
    (asserting exit 0 unless SIGKILL); returns its output."""
    proc = start("dqn_single_baseline.py", *flags)
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith(line_start):
            proc.send_signal(sig)
            break
    output += proc.stdout.readlines()
    status = proc.wait(timeout=300)
    assert status == (-signal.SIGKILL if sig == signal.SIGKILL else 0), "".join(output)
    return "".join(output)


def test_sigterm_stops_mid_round_and_resume_reaches_total_frames(tmp_path):
    """SIGTERM right after round 1 starts (480 frames a round): the run checkpoints after the env step in
    progress, well before the round's end, and exits 0; --resume resets the envs, ends its first round at 480
    (where the cut round would have ended) and reaches --total-frames with one log line per frame count, the
    evaluations at 480, 960, 1440 and the same gradient step count (a faithful continuation, not bit-exact)."""
    runs = tmp_path / "runs"
    output = run_until("round 1:", *SMALL, "--runs-dir", str(runs), sig=signal.SIGTERM)
    run_dir = only_run_dir(runs)
    assert "got SIGTERM: checkpointing and exiting after this env step" in output and "cut at" in output, output
    (ckpt,) = [p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt")]
    stop = load(run_dir / "checkpoints" / ckpt)["global_frames"]
    assert 0 < stop < 480 and stop % 8 == 0, output  # mid-round, on an env step boundary
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        f"ckpt_{stop:013d}.pt",
        f"replay_{stop:013d}",
    ]
    assert metrics(run_dir)[-1]["global_frames"] == stop and "charts/SPS" in metrics(run_dir)[-1]  # logged on stop
    # --resume takes the best return so far from the checkpoint: given one no evaluation can beat, no best.pt is written
    state = load(run_dir / "checkpoints" / ckpt)
    assert state["best_return"] == -float("inf")  # no evaluation before the stop
    torch.save({**state, "best_return": 1e9}, run_dir / "checkpoints" / ckpt)

    output = run_script("--resume", str(run_dir))
    assert f"round 2: from {stop:,} to 480 frames" in output, output
    rows = metrics(run_dir)
    assert [r["global_frames"] for r in rows if "eval/random_return" in r] == [0]  # random play, once, when it started
    rows = [r for r in rows if "eval/random_return" not in r]
    kinds = Counter((r["global_frames"], "eval/return" in r) for r in rows)
    assert max(kinds.values()) == 1, kinds  # no frame count logged twice
    assert [r["global_frames"] for r in rows if "eval/return" not in r] == sorted({stop, *range(240, 1441, 240)})
    assert [r["global_frames"] for r in rows if "eval/return" in r] == [480, 960, 1440]
    # ...and no best.pt: no evaluation beat the best return the checkpoint gave
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == sorted(
        [f"ckpt_{stop:013d}.pt", *CKPTS, LAST_REPLAY]
    )
    state = load(run_dir / "checkpoints" / LAST)
    assert state["round"] == 4 and state["global_frames"] == state["transitions"] == 1440
    assert state["updates"] == SMALL_UPDATES  # the gradient step schedule depends on the transition count only
    assert rows[-1]["eval/return"] >= 0.9 * 16, rows[-1]


def test_stop_at_round_end_resumes_identical_to_uninterrupted_run(small_run, tmp_path):
    """--stop-after-checkpoints 1 (the stop at a round end) and --resume: bit-identical to the uninterrupted run."""
    runs = tmp_path / "runs"
    output = run_script(*SMALL, "--runs-dir", str(runs), "--capture-video", "--stop-after-checkpoints", "1")
    run_dir = only_run_dir(runs)
    assert "stopping after round 1; continue with --resume" in output, output
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", CKPTS[0], "replay_0000000000480"]
    run_script("--resume", str(run_dir))
    assert_same_run(small_run, run_dir)


def test_sigkill_mid_round_resumes_identical_to_uninterrupted_run(small_run, tmp_path):
    """SIGKILL in round 2, after its 720-frame log line: --resume drops that line, redoes round 2 from the
    round-1 checkpoint and ends bit-identical to the uninterrupted run."""
    runs = tmp_path / "runs"
    run_until("frames 720 ", *SMALL, "--runs-dir", str(runs), "--capture-video", sig=signal.SIGKILL)
    run_dir = only_run_dir(runs)
    assert [p.name for p in (run_dir / "checkpoints").glob("ckpt_*.pt")] == [CKPTS[0]]
    assert metrics(run_dir)[-1]["global_frames"] == 720  # a line past the checkpoint, for the resume to drop
    output = run_script("--resume", str(run_dir))
    assert "round 1, 480 frames" in output and "round 2: from 480 to 960 frames" in output, output
    assert_same_run(small_run, run_dir)


class TableQ(nn.Module):
    """Q-values looked up in a fixed table by obs[:, 0], plus a zero parameter (for the optimizer)."""

    def __init__(self, table: list):
        super().__init__()
        self.table = torch.tensor(table, dtype=torch.float32)
        self.zero = nn.Parameter(torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.table[obs[:, 0].long()] + self.zero


def test_dqn_update_td_target():
    """The TD target on hand-made Q-tables: the online net picks action 1 in s' (5 > 2 > 0), the target net
    would pick action 0 (9); Double DQN rates the online pick with the target net (3), not the target's max (9).
    Rewards are clipped to their sign, `terminated` cuts the bootstrap, `truncated` does not.
    Q(s, a=0) = 0 in both nets, so the loss is the mean of (0 - target)^2."""
    online, target = TableQ([[0, 0, 0], [1, 5, 2]]), TableQ([[0, 0, 0], [9, 3, 7]])
    batch = dqn.Batch(
        obs=torch.zeros((3, 4), dtype=torch.uint8),
        next_obs=torch.ones((3, 4), dtype=torch.uint8),
        actions=torch.zeros(3, dtype=torch.int64),
        rewards=torch.tensor([5.0, -0.5, 0.0]),
        terminated=torch.tensor([False, True, False]),
        truncated=torch.tensor([False, False, True]),
        where=None,
    )
    optimizer = torch.optim.SGD(online.parameters(), lr=0.0)
    args = dqn.Args(gamma=0.5)
    targets = torch.tensor([1 + 0.5 * 3.0, -1.0, 0 + 0.5 * 3.0])
    want = (targets**2).mean()
    got, q_mean = dqn.dqn_update(online, target, optimizer, batch, args, {})
    assert got.item() == pytest.approx(want.item()) and q_mean.item() == 0.0
    # the gradient flows through Q(s, a) only, not through the target: d/dz mean((z - y)^2)
    assert online.zero.grad.item() == pytest.approx(-2 * targets.mean().item())
    assert target.zero.grad is None  # the target is computed without a graph
    assert online.zero.item() == 0.0 and target.zero.item() == 0.0


def test_epsilon_schedule():  # (the env ids are envs.py's, tested in test_pqn_lake.py)
    assert dqn.linear_schedule(1.0, 0.01, 1000, 0) == 1.0
    assert dqn.linear_schedule(1.0, 0.01, 1000, 500) == pytest.approx(0.505)
    assert dqn.linear_schedule(1.0, 0.01, 1000, 5000) == 0.01
