"""pqn_lake_live.py: live transfer, the design's second variant: the BigAgent learns while
the agents act, from their Ponds read in place and a BigPond drawn from the Lake, instead of in a phase of its own.

    Lake: a huge replay store on disk (lake.py). Four agents, four Ponds: small ring buffers on the device.
    while global_frames < total_frames:                                          (one phase)
        fill one BigPond uniformly from the Lake (the older data; none in the first phase)
        for each of --agent-updates-per-phase updates:
            1. every agent trains with PQN on its own envs and pours every transition into its Pond
            2. a full Pond drains into the Lake
            3. the BigAgent catches up to --big-replay-ratio x the agents' transitions so far (in samples of
               --big-batch-size): (Double) DQN on the BigPond and the fresh view, every transition of the phase that
               the Ponds still hold, the newest rollout's included
           (the agents and the BigAgent are evaluated every --eval-every-updates updates and at the last one)
        4. clone the agents from the BigAgent if --clone-every-updates says so (0: never: the BigAgent is the product)
        checkpoint
    With --big-agent-num-envs N > 0 the BigAgent also acts (the June 26 notes: "some interactions of the large agent
    also get involved"; the tandem papers' remedy for a passive learner): after every agent update, before step 3,
    it plays --num-steps steps of N envs of its own, ε-greedy on its network (ε from --big-epsilon-start to
    --big-epsilon-end over --agent-epsilon-decay-fraction of its share of the frames, never reset), into a Pond of its
    own that drains into the Lake (group "big_agent") and the fresh view, and its frames count in --total-frames.

A fork of pqn_lake.py in CleanRL's way, a script of its own on the same modules (envs, the Lake, the run lifecycle,
the speed machinery); what live transfer adds: the fresh view, the catch-up, the acting BigAgent and its loop. Its
flags are pqn_lake.py's (the same defaults) but the phase part's (--merge, --big-agent-updates-per-phase,
--big-agent-schedule), with --clone-every-updates and the acting BigAgent's three.
The BigAgent draws its batches and its acting's random numbers from a generator of its own and is evaluated on envs
of its own, so the agents' random stream and games are those of pqn_lake.py's
single-PQN control with the same seed while no clone happens. The outputs are pqn_lake.py's; config.json records
"script": "pqn_lake_live" and the BigAgent's evaluations are the run's eval/return.
"""

import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Literal, Optional

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before CUDA starts)
# torch's OpenMP threads sleep between parallel regions (read when torch loads): spinning doubled a run's CPU time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro

import lifecycle
import speed
from envs import frame_shape, frames_per_step, make_envs, minatar_game
from evaluation import collapse_metrics, epsilon_greedy, evaluate
from lake import Lake
from lifecycle import atomic_save, derive_seed, latest_checkpoint, one_line_errors, save_checkpoint, set_determinism
from lifecycle import usage_error


