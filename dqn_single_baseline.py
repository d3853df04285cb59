"""dqn_single_baseline.py: the single-agent side of the comparison: one Double DQN agent on --total-frames (100M) env
frames, CleanRL dqn_atari.py style, vectorised, with a replay memory that stores every frame once on the training
device. The network, ε-greedy, seeds and evaluation are pqn_lake.py's.

    Q, Q_target := the same random Nature CNN (with LayerNorm, as pqn_lake's BigAgent); replay memory D
    while global_frames < total_frames:                                          (one round)
        reset every env (seed derived from (seed, round))
        repeat until the round's frames are spent:
            a = ε-greedy(Q(obs)), ε linear from --start-e to --end-e over --exploration-fraction of the frames
            send a to the envs; while they step, once --learning-starts transitions are in D: enough gradient
                steps on uniform --batch-size minibatches to keep --replay-ratio samples per new transition,
                y = sign(r) + γ (1 - terminated) Q_target(s', argmax Q(s')); Q_target := τ Q + (1 - τ) Q_target
                every --target-network-frequency transitions
            receive obs', r, terminated, truncated; add the step to D
            every --eval-every-frames: --eval-episodes games at ε = --eval-epsilon on envs of their own
        checkpoint (after SIGTERM / SIGUSR1 / Ctrl-C or --stop-after-checkpoints: then exit 0)

Rounds: ale-py cannot save its emulators, so a run can stop and continue exactly only where every env is reset anyway:
a round (one evaluation period) starts with every env reset and ends with a checkpoint; the games running at its end
are cut (not logged; their last transition keeps its true next obs). A signal ends the round after the env step in
progress; --resume starts a new round there that ends at the next multiple of the round length, so later frame counts
stay. A stop at a round end and a run killed without a signal are bit-exact.

Outputs in runs/<run_name>/: config.json, metrics.jsonl (step: global_frames = env steps x frame skip, as pqn_lake.py),
checkpoints/ckpt_*.pt with the latest replay snapshot checkpoints/replay_*/ (frames.npy + state.pt, never pickled),
checkpoints/best.pt (the best evaluation's network), videos/ (--capture-video), wandb/ (--track).
"""

import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before CUDA starts)
# torch's OpenMP threads sleep between parallel regions instead of spinning (read when torch loads): spinning doubled
# the CPU time of the same run, and more next to a busy process (benchmarks/RESULTS.md, "CPU time under load")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro

from envs import frame_shape, frames_per_step, make_envs, minatar_game
from lake import Batch
import lifecycle
from lifecycle import atomic_save, derive_seed, one_line_errors, set_determinism, usage_error

# the loop's ε-greedy, evaluation protocol (ε from its own generator) and CUDA graphs
from evaluation import epsilon_greedy, evaluate
from networks import chosen, make_q_network  # pqn_lake.py's networks (a test holds them equal)
from speed import graphed