@dataclass
class Args:
    # ---------------------------------------------------------------- run
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment (part of the run name)"""
    seed: int = 1
    """seed of the experiment (agents, envs, BigPond draws and evaluation derive theirs from it)"""
    torch_deterministic: bool = True
    """if toggled, deterministic torch algorithms and cuDNN (needed for bit-exact resume)"""
    cuda: bool = True
    """if toggled, cuda will be enabled when available"""
    cuda_graphs: bool = True
    """on CUDA, the forward and backward of each PQN minibatch and BigAgent update replay one CUDA graph (no Python per
    kernel; the optimizers' steps stay eager): the same results as eager (tests/test_cuda_graphs.py), 1.3-2x faster on
    an H200 (benchmarks/gpu_bench.py); no effect on a CPU"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "pqn-lake"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """film the BigAgent's first evaluation game of every phase to runs/<run_name>/videos/ (and wandb with --track)"""
    runs_dir: str = "runs"
    """the folder that holds one subfolder per run"""
    resume: Optional[str] = None
    """continue the run in this folder from its latest checkpoint, with its own flags (--total-frames, --stop-after-*,
    --capture-video, --track, --wandb-* may change; others are refused)"""
    stop_after_phases: int = 0
    """checkpoint and exit after this many phases in this process (0: never); the path of SIGTERM/SIGUSR1"""
    stop_after_updates: int = 0
    """checkpoint and exit after this many agent updates in this process, mid-phase (0: never)"""

    # ---------------------------------------------------------------- environment
    env_id: str = "Breakout-v5"
    """an Atari id in envpool style (Breakout-v5), a MinAtar id (MinAtar/Breakout-v1; -v0: all 6 actions) or a
    gymnasium id with uint8 image frames ("module:EnvId" allowed); a default None is the family's, named in its help"""
    total_frames: Optional[int] = None
    """total env frames of all agents; default: Atari 100M (the design's), MinAtar 5M (the MinAtar paper's budget)"""
    frame_height: int = 84
    """frame height (Atari: resized to it; gymnasium ids: must match the env's frames; MinAtar: not used)"""
    frame_width: int = 84
    """frame width (as --frame-height)"""
    rgb: bool = False
    """colour frames (H, W, 3) instead of grayscale; PQN/CleanRL: grayscale (MinAtar: not used)"""
    stack_size: Optional[int] = None
    """frames stacked into one observation; default: Atari 4 (PQN/CleanRL), MinAtar 1 (purejaxql, the MinAtar paper)"""
    repeat_action_probability: Optional[float] = None
    """sticky actions; default: Atari 0 (purejaxql pqn_atari.yaml; Machado et al. 2018 recommend 0.25), MinAtar 0.1
    (the minatar package's and the MinAtar paper's; PQN's own MinAtar code, on gymnax, has none)"""
    max_episode_frames: int = 108_000
    """a game is truncated after this many frames (envpool/CleanRL: 108000; MinAtar has no cap, gymnax's port 1000)"""

    # ---------------------------------------------------------------- PQN agents
    num_agents: int = 4
    """the number of independent PQN agents (the design: four)"""
    num_envs: int = 128
    """envs per agent (purejaxql pqn_atari.yaml and pqn_minatar.yaml: 128; CleanRL pqn_atari_envpool.py: 8)"""
    num_steps: int = 32
    """steps per env in each rollout (purejaxql, Atari and MinAtar: 32; CleanRL: 128)"""
    update_epochs: int = 2
    """epochs over each rollout (purejaxql, Atari and MinAtar: 2; CleanRL: 4)"""
    num_minibatches: int = 32
    """minibatches per epoch (purejaxql, Atari and MinAtar: 32; CleanRL: 4)"""
    learning_rate: Optional[float] = None
    """RAdam learning rate of the agents; default: Atari 2.5e-4 (purejaxql, CleanRL), MinAtar 5e-4 (purejaxql)"""
    anneal_lr: bool = True
    """anneal each agent's learning rate linearly to 0 over its share of --total-frames, one step per minibatch step
    (purejaxql LR_LINEAR_DECAY, CleanRL anneal_lr; --no-anneal-lr: constant, as before the parity study). The rate
    follows the agent's own frames, so a clone keeps its place (its ε restarts, its rate does not); resume is exact"""
    gamma: float = 0.99
    """discount factor, agents and BigAgent (purejaxql, Atari and MinAtar, CleanRL: 0.99)"""
    q_lambda: float = 0.65
    """λ of the Q(λ) returns (purejaxql, Atari and MinAtar, CleanRL: 0.65)"""
    max_grad_norm: float = 10.0
    """gradient clipping of the agents (purejaxql, Atari and MinAtar, CleanRL: 10)"""
    agent_epsilon_start: float = 1.0
    """the agents' initial ε (purejaxql: 1)"""
    agent_epsilon_end: Optional[float] = None
    """the agents' final ε; default: Atari 0.001 (purejaxql pqn_atari.yaml; CleanRL: 0.01), MinAtar 0.05"""
    agent_epsilon_decay_fraction: float = 0.1
    """the first decay lasts this fraction of an agent's share of --total-frames (purejaxql, CleanRL: 0.1)"""
    agent_updates_per_phase: Optional[int] = None
    """PQN updates (rollout + epochs) per agent in a phase; default: Atari 500 (the design), MinAtar 50 (6 clones)"""
    pond_steps: int = 128
    """steps x num_envs a Pond holds on the device before it drains into the Lake (a multiple of --num-steps)"""
    # ---------------------------------------------------------------- clone
    agent_epsilon_reset: float = 1.0
    """after each clone the agents' ε restarts here (the design's open question "reset to 1.0?")"""
    agent_epsilon_reset_decay_frames: int = 0
    """...and decays to --agent-epsilon-end over this many of each agent's frames (0: a quarter of its phase)"""
    # ---------------------------------------------------------------- BigPond and BigAgent
    big_agent_schedule: tyro.conf.Suppress[str] = "live"  # config.json's name of this design, for compare.py
    big_pond_size: int = 1_000_000
    """transitions drawn uniformly from the Lake into the BigPond each phase (CleanRL dqn_atari buffer: 1M)"""
    big_pond_slice_steps: int = 64
    """the BigPond is read as contiguous stream slices of this many steps (longer: faster reads, more correlated)"""
    big_replay_ratio: float = 2.0
    """BigAgent samples per transition the agents made (after every agent update it catches up to ratio x their
    transitions so far / --big-batch-size updates): 2 is the agents' own (2 epochs)"""
    big_batch_size: int = 256
    """BigAgent minibatch (CleanRL dqn_atari: 32; 256 does the same samples in 8x fewer, bigger steps)"""
    big_learning_rate: float = 2.5e-4
    """BigAgent Adam learning rate (CleanRL dqn_atari: 1e-4 at batch 32; the agents' 2.5e-4 at batch 256)"""
    big_target_network_frequency: int = 250
    """BigAgent updates between target syncs, and at each phase's start (CleanRL dqn_atari: 1000 steps / 4)"""
    big_n_step: int = 3
    """BigAgent targets over n steps of the BigPond's stream slices. 1: the design's one-step DQN; 3 (Rainbow, Ape-X)
    by the MinAtar learners study (benchmarks/RESULTS.md)"""
    clone_every_updates: Optional[int] = None
    """clone the agents from the BigAgent every this many agent updates, at a phase's end: a multiple of
    --agent-updates-per-phase (default: every phase), or 0: never (the BigAgent, trained from scratch on everyone's
    data, is the product); the run's end clones too"""
    big_agent_num_envs: int = 0
    """envs the BigAgent acts on, --num-steps steps each after every agent update (128 beside 4 x 128 agents' envs:
    a fifth of the frames); 0: it never acts, it only learns from the agents' transitions"""
    big_epsilon_start: float = 1.0
    """the acting BigAgent's initial ε"""
    big_epsilon_end: Optional[float] = None
    """the acting BigAgent's final ε, reached after --agent-epsilon-decay-fraction of its share of the frames (default:
    the agents' --agent-epsilon-end)"""
    # ---------------------------------------------------------------- evaluation
    eval_every_updates: int = 50
    """evaluate the agents every this many updates, at a phase's last and right after each clone (the BigAgent's)"""
    eval_episodes: int = 10
    """full games per agent and evaluation (each on its own env, all envs stepped together)"""
    eval_max_frames: Optional[int] = None
    """an evaluation game stops after this many frames; default: Atari 108,000 (30 minutes), MinAtar 10,000"""
    eval_epsilon: float = 0.05
    """ε of the evaluation policy (Mnih et al. 2015: 0.05; CleanRL dqn_atari: 0.01; purejaxql: 0)"""
    collapse_probe_states: int = 2000
    """Lake states drawn once a phase on which the BigAgent's greedy actions are compared with its agents'"""
    # ---------------------------------------------------------------- Lake
    lake_path: Optional[str] = None
    """the Lake's folder (default runs/<run_name>/lake; on clusters point it at scratch)"""
    lake_segment_mb: int = 1024
    """raw frames per Lake segment file, in MB (on disk ~1-4% of it: frames are compressed)"""

    def __post_init__(self):
        lifecycle.apply_family_defaults(self, FAMILY_DEFAULTS)


# ====================================================================== flag checks
# The flags left None take their env family's default, (Atari, MinAtar)
FAMILY_DEFAULTS = {
    "total_frames": (100_000_000, 5_000_000),
    "stack_size": (4, 1),
    "repeat_action_probability": (0.0, 0.1),
    "learning_rate": (2.5e-4, 5e-4),
    "agent_epsilon_end": (0.001, 0.05),
    "agent_updates_per_phase": (500, 50),
    "eval_max_frames": (108_000, 10_000),
}


def check_args(args: Args) -> None:
    """Every flag before anything is created: the first bad one stops the run with one line naming it and the rule."""
    must_be = {
        ">= 1": "total_frames stack_size max_episode_frames num_agents num_envs num_steps update_epochs "
        "num_minibatches agent_updates_per_phase pond_steps big_pond_size big_pond_slice_steps "
        "big_batch_size big_target_network_frequency "
        "eval_every_updates eval_episodes eval_max_frames lake_segment_mb",
        ">= 0": "seed stop_after_phases stop_after_updates agent_epsilon_reset_decay_frames big_agent_num_envs",
        "in [0, 1]": "repeat_action_probability gamma q_lambda agent_epsilon_start agent_epsilon_end "
        "agent_epsilon_decay_fraction agent_epsilon_reset eval_epsilon big_epsilon_start",
        "> 0": "learning_rate max_grad_norm big_learning_rate big_replay_ratio",
    }
    lifecycle.check_flags(args, must_be)
    if args.num_envs * args.num_steps % args.num_minibatches:
        usage_error(
            f"--num-minibatches {args.num_minibatches}: must divide --num-envs x --num-steps = "
            f"{args.num_envs * args.num_steps}"
        )
    if args.pond_steps % args.num_steps:
        usage_error(f"--pond-steps {args.pond_steps}: must be a multiple of --num-steps ({args.num_steps})")
    every = args.clone_every_updates
    if every is not None and (every < 0 or every % args.agent_updates_per_phase):
        usage_error(
            f"--clone-every-updates {every}: 0 (never) or a multiple of --agent-updates-per-phase "
            f"({args.agent_updates_per_phase}), as clones happen at phase ends"
        )
    if args.big_epsilon_end is not None and not 0 <= args.big_epsilon_end <= 1:
        usage_error(f"--big-epsilon-end {args.big_epsilon_end}: must be in [0, 1]")


# ====================================================================== seeds (derive_seed: lifecycle.py)
ENV_RESET, BIG_POND_DRAW, EVALUATION, PROBE = 0, 1, 2, 3  # the purposes of derive_seed
BIG_AGENT = 1000  # the BigAgent's "agent index" in derived seeds (its batches, its evaluation games)


# ====================================================================== network
def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """Nature CNN (Mnih et al. 2015) with LayerNorm after every hidden layer, as PQN (PyTorch layout of
    CleanRL pqn_atari_envpool.py); the flatten size follows the frame size, so 256x256 frames work."""

    def __init__(self, n_actions: int, in_channels: int, height: int, width: int):
        super().__init__()
        h1, w1 = (height - 8) // 4 + 1, (width - 8) // 4 + 1
        h2, w2 = (h1 - 4) // 2 + 1, (w1 - 4) // 2 + 1
        h3, w3 = h2 - 2, w2 - 2
        if h3 < 1 or w3 < 1:
            raise ValueError(f"frames of {height}x{width} are too small for the Nature CNN (36x36 at least)")
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)),
            nn.LayerNorm([32, h1, w1]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, h2, w2]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, h3, w3]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * h3 * w3, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
            layer_init(nn.Linear(512, n_actions)),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs: uint8 (B, stack, H, W), or (B, stack, H, W, 3) for RGB (stack and colour become channels)."""
        if obs.dim() == 5:
            obs = obs.permute(0, 1, 4, 2, 3).flatten(1, 2)
        return self.network(obs.float() / 255.0)


class MinAtarQNetwork(nn.Module):
    """PQN's MinAtar network (purejaxql pqn_minatar.py): conv 16 3x3 + LayerNorm over each cell's channels (flax's)
    + ReLU, dense 128 + LayerNorm + ReLU, linear head; orthogonal init (CleanRL's), the 0/1 grids fed as they are."""

    def __init__(self, n_actions: int, in_channels: int, height: int, width: int):
        super().__init__()
        self.conv, self.conv_norm = layer_init(nn.Conv2d(in_channels, 16, 3)), nn.LayerNorm(16)
        self.dense, self.dense_norm = layer_init(nn.Linear(16 * (height - 2) * (width - 2), 128)), nn.LayerNorm(128)
        self.head = layer_init(nn.Linear(128, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs: uint8 (B, stack, H, W, C) (stack and channels become the conv's input channels)."""
        x = self.conv(obs.permute(0, 1, 4, 2, 3).flatten(1, 2).float())
        x = F.relu(self.conv_norm(x.permute(0, 2, 3, 1)))
        return self.head(F.relu(self.dense_norm(self.dense(x.flatten(1)))))


def make_q_network(args: Args, n_actions: int, device: torch.device) -> nn.Module:
    """PQN's network for the env family: MinAtarQNetwork for MinAtar ids, else the Nature CNN (QNetwork)."""
    shape = frame_shape(args)
    if minatar_game(args.env_id) is not None:
        return MinAtarQNetwork(n_actions, args.stack_size * shape[2], *shape[:2]).to(device)
    return QNetwork(n_actions, args.stack_size * (3 if args.rgb else 1), shape[0], shape[1]).to(device)


def chosen(q_values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    # A one-hot product rather than gather: gather's backward is a scatter-add, not deterministic on CUDA.
    return (q_values * F.one_hot(actions, q_values.shape[1])).sum(1)


def epsilon(schedule: dict, frames: int) -> float:
    """Linear from start to end over decay_frames frames, counted from the agent's frames at the last reset."""
    progress = (frames - schedule["frames_at_reset"]) / max(1, schedule["decay_frames"])
    return schedule["start"] + min(1.0, progress) * (schedule["end"] - schedule["start"])


# ====================================================================== Pond and the PQN agents
@dataclass
class Pond:
    """An agent's last `pond_steps` steps x num_envs, observations on the device (scalars on the host, where the env
    returns them); also the PQN rollout storage (an update trains on its newest num_steps rows)."""

    obs: torch.Tensor  # (P, N, stack, *frame) uint8: the observation each action was taken on
    actions: torch.Tensor  # (P, N) int64
    rewards: np.ndarray  # (P, N) float32, raw (the Lake never clips; learners do)
    terminated: np.ndarray  # (P, N) bool: life loss or game over (the learning terminal)
    truncated: np.ndarray  # (P, N) bool
    episode_start: np.ndarray  # (P, N) bool: obs is a reset observation
    pos: int = 0


def make_pond(args: Args, num_envs: int, device: torch.device) -> Pond:
    P, N = args.pond_steps, num_envs
    return Pond(
        obs=torch.zeros((P, N, args.stack_size, *frame_shape(args)), dtype=torch.uint8, device=device),
        actions=torch.zeros((P, N), dtype=torch.int64, device=device),
        rewards=np.zeros((P, N), np.float32),
        terminated=np.zeros((P, N), bool),
        truncated=np.zeros((P, N), bool),
        episode_start=np.zeros((P, N), bool),
    )


def drain_pond(pond: Pond, lake: Lake, group: str) -> int:
    """Pour the Pond's steps into the Lake (which writes on its own thread) and empty it; returns how many."""
    P = pond.pos
    if P == 0:
        return 0
    fields = (pond.obs, pond.actions, pond.rewards, pond.terminated, pond.truncated, pond.episode_start)
    lake.append(group, *(field[:P] for field in fields))
    lake.commit()
    pond.pos = 0
    return P * pond.actions.shape[1]


@dataclass
class Agent:
    """A PQN agent: its networks, envs, Pond and acting state."""

    name: str  # also its Lake group
    q_network: nn.Module  # QNetwork or MinAtarQNetwork
    optimizer: torch.optim.Optimizer
    epsilon_schedule: dict
    envs: object = None
    pond: Optional[Pond] = None
    frames: int = 0  # env frames this agent generated (its ε schedule and learning rate run on them)
    updates: int = 0
    obs: Optional[torch.Tensor] = None  # (N, stack, *frame) on the device; acting state, reset at every phase start
    obs_host: Optional[np.ndarray] = None
    episode_start: Optional[np.ndarray] = None
    game_over: Optional[np.ndarray] = None
    episode_return: Optional[np.ndarray] = None
    episode_length: Optional[np.ndarray] = None
    finished: list = field(default_factory=list)  # (return, length) of full games since the last log
    values: Optional[torch.Tensor] = None  # (T, N) of the current rollout: max_a Q(obs_t, a) at acting time
    rollout_game_over: Optional[np.ndarray] = None  # (T, N) step t ended a game (the next step is an autoreset)
    rollout_autoreset: Optional[np.ndarray] = None  # (T, N) step t is an autoreset step or a forced FIRE
    stream: Optional[torch.cuda.Stream] = None  # on CUDA, the agent's kernels queue beside the other agents'
    graph: Optional[Callable] = None  # --cuda-graphs: its minibatch's forward and backward, captured at its first


def make_optimizer(args: Args, q_network: nn.Module, big: bool) -> torch.optim.Optimizer:
    # foreach: one multi-tensor kernel for all weights; the per-tensor loop took a third of a MinAtar step on the CPU
    if big:  # CleanRL dqn_atari
        return torch.optim.Adam(q_network.parameters(), lr=args.big_learning_rate, foreach=True)
    return torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate, foreach=True)  # purejaxql, CleanRL pqn


def make_agent(args: Args, name: str, device: torch.device, envs=None) -> Agent:
    """A PQN agent with its --num-envs envs (made here unless given), its Pond and its rollout extras."""
    envs = envs if envs is not None else make_envs(args, args.num_envs)
    q_network = make_q_network(args, envs.single_action_space.n, device)
    decay = int(args.agent_epsilon_decay_fraction * decay_horizon(args))
    schedule = dict(start=args.agent_epsilon_start, end=args.agent_epsilon_end, decay_frames=decay, frames_at_reset=0)
    agent = Agent(
        name,
        q_network,
        make_optimizer(args, q_network, big=False),
        schedule,
        envs=envs,
        pond=make_pond(args, args.num_envs, device),
        stream=torch.cuda.Stream(device) if device.type == "cuda" else None,
    )
    agent.values = torch.zeros((args.num_steps, args.num_envs), device=device)
    agent.rollout_game_over = np.zeros((args.num_steps, args.num_envs), bool)
    agent.rollout_autoreset = np.zeros((args.num_steps, args.num_envs), bool)
    return agent


def reset_envs(agent: Agent, seed: int, device: torch.device) -> None:
    obs, _ = agent.envs.reset(seed=seed)
    N = obs.shape[0]
    agent.obs_host, agent.obs = obs, torch.from_numpy(obs).to(device)
    agent.episode_start, agent.game_over = np.ones(N, bool), np.zeros(N, bool)
    agent.episode_return, agent.episode_length = np.zeros(N, np.float64), np.zeros(N, np.int64)


def act(agent: Agent, t: int, drawn: tuple) -> None:
    """Choose actions on the current obs (ε-greedy on the `drawn` random numbers), write obs and actions into the Pond
    and send the actions to the envs, which step until `receive`. The actions' .cpu() is a step's only host sync."""
    pond, p = agent.pond, agent.pond.pos
    pond.obs[p] = agent.obs
    pond.episode_start[p] = agent.episode_start
    with torch.no_grad():
        q_values = agent.q_network(agent.obs)
    actions = epsilon_greedy(q_values, epsilon(agent.epsilon_schedule, agent.frames), drawn=drawn)
    pond.actions[p] = actions
    agent.values[t] = q_values.max(1).values
    agent.envs.send(actions.cpu().numpy())


def receive(agent: Agent, args: Args, device: torch.device, t: int) -> None:
    """Collect the step sent by `act`: rewards and flags into the Pond, full-game statistics, next obs."""
    obs, rewards, terminated, truncated, info = agent.envs.recv()
    game_over = truncated | (terminated & (info["lives"] == 0))
    pond, p = agent.pond, agent.pond.pos
    pond.rewards[p], pond.terminated[p], pond.truncated[p] = rewards, terminated, truncated
    # Full games, unclipped: an autoreset step (the one after a game over) is not part of any game.
    playing = ~agent.game_over
    agent.episode_return += rewards * playing
    agent.episode_length += playing
    for n in np.flatnonzero(game_over):
        agent.finished.append((float(agent.episode_return[n]), int(agent.episode_length[n])))
    agent.episode_return[game_over], agent.episode_length[game_over] = 0, 0
    # A FIRE forced after a life loss (FireAfterLifeLoss) is, like an autoreset step, no transition.
    no_transition = agent.game_over | info.get("forced", False)
    agent.rollout_autoreset[t], agent.rollout_game_over[t] = no_transition, game_over
    # Next-step autoreset: the step that ends a game returns its final obs, the next one a reset obs.
    agent.episode_start, agent.game_over = no_transition, game_over
    agent.obs_host, agent.obs = obs, torch.from_numpy(obs).to(device)
    pond.pos += 1
    agent.frames += len(rewards) * frames_per_step(args)


# ====================================================================== PQN: the agents' update and its loss
def q_lambda_returns(
    rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor, lambdas: torch.Tensor, gamma: float
) -> torch.Tensor:
    """returns[t] = r_t + γ (1 - terminated_t) [(1 - λ_t) V(s_{t+1}) + λ_t returns[t+1]], V = max_a Q; λ_t = 0
    where a game or the rollout ends, so a return never runs past an episode end (CleanRL's PR 494)."""
    returns = torch.empty_like(rewards)
    next_return = next_values[-1]
    for t in reversed(range(rewards.shape[0])):
        next_return = rewards[t] + gamma * (1 - terminated[t]) * (
            (1 - lambdas[t]) * next_values[t] + lambdas[t] * next_return
        )
        returns[t] = next_return
    return returns


def pqn_loss(q_network: nn.Module, obs, actions, returns, mask) -> tuple:
    """A minibatch's loss to its Q(λ) returns (mask 0: no transition) and the Q-values of its actions."""
    q_taken = chosen(q_network(obs), actions)
    return 0.5 * ((q_taken - returns) ** 2 * mask).sum() / mask.sum().clamp(min=1), q_taken


def pqn_update(agent: Agent, drawn: tuple, args: Args, device: torch.device) -> dict:
    """One PQN update of an agent (in its own thread, speed.in_agent_threads): its rollout of --num-steps steps on the
    `drawn` random numbers; Q(λ) targets; then --update-epochs x --num-minibatches gradient steps (purejaxql, CleanRL
    pqn_atari_envpool.py) in each epoch's drawn order, the rate annealed per step."""
    steps, orders = drawn
    T, N, pond = args.num_steps, args.num_envs, agent.pond
    for t in range(T):  # the rollout: T steps of the agent's envs into its Pond
        act(agent, t, steps[t])
        receive(agent, args, device, t)
    rows = slice(pond.pos - T, pond.pos)
    host = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device, torch.float32)  # noqa: E731
    with torch.no_grad():  # V of each obs after the first, with the agent's network at acting time
        next_values = torch.cat([agent.values[1:], agent.q_network(agent.obs).max(1).values[None]])
        lambdas = args.q_lambda * (1 - host(agent.rollout_game_over))
        lambdas[-1] = 0
        rewards, terminated = host(np.sign(pond.rewards[rows])), host(pond.terminated[rows])
        returns = q_lambda_returns(rewards, terminated, next_values, lambdas, args.gamma).flatten()
    # The autoreset step (obs_t is a game's final obs, its action ignored) and a forced FIRE are no transition.
    mask = 1 - host(agent.rollout_autoreset).flatten()
    obs, actions = pond.obs[rows].flatten(0, 1), pond.actions[rows].flatten()
    minibatch = T * N // args.num_minibatches
    td_loss, q_mean = torch.zeros((), device=device), torch.zeros((), device=device)
    steps = args.update_epochs * args.num_minibatches
    rollout_frames, graphs = T * N * frames_per_step(args), args.cuda_graphs and device.type == "cuda"
    loss = lambda *batch: pqn_loss(agent.q_network, *batch)  # noqa: E731
    for epoch in range(args.update_epochs):
        for i, start in enumerate(range(0, T * N, minibatch)):
            if args.anneal_lr:
                step = epoch * args.num_minibatches + i
                for group in agent.optimizer.param_groups:
                    group["lr"] = annealed_lr(args, agent.frames - rollout_frames * (1 - step / steps))
            mb = orders[epoch][start : start + minibatch]
            batch = [obs[mb], actions[mb], returns[mb], mask[mb]]
            value, q = speed.gradient_step(agent, loss, batch, args.max_grad_norm, graphs)
            td_loss += value
            q_mean += q
    agent.updates += 1
    return {"losses/td_loss": (td_loss / steps).item(), "losses/q_values": (q_mean / steps).item()}


def decay_horizon(args: Args) -> float:
    """An agent's frames over which its rate anneals: its share of the run (--total-frames / --num-agents); its first ε
    decay lasts --agent-epsilon-decay-fraction of it."""
    return args.total_frames / args.num_agents


def annealed_lr(args: Args, frames: float) -> float:
    """The agents' learning rate after `frames` of an agent's own frames: linear from --learning-rate to 0 at the
    decay horizon."""
    return args.learning_rate * max(0.0, 1.0 - frames / decay_horizon(args))


# ====================================================================== BigPond: the Lake's uniform draw
@dataclass
class BigPond:
    """The BigAgent's replay on the device, frames stored once: transition i's obs is frames[obs_start[i] : + stack],
    its target returns[i] + discounts[i] x V(frames[bootstrap_start[i] : + stack])."""

    frames: torch.Tensor  # (F, *frame) uint8
    obs_start: torch.Tensor  # (M,) int64
    actions: torch.Tensor  # (M,) int64
    returns: torch.Tensor  # (M,) float32: the n-step sum of sign-clipped rewards (n = 1: the reward)
    discounts: torch.Tensor  # (M,) float32: γ^m, 0 after a termination (m <= n: the steps the sum spans)
    bootstrap_start: torch.Tensor  # (M,) int64: the first frame of the observation m steps on


def n_step_targets(
    obs_start: np.ndarray, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, n: int, gamma: float
) -> tuple:
    """(returns, discounts, bootstrap_start) of every transition of concatenated stream slices: transition i sums the
    sign-clipped rewards of i .. j = i + m - 1, m <= n, and bootstraps from j's next obs times γ^m (not if j
    terminated). The chain goes on from j only if j neither terminated nor was truncated and j + 1's obs starts one
    frame later (the same slice and game). n = 1 gives exactly (r, γ (1 - terminated), obs_start + 1)."""
    M, follows = len(obs_start), np.zeros(len(obs_start), bool)  # follows[i]: i + 1 goes on from i
    follows[:-1] = (obs_start[1:] == obs_start[:-1] + 1) & ~terminated[:-1] & ~truncated[:-1]
    clipped = np.sign(rewards).astype(np.float32)
    j, returns, scale = np.arange(M), clipped, np.ones(M, np.float32)  # scale: γ^(m - 1) of the steps summed so far
    for _ in range(n - 1):
        going = follows[j]
        j = j + going
        scale = np.where(going, scale * np.float32(gamma), scale)
        returns = np.where(going, returns + scale * clipped[j], returns)
    return returns, scale * (gamma * (1 - terminated[j].astype(np.float32))), obs_start[j] + 1


def fill_big_pond(lake: Lake, args: Args, rng: np.random.Generator, device: torch.device) -> BigPond:
    """Draw --big-pond-size transitions uniformly from the Lake as contiguous stream slices, then copy them into one
    preallocated device tensor."""
    size, steps = args.big_pond_size, args.big_pond_slice_steps
    chunks, total = [], 0
    while total < size:
        # ~4k transitions a call reuse freed memory; 64k a call fault in fresh pages and filled at half the rate
        num_slices = min(max(1, (1 << 12) // steps), -(-(size - total) // steps))
        chunk = lake.sample_slices(num_slices, steps, rng=rng)
        chunks.append(chunk)
        total += len(chunk.obs_start)
    num_frames = sum(len(c.frames) for c in chunks)
    frames = torch.empty((num_frames, *chunks[0].frames.shape[1:]), dtype=torch.uint8, device=device)
    offset, obs_start = 0, []
    for c in chunks:
        frames[offset : offset + len(c.frames)] = torch.from_numpy(c.frames).to(device)
        obs_start.append(c.obs_start + offset)
        offset += len(c.frames)
    obs_start = np.concatenate(obs_start)
    actions, rewards, terminated, truncated = (
        np.concatenate([getattr(c, k) for c in chunks]) for k in ("actions", "rewards", "terminated", "truncated")
    )
    returns, discounts, bootstrap_start = n_step_targets(  # before the cut to `size`: chains may run past it
        obs_start, rewards, terminated, truncated, args.big_n_step, args.gamma
    )
    take = dict(
        obs_start=obs_start, actions=actions, returns=returns, discounts=discounts, bootstrap_start=bootstrap_start
    )
    return BigPond(frames=frames, **{k: torch.from_numpy(v[:size]).to(device) for k, v in take.items()})


# ====================================================================== the BigAgent: (Double) DQN and its loss
@dataclass
class BigAgent:
    """The DQN learner of the BigPond (it never acts: its clones do)."""

    q_network: nn.Module
    target_network: nn.Module
    optimizer: torch.optim.Optimizer
    updates: int = 0
    graph: Optional[Callable] = None  # --cuda-graphs: an update's forward and backward, captured at its first


def make_big_agent(args: Args, n_actions: int, device: torch.device) -> BigAgent:
    q_network = make_q_network(args, n_actions, device)
    target_network = make_q_network(args, n_actions, device)
    target_network.load_state_dict(q_network.state_dict())
    return BigAgent(q_network, target_network, make_optimizer(args, q_network, big=True))


def big_agent_loss(big_agent: BigAgent, args: Args, obs, actions, returns, discounts, next_obs) -> tuple:
    """MSE (CleanRL dqn_atari) to returns + discounts x the target's value of next_obs (Double DQN: of the online
    network's greedy action); returns it and the Q-values of the actions."""
    with torch.no_grad():
        next_v = chosen(big_agent.target_network(next_obs), big_agent.q_network(next_obs).argmax(1))
        td_target = returns + discounts * next_v
    q_taken = chosen(big_agent.q_network(obs), actions)
    return F.mse_loss(q_taken, td_target), q_taken


# ====================================================================== clone, and what the BigAgent learned
def clone_agents(agents: list, big_agent: BigAgent, args: Args) -> None:
    """Step 7: every agent := the BigAgent, a fresh RAdam, its ε restarted at --agent-epsilon-reset (its learning
    rate keeps following its own frames)."""
    for agent in agents:
        agent.q_network.load_state_dict(big_agent.q_network.state_dict())
        agent.optimizer = make_optimizer(args, agent.q_network, big=False)
        decay = args.agent_epsilon_reset_decay_frames
        agent.epsilon_schedule = dict(start=args.agent_epsilon_reset, end=args.agent_epsilon_end, decay_frames=decay)
        agent.epsilon_schedule["frames_at_reset"] = agent.frames


def draw_probe(lake: Lake, args: Args, phase: int, device: torch.device) -> torch.Tensor:
    """The phase's Lake states for the collapse metrics."""
    rng = np.random.default_rng(derive_seed(args, PROBE, phase))
    return torch.from_numpy(np.asarray(lake.sample(args.collapse_probe_states, rng=rng).obs)).to(device)


# ====================================================================== checkpoints
@dataclass
class State:
    """The loop's state from phase to phase: with the networks (agent_state) and the random generators, exactly what a
    checkpoint holds. Where a resume goes on: update > 0, that phase after its update `update` (part "agents") or at
    its BigAgent part (part "big_agent"); update 0, the next phase."""

    phase: int = 0
    update: int = 0  # the phase's last agent update made
    part: Literal["agents", "big_agent"] = "agents"
    global_frames: int = 0
    new_transitions: int = 0  # poured into the Lake since the last BigPond fill
    levels: Optional[list] = None  # the agents' last evaluation: at a phase's end, the level its clones must regain
    # the last clone: its frames, the agents' levels just before it, the frames after it when each regained its level
    clone: dict = field(default_factory=lambda: {"frames": 0, "levels": None, "recovered": None})
    best_return: float = -float("inf")  # the best evaluation return so far, that of checkpoints/best.pt
    wandb_id: Optional[str] = None


class Stop(Exception):
    """A stop asked for (SIGTERM, SIGUSR1, Ctrl-C: lifecycle.stop_requested; --stop-after-*), raised once the
    checkpoint it resumes from is written."""


# Taken from the command line on --resume: the session's flags, and flags that change no state a checkpoint holds
SESSION_FLAGS = ("resume", "stop_after_phases", "stop_after_updates")
RESUME_CAN_CHANGE = tuple("total_frames capture_video track wandb_project_name wandb_entity".split())


def agent_state(agent) -> dict:
    """An Agent's or the BigAgent's part of a checkpoint."""
    state = dict(q_network=agent.q_network.state_dict(), optimizer=agent.optimizer.state_dict(), updates=agent.updates)
    if isinstance(agent, Agent):
        state.update(epsilon_schedule=dict(agent.epsilon_schedule), frames=agent.frames)
    else:
        state["target_network"] = agent.target_network.state_dict()
    return state


def load_agent_state(agent, state: dict) -> None:
    agent.q_network.load_state_dict(state["q_network"])
    agent.optimizer.load_state_dict(state["optimizer"])
    agent.updates = state["updates"]
    if isinstance(agent, Agent):
        agent.epsilon_schedule, agent.frames = dict(state["epsilon_schedule"]), state["frames"]
    else:
        agent.target_network.load_state_dict(state["target_network"])


# ====================================================================== the fresh view: the Ponds read in place
@dataclass
class FreshView:
    """The agents' transitions of this phase that are still in their Ponds, read in place (no frame is copied: the
    Pond is the BigPond's fresh part). Transition i is agent k's Pond row at time j of env n, under a virtual index
    v = offset_k + n (L_k + 1) + j (L_k: the Pond rows written this phase, at most --pond-steps, in time order; j = L_k
    is the agent's current obs, the next obs of its newest row), so that n_step_targets chains consecutive steps as it
    does the Lake's slices."""

    agents: list  # the agents whose Ponds are read
    offsets: list  # offset_k of each agent's virtual indices
    rows: list  # (L_k + 1,) int64 device tensors: the Pond row of each time j (the last, j = L_k, unused)
    obs_index: torch.Tensor  # (M,) int64: v of each transition's obs
    actions: torch.Tensor  # (M,) int64
    returns: torch.Tensor  # (M,) float32
    discounts: torch.Tensor  # (M,) float32
    bootstrap_index: torch.Tensor  # (M,) int64: v of the obs it bootstraps from


def fresh_view(agents: list, rows_written: int, args: Args) -> FreshView:
    """Every transition that the agents made this phase and their Ponds still hold: rows_written rows of each Pond at
    most (the Pond is a ring: after a drain its rows stay until overwritten), the newest ending at pos - 1. A row is a
    transition unless the obs after it is a reset obs (an autoreset step, or a FIRE forced after a life loss)."""
    device = agents[0].pond.actions.device
    offsets, rows_list, parts, offset = [], [], [], 0
    for agent in agents:
        pond = agent.pond
        P, N = pond.actions.shape
        L = min(rows_written, P)
        rows = (pond.pos - L + np.arange(L)) % P  # time order
        next_start = np.concatenate([pond.episode_start[rows[1:]], agent.episode_start[None]])  # (L, N)
        n, j = np.nonzero(~next_start.T)  # env-major: each env's steps in time order, as a stream slice
        v = offset + n * (L + 1) + j
        returns, discounts, bootstrap = n_step_targets(
            v,
            pond.rewards[rows[j], n],
            pond.terminated[rows[j], n],
            pond.truncated[rows[j], n],
            args.big_n_step,
            args.gamma,
        )
        rows_t = torch.from_numpy(np.append(rows, 0)).to(device)
        actions = pond.actions[rows_t[torch.from_numpy(j).to(device)], torch.from_numpy(n).to(device)]
        parts.append((v, actions, returns, discounts, bootstrap))
        offsets.append(offset)
        rows_list.append(rows_t)
        offset += N * (L + 1)
    host = lambda i, dtype: torch.from_numpy(np.concatenate([p[i] for p in parts]).astype(dtype)).to(device)  # noqa
    return FreshView(
        agents=agents,
        offsets=offsets,
        rows=rows_list,
        obs_index=host(0, np.int64),
        actions=torch.cat([p[1] for p in parts]),
        returns=host(2, np.float32),
        discounts=host(3, np.float32),
        bootstrap_index=host(4, np.int64),
    )


def fresh_obs(view: FreshView, index: torch.Tensor) -> torch.Tensor:
    """The observations (B, stack, *frame) at virtual indices: Pond rows, or an agent's current obs (j = L_k)."""
    out = None
    for agent, offset, rows in zip(view.agents, view.offsets, view.rows):
        L, N = len(rows) - 1, agent.pond.actions.shape[1]
        mine = (index >= offset) & (index < offset + N * (L + 1))
        n, j = (index - offset).clamp(0, N * (L + 1) - 1).div(L + 1, rounding_mode="floor"), (index - offset) % (L + 1)
        obs = torch.where((j == L).view(-1, *[1] * (agent.obs.dim() - 1)), agent.obs[n], agent.pond.obs[rows[j], n])
        out = obs if out is None else torch.where(mine.view(-1, *[1] * (obs.dim() - 1)), obs, out)
    return out


def live_big_agent_update(
    big_agent: BigAgent, big_pond: Optional[BigPond], view: FreshView, args: Args, generator: torch.Generator
) -> tuple:
    """One gradient step on --big-batch-size transitions drawn uniformly from the BigPond (the Lake's draw) and the
    fresh view together, with the BigAgent's own generator (the agents' random stream stays theirs)."""
    device = view.actions.device
    lake_size = 0 if big_pond is None else len(big_pond.obs_start)
    idx = torch.randint(lake_size + len(view.actions), (args.big_batch_size,), device=device, generator=generator)
    parts = []
    if lake_size:
        old = idx[idx < lake_size]
        offsets = torch.arange(args.stack_size, device=device)
        parts.append(
            [
                big_pond.frames[big_pond.obs_start[old, None] + offsets],
                big_pond.actions[old],
                big_pond.returns[old],
                big_pond.discounts[old],
                big_pond.frames[big_pond.bootstrap_start[old, None] + offsets],
            ]
        )
    new = idx[idx >= lake_size] - lake_size
    parts.append(
        [
            fresh_obs(view, view.obs_index[new]),
            view.actions[new],
            view.returns[new],
            view.discounts[new],
            fresh_obs(view, view.bootstrap_index[new]),
        ]
    )
    obs, actions, returns, discounts, next_obs = (torch.cat(p) for p in zip(*parts))
    big_agent.updates += 1
    loss = lambda *b: big_agent_loss(big_agent, args, *b)  # noqa: E731
    batch = [obs, actions, returns, discounts, next_obs]
    return speed.gradient_step(big_agent, loss, batch, None, args.cuda_graphs and device.type == "cuda")


# ====================================================================== live transfer: catch-up, acting BigAgent
def catch_up(
    big_agent: BigAgent, big_pond: Optional[BigPond], view: FreshView, owed: int, args: Args, generator
) -> dict:
    """Step 3: the BigAgent's updates owed to the agents' transitions so far (`owed` in all), --big-replay-ratio
    samples each, on the BigPond and the fresh view."""
    device = view.actions.device
    stats, updates_before = [torch.zeros((), device=device) for _ in range(2)], big_agent.updates
    for _ in range(owed - updates_before):
        for total, x in zip(stats, live_big_agent_update(big_agent, big_pond, view, args, generator)):
            total += x
        if big_agent.updates % args.big_target_network_frequency == 0:
            big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
    made = max(1, big_agent.updates - updates_before)
    metrics = {
        "big_agent/losses/td_loss": (stats[0] / made).item(),
        "big_agent/losses/q_values": (stats[1] / made).item(),
        "big_agent/charts/updates": big_agent.updates,
    }
    if device.type == "cuda":  # CUDA runs asynchronously: the BigAgent's kernels, not the agents'
        torch.cuda.synchronize(device)
    return metrics


def make_big_actor(args: Args, big_agent: BigAgent, num_envs: int, device: torch.device) -> Agent:
    """The acting BigAgent: an Agent on the BigAgent's network (its optimizer unused: it learns by catch_up), with
    envs, a Pond and an ε schedule of its own."""
    share = args.total_frames * num_envs / (args.num_agents * args.num_envs + num_envs)  # its frames in the run
    schedule = {
        "start": args.big_epsilon_start,
        "frames_at_reset": 0,
        "end": args.agent_epsilon_end if args.big_epsilon_end is None else args.big_epsilon_end,
        "decay_frames": int(args.agent_epsilon_decay_fraction * share),
    }
    envs, pond = make_envs(args, num_envs), make_pond(args, num_envs, device)
    actor = Agent("big_agent", big_agent.q_network, big_agent.optimizer, schedule, envs=envs, pond=pond)
    actor.values = torch.zeros((args.num_steps, num_envs), device=device)
    actor.rollout_game_over, actor.rollout_autoreset = (np.zeros((args.num_steps, num_envs), bool) for _ in range(2))
    return actor


def big_agent_acts(actor: Agent, args: Args, device: torch.device, generator: torch.Generator) -> dict:
    """The acting BigAgent's rollout: --num-steps steps of its envs, ε-greedy on the BigAgent's network with the
    BigAgent's generator (the agents' stream stays theirs), into its Pond. Returns its ε and the games it finished."""
    N, A = actor.envs.num_envs, actor.envs.single_action_space.n
    for t in range(args.num_steps):
        drawn = (
            torch.randint(A, (N,), device=device, generator=generator),
            torch.rand(N, device=device, generator=generator),
        )
        act(actor, t, drawn)
        receive(actor, args, device, t)
    metrics = {
        "big_agent/charts/epsilon": epsilon(actor.epsilon_schedule, actor.frames),
        "big_agent/charts/frames": actor.frames,
    }
    if actor.finished:  # full games, unclipped
        metrics["big_agent/charts/episodic_return"] = float(np.mean([g[0] for g in actor.finished]))
        metrics["big_agent/charts/episodic_length"] = float(np.mean([g[1] for g in actor.finished]))
        actor.finished = []
    return metrics


# ====================================================================== the run
def main(args: Args) -> None:
    # ------------------------------------------------------------------ flags, run folder, Lake (before any env)
    checkpoint = None
    if args.resume is not None:
        run_dir, path = Path(args.resume), latest_checkpoint(Path(args.resume))
        checkpoint = lifecycle.load_for_resume(run_dir, path, "pqn_lake_live", needs=("part", "big_generator"))
        args = lifecycle.resumed_args(args, checkpoint, SESSION_FLAGS, RESUME_CAN_CHANGE)
        run_name = run_dir.name
        print(f"resuming {run_name} from {path} (phase {checkpoint['phase']}, {checkpoint['global_frames']:,} frames)")
    check_args(args)
    if args.agent_epsilon_reset_decay_frames == 0:  # a quarter of an agent's frames per phase (see its help)
        frames = args.agent_updates_per_phase * args.num_envs * args.num_steps * frames_per_step(args)
        args.agent_epsilon_reset_decay_frames = frames // 4
    if checkpoint is None:
        run_dir, run_name = lifecycle.new_run(args)
    lake = lifecycle.open_lake(args, run_dir, checkpoint is not None)
    lifecycle.seed_everything(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    set_determinism(args, device)
    lifecycle.write_config(run_dir, "pqn_lake_live", run_name, args, device, RESUME_CAN_CHANGE)

    # ------------------------------------------------------------------ envs, agents, BigAgent, random play
    K = args.num_agents
    *envs, eval_envs = [make_envs(args, n) for n in [args.num_envs] * K + [K * args.eval_episodes]]
    agents = [make_agent(args, f"agent{k}", device, envs[k]) for k in range(K)]
    n_actions = agents[0].envs.single_action_space.n
    big_agent = make_big_agent(args, n_actions, device)
    networks = [agent.q_network for agent in agents]
    random_play, seed = replace(args, eval_epsilon=1.0), derive_seed(args, EVALUATION, 0, 0)
    random_return = float(evaluate(networks, random_play, eval_envs, seed, device)[0].mean())
    # the BigAgent draws its batches and acting from a generator of its own, and plays on envs of its own: the agents'
    # random stream and games are those of pqn_lake.py's single-PQN control with the same seed while no clone happens
    big_generator = torch.Generator(device).manual_seed(derive_seed(args, BIG_AGENT))
    big_actor = make_big_actor(args, big_agent, args.big_agent_num_envs, device) if args.big_agent_num_envs else None
    actors = agents + ([big_actor] if big_actor is not None else [])
    big_eval_envs = make_envs(args, args.eval_episodes)
    state = State()
    if checkpoint is not None:
        for agent, saved in zip(agents + [big_agent], checkpoint["agents"] + [checkpoint["big_agent"]]):
            load_agent_state(agent, saved)
        state = State(**{name: checkpoint[name] for name in State.__dataclass_fields__})
        big_generator.set_state(checkpoint["big_generator"])
        if big_actor is not None:
            saved_actor = checkpoint["big_actor"]
            big_actor.frames, big_actor.epsilon_schedule = saved_actor["frames"], saved_actor["epsilon_schedule"]
        if lake.num_transitions != checkpoint["lake_transitions"]:
            print(
                f"warning: the Lake holds {lake.num_transitions:,} transitions, {checkpoint['lake_transitions']:,} "
                "at the checkpoint (the run died mid-phase?): the run is no longer exactly the uninterrupted one"
            )
        lifecycle.set_rng_state(checkpoint["rng"])
    metrics_file = lifecycle.open_metrics(run_dir, None if checkpoint is None else state.global_frames)
    if args.track:
        config = {**vars(args), **lifecycle.software(device)}
        state.wandb_id = lifecycle.start_wandb(args, run_name, run_dir, state.wandb_id, config)
    lifecycle.catch_stop_signals()

    def log(metrics: dict) -> None:  # metrics.jsonl and, with --track, wandb, against global_frames
        lifecycle.log_row(metrics_file, args.track, {"global_frames": state.global_frames, **metrics})

    def save(name: str) -> None:  # everything needed to go on from `state`, atomically; the Lake's commits first
        lake.commit(wait=True)  # the checkpoint never points past what the Lake holds
        save_checkpoint(
            run_dir / "checkpoints" / name,
            {
                "args": vars(args),
                "run_name": run_name,
                **asdict(state),
                "agents": [agent_state(a) for a in agents],
                "big_agent": agent_state(big_agent),
                "lake_transitions": lake.num_transitions,
                "big_generator": big_generator.get_state(),
                "big_actor": big_actor and {"frames": big_actor.frames, "epsilon_schedule": big_actor.epsilon_schedule},
                "rng": lifecycle.rng_state(),
            },
            0,  # keep them all: the design wants many along the way
        )

    def keep_best(score: float, name: str, q_network: nn.Module) -> None:
        # checkpoints/best.pt: the network of the best evaluation so far (training can regress), as BigAgent and agents
        if score > state.best_return:
            state.best_return, network = score, {"q_network": q_network.state_dict()}
            best = {"return": score, "global_frames": state.global_frames, "network": name}
            atomic_save(
                run_dir / "checkpoints" / "best.pt",
                {
                    "args": vars(args),
                    "run_name": run_name,
                    "phase": state.phase,
                    "global_frames": state.global_frames,
                    "big_agent": network,
                    "agents": [network] * K,
                    "best": best,
                },
            )

    def evaluate_agents(seed_keys: tuple, line_phase: int, film: bool = False) -> tuple:
        # --eval-episodes games per agent; notes the first evaluation at which each agent regains its level before the
        # last clone. Returns (mean return per agent, returns, lengths, video, seconds, the row to log).
        start, clone = time.time(), state.clone
        seed = derive_seed(args, EVALUATION, *seed_keys)
        returns, lengths, video = evaluate(networks, args, eval_envs, seed, device, film=film)
        means, since = returns.mean(1), state.global_frames - clone["frames"]
        if clone["levels"] is not None:
            clone["recovered"] = [
                r if r is not None or m < level else since
                for r, m, level in zip(clone["recovered"], means, clone["levels"])
            ]
        row = {"eval/agents_mean": float(means.mean()), "eval/frames_since_clone": since, "charts/phase": line_phase}
        for agent, m, n in zip(agents, means, lengths):
            row[f"{agent.name}/eval/return"], row[f"{agent.name}/eval/length"] = float(m), float(n.mean())
        seconds = time.time() - start
        print(
            f"eval at {state.global_frames:,} frames ({since:,} after the last clone): agents "
            + " ".join(f"{m:.2f}" for m in means)
            + f", {returns.size} games, {seconds:.1f}s",
            flush=True,
        )
        return means, returns, lengths, video, seconds, row

    def evaluate_big_agent(seed_keys: tuple) -> dict:
        # the BigAgent's own games (envs and seed of its own), the run's eval/return: it is the run's product
        seed = derive_seed(args, EVALUATION, *seed_keys, BIG_AGENT)
        returns, lengths, _ = evaluate([big_agent.q_network], args, big_eval_envs, seed, device)
        print(f"eval at {state.global_frames:,} frames: BigAgent {returns.mean():.2f}", flush=True)
        keep_best(float(returns.mean()), "big_agent", big_agent.q_network)
        return {
            "eval/return": float(returns.mean()),
            "big_agent/eval/return": float(returns.mean()),
            "big_agent/eval/length": float(lengths.mean()),
        }

    if checkpoint is None:
        log({"eval/random_return": random_return})
    print(
        f"run {run_name}: {K} agents x {args.num_envs} envs on {device}, Lake at {lake.path}; random play scores "
        f"{random_return:.2f}",
        flush=True,
    )

    # ------------------------------------------------------------------ the phases
    clock, updates_here, phases_here, U = (time.time(), state.global_frames), 0, 0, args.agent_updates_per_phase
    clone_every = U if args.clone_every_updates is None else args.clone_every_updates
    try:
        while state.global_frames < args.total_frames:
            if state.update == 0:  # a new phase (a resume into a phase goes on with it)
                state.phase += 1
            seconds = {"start": time.time(), "evaluation": 0.0, "big_agent": 0.0}
            print(f"phase {state.phase}: agents acting from {state.global_frames:,} frames", flush=True)
            # ale-py cannot save its emulators: a phase's envs are reset from (seed, actor, phase), after a mid-phase
            # stop from (seed, actor, phase, update)
            for k, actor in enumerate(actors):
                keys = (k, state.phase) if state.update == 0 else (k, state.phase, state.update)
                reset_envs(actor, derive_seed(args, ENV_RESET, *keys), device)
            # the BigPond's older part, from the Lake; its fresh part is the Ponds' rows of this phase
            big_pond, big_start_updates = None, big_agent.updates
            if lake.num_transitions > 0:
                draw = np.random.default_rng(derive_seed(args, BIG_POND_DRAW, state.phase))
                big_pond = fill_big_pond(lake, args, draw, device)
            seconds["big_pond_fill"] = time.time() - seconds["start"]
            # -------------------------------------------------------------- 1-3: PQN agents -> Ponds -> Lake, the
            # BigAgent catching up after every update on what the Ponds hold of this phase (they start empty)
            start, first = time.time(), state.update + 1
            for update in range(first, U + 1):
                state.update = update
                T, N = args.num_steps, args.num_envs
                drawn = speed.draw_in_serial_order(K, T, N, n_actions, args.update_epochs, device)
                updates = speed.in_agent_threads(pqn_update, agents, drawn, [args] * K, [device] * K)
                state.global_frames += K * N * T * frames_per_step(args)
                metrics, games = {}, []
                for agent, update_metrics in zip(agents, updates):
                    if agent.finished:  # full games, unclipped
                        games += agent.finished
                        returns, lengths = zip(*agent.finished)
                        metrics[f"{agent.name}/charts/episodic_return"] = float(np.mean(returns))
                        metrics[f"{agent.name}/charts/episodic_length"] = float(np.mean(lengths))
                        agent.finished = []
                    metrics.update({f"{agent.name}/{key}": value for key, value in update_metrics.items()})
                    metrics[f"{agent.name}/charts/epsilon"] = epsilon(agent.epsilon_schedule, agent.frames)
                    if agent.pond.pos == args.pond_steps:  # a full Pond drains into the Lake
                        state.new_transitions += drain_pond(agent.pond, lake, agent.name)
                if games:
                    metrics["charts/episodic_return"] = float(np.mean([g[0] for g in games]))
                    metrics["charts/episodic_length"] = float(np.mean([g[1] for g in games]))
                big_start = time.time()
                if big_actor is not None:  # (before step 3: its rollout is part of the fresh view)
                    metrics.update(big_agent_acts(big_actor, args, device, big_generator))
                    state.global_frames += big_actor.envs.num_envs * T * frames_per_step(args)
                    if big_actor.pond.pos == args.pond_steps:
                        state.new_transitions += drain_pond(big_actor.pond, lake, big_actor.name)
                view = fresh_view(actors, (update - first + 1) * T, args)
                frames = sum(a.frames for a in actors)
                transitions = frames // frames_per_step(args)
                owed = int(args.big_replay_ratio * frames // frames_per_step(args) // args.big_batch_size)
                metrics.update(catch_up(big_agent, big_pond, view, owed, args, big_generator))
                metrics["charts/replay_ratio"] = big_agent.updates * args.big_batch_size / max(1, transitions)
                seconds["big_agent"] += time.time() - big_start
                sps = int((state.global_frames - clock[1]) / frames_per_step(args) / (time.time() - clock[0]))
                log({**metrics, "charts/SPS": sps, "charts/phase": state.phase})
                if state.update % max(1, U // 10) == 0:
                    print(
                        f"phase {state.phase} update {state.update}/{U}  frames {state.global_frames:,}  SPS "
                        f"{sps:,}  episodic_return {metrics.get('charts/episodic_return', float('nan')):.2f}",
                        flush=True,
                    )
                last = state.update == U or state.global_frames >= args.total_frames
                if state.update % args.eval_every_updates == 0 or last:  # the last: the level a clone must regain
                    levels, *_, took, row = evaluate_agents((state.phase, state.update), state.phase)
                    best = int(levels.argmax())
                    keep_best(float(levels.max()), agents[best].name, agents[best].q_network)
                    state.levels = [float(x) for x in levels]
                    big_start = time.time()
                    row.update(evaluate_big_agent((state.phase, state.update)))
                    log(row)
                    seconds["evaluation"] += took + time.time() - big_start
                if state.global_frames >= args.total_frames:
                    break
                updates_here += 1
                if not last and (lifecycle.stop_requested or updates_here == args.stop_after_updates):
                    for actor in actors:  # (slurm's lead time is shorter than a phase)
                        state.new_transitions += drain_pond(actor.pond, lake, actor.name)
                    save(f"phase_{state.phase:04d}_update_{state.update:06d}.pt")
                    raise Stop(f"stopping in phase {state.phase} after update {state.update}; continue with "
                               f"--resume {run_dir}")  # fmt: skip
            for actor in actors:  # the phase's last transitions into the Lake
                state.new_transitions += drain_pond(actor.pond, lake, actor.name)
            lake.commit(wait=True)
            big_pond = view = None  # (the device memory they hold)
            clone = state.clone
            if clone["levels"] is not None:  # how fast the last clone's agents got back to their level before it
                since = state.global_frames - clone["frames"]
                frames = [r if r is not None else since for r in clone["recovered"]]
                row = {f"{a.name}/recovery/frames": f for a, f in zip(agents, frames)}
                row.update({"recovery/frames": float(np.mean(frames)), "charts/phase": state.phase})
                log({**row, "recovery/agents_regained": sum(r is not None for r in clone["recovered"])})
            seconds["agents"] = time.time() - start - seconds["evaluation"] - seconds["big_agent"]
            # -------------------------------------------------------------- 4: clone, if due
            probe = draw_probe(lake, args, state.phase, device)
            row = {
                **collapse_metrics(big_agent.q_network, networks, probe, n_actions),
                "big_agent/charts/phase_updates": big_agent.updates - big_start_updates,
                **{f"time/{p}_seconds": seconds.get(p, 0.0) for p in ("agents", "big_pond_fill", "big_agent")},
                "charts/lake_transitions": lake.num_transitions,
                "charts/phase": state.phase,
            }
            if clone_every > 0 and (agents[0].updates % clone_every == 0 or state.global_frames >= args.total_frames):
                clone_agents(agents, big_agent, args)
                state.clone = {"frames": state.global_frames, "levels": list(state.levels), "recovered": [None] * K}
                film = args.capture_video
                *_, returns, lengths, video, took, eval_row = evaluate_agents((state.phase, 0), state.phase + 1, film)
                log(eval_row)
                seconds["evaluation"] += took
                big_return, agents_return = float(returns.mean()), float(np.mean(state.levels))
                row.update(
                    {
                        "eval/return": big_return,
                        "eval/length": float(lengths.mean()),
                        "big_agent/eval/return": big_return,
                        "big_agent/eval/length": float(lengths.mean()),
                        "distill/big_minus_agents": big_return - agents_return,
                        **({"distill/big_over_agents": big_return / agents_return} if agents_return > 0 else {}),
                    }
                )
                keep_best(big_return, "big_agent", big_agent.q_network)
                if film:
                    video_path = run_dir / "videos" / f"phase_{state.phase:04d}_big_agent.mp4"
                    lifecycle.log_video(video_path, video, state.global_frames, args.track)
            row["time/eval_seconds"] = seconds["evaluation"]
            row["time/eval_fraction"] = seconds["evaluation"] / (time.time() - seconds["start"])
            log(row)
            # -------------------------------------------------------------- the phase's checkpoint
            state.update = 0
            save(f"phase_{state.phase:04d}.pt")
            phases_here += 1
            print(
                f"phase {state.phase} done: {state.global_frames:,} frames, {time.time() - seconds['start']:.1f}s, "
                f"agents {' '.join(f'{x:.2f}' for x in state.levels or [])} (random play {random_return:.2f})",
                flush=True,
            )
            if lifecycle.stop_requested or phases_here == args.stop_after_phases:
                raise Stop(f"stopping after phase {state.phase}; continue with --resume {run_dir}")
    except Stop as stop:
        print(stop, flush=True)
    lake.close()
    for vector_env in envs + [eval_envs, big_eval_envs] + ([big_actor.envs] if big_actor is not None else []):
        vector_env.close()
    lifecycle.close_metrics(metrics_file, args.track)


if __name__ == "__main__":
    sys.excepthook = one_line_errors
    main(tyro.cli(Args))