@dataclass
class Args:
    # ---------------------------------------------------------------- run (as pqn_lake.py)
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment (part of the run name)"""
    seed: int = 1
    """seed of the experiment (network, envs, replay draws and evaluation derive theirs from it)"""
    torch_deterministic: bool = True
    """if toggled, deterministic torch algorithms and cuDNN (needed for bit-exact resume)"""
    cuda: bool = True
    """if toggled, cuda will be enabled when available"""
    cuda_graphs: bool = True
    """on CUDA, each update's forward and backward replay one CUDA graph (Adam's step stays eager): the same results as
    eager (tests/test_cuda_graphs.py), 2.7x the steps/s on an H200 (benchmarks/gpu_bench.py); no effect on a CPU"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "pqn-lake"
    """the wandb's project name (pqn_lake.py's, so both scripts' runs sit side by side)"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """film the first evaluation game of every evaluation to runs/<run_name>/videos/ (and wandb with --track)"""
    runs_dir: str = "runs"
    """the folder that holds one subfolder per run"""
    resume: Optional[str] = None
    """continue the run in this folder from its latest checkpoint, with its own flags (--total-frames, with the ε
    schedule's length in frames kept, --stop-after-checkpoints, --keep-checkpoints, --capture-video, --track,
    --wandb-* may change; others are refused)"""
    keep_checkpoints: int = 0
    """how many of the latest ckpt_*.pt to keep (0: all; only the latest checkpoint's replay snapshot is kept)"""
    stop_after_checkpoints: int = 0
    """checkpoint and exit after this many rounds in this process (0: never); SIGTERM/SIGUSR1 stop after the env step"""

    # ---------------------------------------------------------------- environment (as pqn_lake.py)
    env_id: str = "Breakout-v5"
    """an Atari id in envpool style (Breakout-v5), a MinAtar id (MinAtar/Breakout-v1; -v0: all 6 actions) or a
    gymnasium id with uint8 image frames ("module:EnvId" allowed); a default None is the family's, named in its help"""
    total_frames: Optional[int] = None
    """total env frames; default: Atari 100M (the design's for the single agent), MinAtar 5M (the MinAtar paper's)"""
    num_envs: int = 8
    """parallel envs (CleanRL dqn_atari: 1; more envs step in parallel on ale-py's threads)"""
    frame_height: int = 84
    """frame height (Atari: resized to it; gymnasium ids: must match the env's frames; MinAtar: not used)"""
    frame_width: int = 84
    """frame width (as --frame-height)"""
    rgb: bool = False
    """colour frames (H, W, 3) instead of grayscale; CleanRL: grayscale (MinAtar: not used)"""
    stack_size: Optional[int] = None
    """frames stacked into one observation; default: Atari 4 (CleanRL), MinAtar 1 (the MinAtar paper)"""
    repeat_action_probability: Optional[float] = None
    """sticky actions; default: Atari 0 (as pqn_lake.py; Machado et al. 2018 recommend 0.25), MinAtar 0.1 (the
    minatar package's and the MinAtar paper's)"""
    max_episode_frames: int = 108_000
    """a game is truncated after this many frames (envpool/CleanRL: 108000; MinAtar games have no cap)"""

    # ---------------------------------------------------------------- DQN (defaults: Atari CleanRL dqn_atari.py,
    # MinAtar the MinAtar paper's DQN, Young & Tian 2019), with Double DQN targets and PQN's LayerNorm network
    learning_rate: Optional[float] = None
    """Adam learning rate; default: Atari 1e-4 (CleanRL), MinAtar 2.5e-4 (the MinAtar paper's, with centred RMSProp)"""
    buffer_size: Optional[int] = None
    """transitions the replay memory holds, split evenly over the envs; default: Atari 1M (CleanRL), MinAtar 100k"""
    gamma: float = 0.99
    """discount factor (CleanRL dqn_atari: 0.99)"""
    tau: float = 1.0
    """target network update rate, 1: a hard copy (CleanRL dqn_atari: 1.0)"""
    target_network_frequency: int = 1000
    """transitions (env steps of all envs) between target updates (CleanRL dqn_atari: 1000 env steps, every 250
    gradient steps at its replay ratio 8 and batch 32; the MinAtar paper: 1,000 updates at one a frame)"""
    batch_size: Optional[int] = None
    """transitions per gradient step; default: Atari 32 (CleanRL), MinAtar 128: the paper's batch of 32 every frame,
    as a batch of 128 every 4 frames (the same 32 samples per transition, Python's cost per update paid 4x less)"""
    start_e: float = 1.0
    """the starting ε of the ε-greedy exploration (CleanRL dqn_atari, the MinAtar paper: 1)"""
    end_e: Optional[float] = None
    """the final ε; default: Atari 0.01 (CleanRL dqn_atari), MinAtar 0.1 (the MinAtar paper)"""
    exploration_fraction: Optional[float] = None
    """ε decays linearly over this fraction of --total-frames; default: Atari 0.10 (CleanRL), MinAtar 100,000
    frames' worth (the MinAtar paper's decay: 0.02 of 5M)"""
    learning_starts: Optional[int] = None
    """transitions collected before learning starts; default: Atari 80,000 (CleanRL), MinAtar 5,000 (the paper)"""
    replay_ratio: Optional[float] = None
    """transitions sampled for gradient steps per new transition (logged: charts/replay_ratio); default: Atari 8
    (CleanRL dqn_atari: batch 32 every 4 steps), MinAtar 32 (the MinAtar paper: batch 32 every frame)"""

    # ---------------------------------------------------------------- evaluation and logging (as pqn_lake.py)
    eval_every_frames: Optional[int] = None
    """frames between evaluations, also a round's length; default: Atari 4,096,000 (24 in 100M, every 8th
    on the frame of a pqn_lake.py evaluation at its defaults), MinAtar 204,800 (one pqn_lake.py agent's period)"""
    eval_episodes: int = 10
    """full games per evaluation (each on its own env, played to its end)"""
    eval_max_frames: Optional[int] = None
    """an evaluation game stops after this many frames; default: Atari 108,000 (30 minutes), MinAtar 10,000"""
    eval_epsilon: float = 0.05
    """ε of the evaluation policy (Mnih et al. 2015: 0.05; CleanRL dqn_atari: 0.01)"""
    log_every_frames: int = 40_000
    """frames between training log lines (losses, ε, SPS, replay ratio, episodes finished since the last line)"""

    def __post_init__(self):
        lifecycle.apply_family_defaults(self, FAMILY_DEFAULTS)
        if self.exploration_fraction is None:  # MinAtar: the paper's decay of 100k frames, whatever --total-frames
            self.exploration_fraction = (
                0.10 if minatar_game(self.env_id) is None else min(1.0, 100_000 / self.total_frames)
            )


# ====================================================================== flag checks (as pqn_lake.py)
# The flags left None take their env family's default, (Atari, MinAtar); each flag's help names the sources.
FAMILY_DEFAULTS = {
    "total_frames": (100_000_000, 5_000_000),
    "stack_size": (4, 1),
    "repeat_action_probability": (0.0, 0.1),
    "learning_rate": (1e-4, 2.5e-4),
    "buffer_size": (1_000_000, 100_000),
    "batch_size": (32, 128),
    "end_e": (0.01, 0.1),
    "learning_starts": (80_000, 5_000),
    "replay_ratio": (8.0, 32.0),
    "eval_every_frames": (4_096_000, 204_800),
    "eval_max_frames": (108_000, 10_000),
}


def check_args(args: Args) -> None:
    """Every flag, before anything is created (instead of a segfault in ale-py at --num-envs 0, or a run that does
    nothing at --total-frames -5): the first bad one stops the run with one line naming it, its value and the rule."""
    must_be = {
        ">= 1": "total_frames num_envs stack_size max_episode_frames buffer_size target_network_frequency "
        "batch_size eval_every_frames eval_episodes eval_max_frames log_every_frames",
        ">= 0": "seed keep_checkpoints stop_after_checkpoints learning_starts replay_ratio",
        "in [0, 1]": "repeat_action_probability gamma tau start_e end_e exploration_fraction eval_epsilon",
        "> 0": "learning_rate",
    }
    lifecycle.check_flags(args, must_be)
    if args.buffer_size // args.num_envs < 2 * args.stack_size + 2:
        usage_error(
            f"--buffer-size {args.buffer_size}: must hold 2 x --stack-size + 2 = {2 * args.stack_size + 2} "
            f"steps per env, {(2 * args.stack_size + 2) * args.num_envs} transitions at --num-envs {args.num_envs}"
        )


# ====================================================================== seeds (derive_seed: lifecycle.py)
ENV_RESET, REPLAY_DRAW, EVALUATION = 0, 1, 2  # the purposes of derive_seed (as pqn_lake.py's)


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """CleanRL dqn_atari's ε schedule: linear from start_e to end_e over `duration`, then flat."""
    slope = (end_e - start_e) / max(duration, 1)
    return max(slope * t + start_e, end_e)


def to_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array on `device`: on CUDA pinned and non-blocking (from pageable memory the host would wait for the GPU
    to run all it has queued; the caching host allocator keeps the pinned block until the copy is done); on the CPU
    torch.from_numpy, no copy."""
    if device.type != "cuda":
        return torch.from_numpy(a)
    return torch.from_numpy(np.ascontiguousarray(a)).pin_memory().to(device, non_blocking=True)


# ====================================================================== replay memory
class ReplayMemory:
    """The last `capacity` steps of `num_envs` env streams (capacity // num_envs per stream, a ring each), every frame
    stored once on `device`; actions, rewards, flags and ages on the host.

    add(obs, actions, rewards, terminated, truncated, episode_start, reset_obs): one step of every env: `obs` (N,
    stack, *frame) uint8 numpy, the stacks the actions were chosen on; the rest what the env step returned;
    episode_start: no transition leads into obs (an autoreset step, or a FIRE forced after a life loss, whose next obs
    is no reset obs: its stack holds the frames before it); reset_obs: obs is a reset observation. Step k's transition
    (obs_k, a_k, r_k, terminated_k, truncated_k, obs_k+1) becomes sampleable when step k+1 is added.

    frames[n, k % C] is the newest frame of obs_k; age[n, k % C] the steps since the episode's reset obs (capped at
    stack - 1). Element s of obs_k is frame k - (stack-1) + s when s >= stack-1 - age, else zeros: every env here pads
    a reset stack with zeros (an env that pads otherwise is refused at its first such reset: pqn_lake.py's Lake keeps
    any reset stack). sample() draws uniformly over the valid transitions by rejection on the host-side flags (never
    reading the device) and gathers stack + 1 frames per transition: obs = [0, stack), next obs = [1, stack + 1).
    Host->device copies go through to_device, so neither add() nor sample() waits for the GPU."""

    # the host-side state a checkpoint keeps (the frames go to frames.npy beside it)
    HOST_STATE = "actions rewards terminated truncated age valid cur_age".split()

    def __init__(self, capacity: int, num_envs: int, frame_shape: tuple, stack_size: int, device: torch.device):
        self.N, self.C, self.S = num_envs, capacity // num_envs, stack_size
        if self.C < 2 * stack_size + 2:
            raise ValueError(f"--buffer-size {capacity} gives {self.C} steps per env; {2 * stack_size + 2} at least")
        self.frame_shape, self.device = tuple(frame_shape), device
        self.frames = torch.empty((self.N, self.C, *frame_shape), dtype=torch.uint8, device=device)
        shape = (self.N, self.C)
        self.actions, self.rewards = np.zeros(shape, np.int64), np.zeros(shape, np.float32)
        self.terminated, self.truncated = np.zeros(shape, bool), np.zeros(shape, bool)
        self.age, self.valid = np.zeros(shape, np.uint8), np.zeros(shape, bool)
        self.steps = 0  # steps added per env so far
        self.cur_age = np.zeros(self.N, np.int64)

    @property
    def num_transitions(self) -> int:
        """Valid (sampleable) transitions held."""
        return int(self.valid.sum())

    def nbytes(self) -> int:
        host = (self.actions, self.rewards, self.terminated, self.truncated, self.age, self.valid)
        return self.frames.nbytes + sum(a.nbytes for a in host)

    def add(self, obs: np.ndarray, actions, rewards, terminated, truncated, episode_start, reset_obs) -> None:
        k, S, C = self.steps, self.S, self.C
        p = k % C
        self.frames[:, p] = to_device(obs[:, -1], self.device)
        self.actions[:, p], self.rewards[:, p] = np.asarray(actions), rewards
        self.terminated[:, p], self.truncated[:, p] = terminated, truncated
        episode_start = np.asarray(episode_start, bool)
        reset_obs = np.asarray(reset_obs, bool)
        self.cur_age = np.where(reset_obs, 0, np.minimum(self.cur_age + 1, S - 1))
        if S > 1 and obs[reset_obs, :-1].any():
            raise ValueError(
                "the env pads its reset stacks with frames that are not zeros: the device replay memory rebuilds "
                "them as zeros: it would learn from other observations than the agent saw"
            )
        self.age[:, p] = self.cur_age
        # Validity: step k has no successor yet; step k-1 is a transition unless obs_k is a reset obs.
        self.valid[:, p] = False
        oldest = max(0, k - C + 1)
        if k > 0:
            prev = (k - 1) % C
            self.valid[:, prev] = ~episode_start & ((k - 1) - self.age[:, prev].astype(np.int64) >= oldest)
        # The frame of step k - C was overwritten: the oldest steps whose stacks needed it are gone too.
        if k >= C:
            for m in range(S - 1):  # step oldest + m needs frames back to oldest + m - age
                q = (oldest + m) % C
                self.valid[:, q] &= self.age[:, q] <= m
        self.steps += 1

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        """`batch_size` transitions, uniform with replacement over the held valid ones, as device tensors.
        `where` (B, 2): env and step index of each (for tests)."""
        N, C, S, B = self.N, self.C, self.S, batch_size
        held = min(self.steps, C)
        oldest = self.steps - held
        env, step = np.empty(B, np.int64), np.empty(B, np.int64)
        todo, rounds = np.arange(B), 0
        while len(todo):  # rejection keeps the draw uniform over the valid transitions
            flat = rng.integers(N * held, size=len(todo))
            env[todo], step[todo] = flat // held, oldest + flat % held
            todo = todo[~self.valid[env[todo], step[todo] % C]]
            rounds += 1
            if rounds == 1000 and len(todo) == B and not self.valid.any():
                raise RuntimeError("the replay memory holds no transition yet")
        p = step % C
        age = self.age[env, p].astype(np.int64)[:, None]
        v = np.arange(S + 1)[None]
        ring = env[:, None] * C + (step[:, None] - (S - 1) + v) % C  # frames of steps k-S+1 .. k+1
        stacks = self.frames.view(N * C, *self.frame_shape)[to_device(ring, self.device)]
        zero_pad = v < (S - 1) - age  # older than the episode's reset obs: the reset stack's zeros
        if zero_pad.any():
            mask = to_device(zero_pad, self.device).view(B, S + 1, *(1,) * len(self.frame_shape))
            stacks.masked_fill_(mask, 0)
        scalars = to_device(
            np.stack(
                [self.actions[env, p], self.rewards[env, p], self.terminated[env, p], self.truncated[env, p]]
            ).astype(np.float64),
            self.device,
        )
        actions, rewards, terminated, truncated = scalars
        obs, next_obs, where = stacks[:, :S], stacks[:, 1:], np.stack([env, step], 1)
        return Batch(obs, next_obs, actions.long(), rewards.float(), terminated.bool(), truncated.bool(), where)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything but the frames (small: ~16 bytes per transition)."""
        return {
            "capacity": self.N * self.C,
            "num_envs": self.N,
            "stack_size": self.S,
            "steps": self.steps,
            **{k: getattr(self, k) for k in self.HOST_STATE},
        }

    def load_state_dict(self, state: dict) -> None:
        if (state["capacity"], state["num_envs"], state["stack_size"]) != (self.N * self.C, self.N, self.S):
            raise ValueError("the replay snapshot was made with another --buffer-size/--num-envs/--stack-size")
        for k in ("steps", *self.HOST_STATE):
            setattr(self, k, state[k])

    def save(self, directory: Path) -> None:
        """frames.npy (the held frames, raw, written in 256 MB pieces from the device: never pickled, never
        whole in host memory) and state.pt (state_dict) in `directory`, made atomically (tmp dir, rename)."""
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        held = min(self.steps, self.C)
        out = np.lib.format.open_memmap(
            tmp / "frames.npy", mode="w+", dtype=np.uint8, shape=(self.N, held, *self.frame_shape)
        )
        for n, steps in self.pieces():
            out[n, steps] = self.frames[n, steps].cpu().numpy()
        out.flush()
        del out
        torch.save(self.state_dict(), tmp / "state.pt")
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(tmp, directory)

    def load(self, directory: Path) -> None:
        if not (directory / "state.pt").exists():
            sys.exit(f"--resume: the latest checkpoint's replay snapshot {directory} is missing: no exact continuation")
        self.load_state_dict(torch.load(directory / "state.pt", map_location="cpu", weights_only=False))
        frames = np.load(directory / "frames.npy", mmap_mode="c")  # copy-on-write: writable for torch, never written
        held = min(self.steps, self.C)
        if frames.shape != (self.N, held, *self.frame_shape):
            raise ValueError(
                f"{directory}/frames.npy has shape {frames.shape}, expected {(self.N, held, *self.frame_shape)}"
            )
        for n, steps in self.pieces():
            self.frames[n, steps] = torch.from_numpy(np.ascontiguousarray(frames[n, steps])).to(self.device)

    def pieces(self) -> list:
        """(env, steps) of the held frames in 256 MB pieces: a snapshot is never whole in host memory."""
        held, piece = min(self.steps, self.C), max(1, (256 << 20) // max(1, self.frames[0, 0].nbytes))
        return [(n, slice(a, min(held, a + piece))) for n in range(self.N) for a in range(0, held, piece)]


# ====================================================================== DQN update
def dqn_update(q_network: nn.Module, target_network: nn.Module, optimizer, batch: Batch, args: Args, graph: dict):
    """One (Double) DQN gradient step on a replay batch (rewards clipped to their sign, CleanRL's ClipRewardEnv;
    life loss is terminal; a truncation bootstraps). With --cuda-graphs on CUDA, the forward and backward replay the
    graph kept in `graph` (captured at the first update)."""
    inputs = [batch.obs, batch.actions, batch.rewards, batch.terminated, batch.next_obs]
    loss = lambda *b: dqn_loss(q_network, target_network, args, *b)  # noqa: E731
    if args.cuda_graphs and batch.obs.is_cuda:
        graph["replay"] = graph.get("replay") or graphed(loss, q_network, inputs)
        values = graph["replay"](*inputs, network=q_network)
    else:
        optimizer.zero_grad()
        values = loss(*inputs)
    optimizer.step()
    return values


def dqn_loss(q_network: nn.Module, target_network: nn.Module, args: Args, obs, actions, rewards, terminated, next_obs):
    with torch.no_grad():
        next_v = chosen(target_network(next_obs), q_network(next_obs).argmax(1))  # Double DQN (van Hasselt et al.)
        td_target = torch.sign(rewards) + args.gamma * (1 - terminated.float()) * next_v
    q_taken = chosen(q_network(obs), actions)
    loss = F.mse_loss(q_taken, td_target)  # CleanRL dqn_atari's (Nature DQN's Huber loss: no record used it)
    loss.backward()
    return loss.detach(), q_taken.detach().mean()


# ====================================================================== checkpoints
# taken from the command line on --resume: the session's flags, and flags that change no state a checkpoint holds
SESSION_FLAGS = ("resume", "stop_after_checkpoints")
RESUME_CAN_CHANGE = tuple("total_frames keep_checkpoints capture_video track wandb_project_name wandb_entity".split())


def resumed_args(args: Args, checkpoint: dict) -> Args:
    """lifecycle.resumed_args; a new --total-frames keeps the frames ε decays over (--exploration-fraction x
    --total-frames): the fraction follows."""
    resumed, saved = lifecycle.resumed_args(args, checkpoint, SESSION_FLAGS, RESUME_CAN_CHANGE), checkpoint["args"]
    if resumed.total_frames != saved["total_frames"]:
        fraction = saved["exploration_fraction"] * saved["total_frames"] / resumed.total_frames
        print(f"--resume applies --exploration-fraction {fraction} (was {saved['exploration_fraction']})")
        resumed = replace(resumed, exploration_fraction=fraction)
    return resumed


def save_checkpoint(run_dir: Path, global_frames: int, state: dict, memory, keep: int) -> None:
    """checkpoints/ckpt_<frames>.pt (lifecycle.save_checkpoint: atomic), with the replay memory's snapshot
    checkpoints/replay_<frames>/ made before it (atomic too). Older snapshots go once the new .pt is in place, so a
    kill at any moment leaves a complete (.pt, replay) pair to resume from."""
    folder, name = run_dir / "checkpoints", f"{global_frames:013d}"
    state["replay"] = f"replay_{name}"
    memory.save(folder / state["replay"])
    lifecycle.save_checkpoint(folder / f"ckpt_{name}.pt", state, keep)
    for old in folder.glob("replay_*"):
        if old.name != state["replay"]:
            shutil.rmtree(old, ignore_errors=True)


if __name__ == "__main__":
    sys.excepthook = one_line_errors
    lifecycle.stop_point = "after this env step"
    args = tyro.cli(Args)

    # ------------------------------------------------------------------ flags, run folder (new, or resumed)
    checkpoint = None
    if args.resume is not None:
        run_dir, path = Path(args.resume), lifecycle.latest_checkpoint(Path(args.resume))
        checkpoint = lifecycle.load_for_resume(run_dir, path, "dqn_single_baseline", needs=("best_return",))
        args, run_name = resumed_args(args, checkpoint), run_dir.name
        print(f"resuming {run_name} from {path} (round {checkpoint['round']}, {checkpoint['global_frames']:,} frames)")
    check_args(args)
    if checkpoint is None:
        run_dir, run_name = lifecycle.new_run(args)
    round_frames = args.eval_every_frames  # a round: every env reset, then a checkpoint (see the top)
    learning_starts = max(args.learning_starts, 2 * args.num_envs)  # two steps in: the first transitions are complete

    # ------------------------------------------------------------------ seeding, device
    lifecycle.seed_everything(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    set_determinism(args, device)
    frame_skip = frames_per_step(args)

    # ------------------------------------------------------------------ replay memory, envs, networks
    memory = ReplayMemory(args.buffer_size, args.num_envs, frame_shape(args), args.stack_size, device)
    # config.json (a resume updates the flags it applied: with --total-frames, --exploration-fraction)
    lifecycle.write_config(
        run_dir, "dqn_single_baseline", run_name, args, device, RESUME_CAN_CHANGE + ("exploration_fraction",)
    )
    envs = make_envs(args, args.num_envs)
    eval_envs = make_envs(args, args.eval_episodes)
    n_actions = envs.single_action_space.n
    q_network = make_q_network(args, n_actions, device)
    # foreach: one multi-tensor kernel per step for all weights (CUDA's default already), as pqn_lake.py's optimizers:
    # on the CPU the per-tensor loop is a large part of a small network's step (benchmarks/minatar_bench.py, RAdam)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, foreach=True)
    update_graph = {}  # --cuda-graphs: the update's CUDA graph, captured at the first update
    target_network = make_q_network(args, n_actions, device)
    target_network.load_state_dict(q_network.state_dict())
    replay_rng = np.random.default_rng(derive_seed(args, REPLAY_DRAW))
    # Random play (ε = 1) under the evaluation protocol: the floor every evaluation is read against
    random_returns, *_ = evaluate(
        [q_network], replace(args, eval_epsilon=1.0), eval_envs, derive_seed(args, EVALUATION, 0, 0), device
    )
    random_return = float(random_returns.mean())

    # ------------------------------------------------------------------ state: fresh, or from the checkpoint
    # transitions: env steps of all envs; updates: gradient steps; target_syncs: target updates so far
    round_index, global_frames, transitions, updates, target_syncs, wandb_id = 0, 0, 0, 0, 0, None
    best_return = -float("inf")  # the best evaluation return so far, that of checkpoints/best.pt
    if checkpoint is not None:
        q_network.load_state_dict(checkpoint["q_network"])
        target_network.load_state_dict(checkpoint["target_network"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        round_index, global_frames, transitions, updates, target_syncs, wandb_id, best_return = (
            checkpoint[k] for k in "round global_frames transitions updates target_syncs wandb_id best_return".split()
        )
        memory.load(run_dir / "checkpoints" / checkpoint["replay"])
        replay_rng.bit_generator.state = checkpoint["replay_rng"]
        lifecycle.set_rng_state(checkpoint["rng"])

    # metrics.jsonl: always written; on resume, lines past the checkpoint (a run that died mid-round) go
    metrics_file = lifecycle.open_metrics(run_dir, None if checkpoint is None else global_frames)
    if args.track:
        config = {"script": "dqn_single_baseline", **vars(args), **lifecycle.software(device)}
        wandb_id = lifecycle.start_wandb(args, run_name, run_dir, wandb_id, config)

    def log(metrics: dict) -> None:
        lifecycle.log_row(metrics_file, args.track, {"global_frames": global_frames, **metrics})

    def crossed(period: int) -> bool:
        """Did the last iteration's frames pass a multiple of `period`?"""
        return global_frames // period > (global_frames - args.num_envs * frame_skip) // period

    lifecycle.catch_stop_signals()
    print(
        f"run {run_name}: {args.num_envs} envs on {device}, replay memory: {args.buffer_size:,} transitions, "
        f"{memory.nbytes() / 2**30:.2f} GiB on the device; random play scores {random_return:.2f} "
        f"({random_returns.size} games)",
        flush=True,
    )
    if checkpoint is None:
        log({"eval/random_return": random_return})
    start_time, start_frames, rounds_here = time.time(), global_frames, 0
    td_losses, q_values, log_updates = torch.zeros((), device=device), torch.zeros((), device=device), 0
    finished = []  # (return, length) of the full games since the last log line

    def log_training() -> None:
        global td_losses, q_values, log_updates
        sps = int((global_frames - start_frames) / frame_skip / max(1e-9, time.time() - start_time))
        metrics = {
            "charts/SPS": sps,
            "charts/epsilon": epsilon,
            "charts/transitions": transitions,
            "charts/updates": updates,
        }
        if log_updates:
            metrics["losses/td_loss"] = (td_losses / log_updates).item()
            metrics["losses/q_values"] = (q_values / log_updates).item()
            metrics["charts/replay_ratio"] = updates * args.batch_size / max(1, transitions - learning_starts)
        if finished:
            metrics["charts/episodic_return"] = float(np.mean([g[0] for g in finished]))
            metrics["charts/episodic_length"] = float(np.mean([g[1] for g in finished]))
        log(metrics)
        loss = f"  td_loss {metrics['losses/td_loss']:.4f}" if log_updates else ""
        games = f"  episodic_return {metrics['charts/episodic_return']:.2f} ({len(finished)} games)" if finished else ""
        print(f"frames {global_frames:,}  SPS {sps:,}  ε {epsilon:.3f}  updates {updates:,}{loss}{games}", flush=True)
        td_losses, q_values, log_updates = torch.zeros((), device=device), torch.zeros((), device=device), 0
        finished.clear()

    epsilon = args.start_e
    while global_frames < args.total_frames:
        round_index += 1
        # The next multiple of the round length: after a stop mid-round, the resumed round ends where the cut one
        # would have (round_index counts rounds, cut ones included: it only seeds the resets).
        round_end = min(args.total_frames, (global_frames // round_frames + 1) * round_frames)
        round_start = time.time()
        obs, _ = envs.reset(seed=derive_seed(args, ENV_RESET, round_index))
        episode_start, game_over = np.ones(args.num_envs, bool), np.zeros(args.num_envs, bool)
        reset_obs = episode_start
        episode_return, episode_length = np.zeros(args.num_envs), np.zeros(args.num_envs, np.int64)
        print(f"round {round_index}: from {global_frames:,} to {round_end:,} frames", flush=True)

        stopping = False  # a stop request, read once per env step (the log line and the loop's end agree on it)
        while global_frames < round_end and not stopping:
            # ---------------------------------------------------------- act (ε-greedy), envs step on their threads
            epsilon = linear_schedule(
                args.start_e, args.end_e, args.exploration_fraction * args.total_frames, global_frames
            )
            with torch.no_grad():
                actions = epsilon_greedy(q_network(to_device(obs, device)), epsilon).cpu().numpy()
            envs.send(actions)

            # ---------------------------------------------------------- learn while they step
            if transitions >= learning_starts:
                owed = int((transitions - learning_starts) * args.replay_ratio / args.batch_size) - updates
                for _ in range(owed):
                    batch = memory.sample(args.batch_size, replay_rng)
                    loss, q = dqn_update(q_network, target_network, optimizer, batch, args, update_graph)
                    td_losses += loss
                    q_values += q
                    updates += 1
                    log_updates += 1
                if transitions // args.target_network_frequency > target_syncs:
                    target_syncs = transitions // args.target_network_frequency
                    for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                        target_param.data.copy_(args.tau * param.data + (1.0 - args.tau) * target_param.data)

            # ---------------------------------------------------------- receive, store the step
            next_obs, rewards, terminated, truncated, info = envs.recv()
            memory.add(obs, actions, rewards, terminated, truncated, episode_start, reset_obs)
            transitions += args.num_envs
            global_frames += args.num_envs * frame_skip
            # Full games, unclipped: an autoreset step (the one after a game over) is not part of any game.
            episode_return += rewards * ~game_over
            episode_length += ~game_over
            now_over = truncated | (terminated & (info["lives"] == 0))
            for n in np.flatnonzero(now_over):
                finished.append((float(episode_return[n]), int(episode_length[n])))
            episode_return[now_over], episode_length[now_over] = 0, 0
            # Next-step autoreset: the step that ends a game returns its final obs, the next one a reset obs. A FIRE
            # forced after a life loss (FireAfterLifeLoss) is no transition either, but its next obs is no reset obs:
            # the game and its frame stack go on.
            reset_obs, episode_start, game_over = game_over, game_over | info.get("forced", False), now_over
            obs = next_obs

            # ---------------------------------------------------------- log, evaluate
            stopping = lifecycle.stop_requested
            if crossed(args.log_every_frames) or global_frames >= round_end or stopping:
                log_training()
            if crossed(args.eval_every_frames) or global_frames >= args.total_frames:
                eval_start, seed = time.time(), derive_seed(args, EVALUATION, global_frames)
                (returns,), (lengths,), video = evaluate([q_network], args, eval_envs, seed, device, args.capture_video)
                log({"eval/return": float(returns.mean()), "eval/length": float(lengths.mean())})
                # checkpoints/best.pt: the network of the best evaluation so far (training can regress), replaced only
                # by a strictly better one
                if returns.mean() > best_return:
                    best_return = float(returns.mean())
                    atomic_save(
                        run_dir / "checkpoints" / "best.pt",
                        {
                            "args": vars(args),
                            "run_name": run_name,
                            "round": round_index,
                            "global_frames": global_frames,
                            "q_network": q_network.state_dict(),
                            "best": {"return": best_return, "global_frames": global_frames},
                        },
                    )
                if args.capture_video:
                    video_path = run_dir / "videos" / f"eval_{global_frames:013d}.mp4"
                    lifecycle.log_video(video_path, video, global_frames, args.track)
                print(
                    f"eval at {global_frames:,} frames: return {returns.mean():.2f} (min {returns.min():.1f}, max "
                    f"{returns.max():.1f}), length {lengths.mean():.0f}, {time.time() - eval_start:.1f}s (random play "
                    f"{random_return:.2f})",
                    flush=True,
                )

        # -------------------------------------------------------------- round end (or a stop): checkpoint
        # The obs after the round's last step, stored as a last step (as an autoreset step would be): the
        # last transition keeps its true next obs; the reset at the next round's start makes this step no transition.
        # A round cut by a stop request ends the same way, at a frame count that is no multiple of the round length.
        no_action, no_reward, no_flag = (np.zeros(args.num_envs, dtype) for dtype in (np.int64, np.float32, bool))
        memory.add(obs, no_action, no_reward, no_flag, no_flag, episode_start, reset_obs)
        state = {
            "args": vars(args),
            "run_name": run_name,
            "round": round_index,
            "global_frames": global_frames,
            "transitions": transitions,
            "updates": updates,
            "target_syncs": target_syncs,
            "q_network": q_network.state_dict(),
            "target_network": target_network.state_dict(),
            "optimizer": optimizer.state_dict(),
            "replay_rng": replay_rng.bit_generator.state,
            "rng": lifecycle.rng_state(),
            "wandb_id": wandb_id,
            "best_return": best_return,
        }
        save_start = time.time()
        save_checkpoint(run_dir, global_frames, state, memory, args.keep_checkpoints)
        rounds_here += 1
        print(
            f"round {round_index} done: {global_frames:,} frames, {time.time() - round_start:.1f}s (checkpoint "
            f"{time.time() - save_start:.1f}s), {memory.num_transitions:,} transitions in the replay memory",
            flush=True,
        )
        if lifecycle.stop_requested or (args.stop_after_checkpoints and rounds_here >= args.stop_after_checkpoints):
            if global_frames < args.total_frames:
                cut = "" if global_frames == round_end else f" (cut at {global_frames:,} frames by the stop request)"
                print(f"stopping after round {round_index}{cut}; continue with --resume {run_dir}", flush=True)
            break

    envs.close()
    eval_envs.close()
    lifecycle.close_metrics(metrics_file, args.track)
