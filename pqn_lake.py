"""pqn_lake.py: four PQN agents pour every transition into the Lake; a BigAgent learns from it with Double
DQN and the agents are cloned from the BigAgent, phase after phase (../shared/seeds/000, "Algorithm").

    Lake: a huge replay store on disk (lake.py). Four agents, four Ponds: small ring buffers on the device.
    while global_frames < total_frames:                                          (one phase)
        1. every agent trains with PQN on its own envs and pours every transition into its Pond
           (the agents are evaluated every --eval-every-updates updates and at the last one)
        2. a full Pond drains into the Lake (the Lake writes on its own thread)
        3. stop after --agent-updates-per-phase PQN updates per agent
        4. fill one BigPond (on the device) uniformly from the Lake
        5. train the BigAgent on the BigPond with (Double) DQN; its ε schedule is reset
        6. stop after --big-replay-ratio x the phase's new transitions samples (or --big-agent-updates-per-phase)
        7. clone the agents from the BigAgent, reset their ε schedules, evaluate them (the BigAgent's evaluation)
        checkpoint (and stop here cleanly after SIGTERM / SIGUSR1 / Ctrl-C during steps 4-7)

Live transfer (--big-agent-schedule live, the seed's notes of June 26): the BigAgent learns while the agents act.
        after every update of step 1: the BigAgent catches up to --big-replay-ratio x the agents' transitions so far
            (in samples of --big-batch-size), on this phase's BigPond (drawn from the Lake at the phase start) and
            the agents' Ponds read in place (FreshView: every transition of the phase they still hold, the newest
            rollout's included); it is evaluated beside the agents
        at a phase end: clone (and reset ε) if --clone-every-updates says so (0: never), checkpoint

What the phase shows (metrics.jsonl and wandb, against global_frames): distill/big_over_agents, the BigAgent's
evaluation return over the agents' mean just before the clone (and distill/big_minus_agents); then in the
next phase agentK/recovery/frames, the frames after the clone until agent K's evaluation first regains its
level before the clone (the phase's frames if it never does), and every evaluation's eval/frames_since_clone.

Every env of every agent is reset at the start of a phase with a seed derived from (seed, agent, phase),
and the BigPond's draw is seeded from (seed, phase): a phase depends only on the checkpoint at its start
(and the Lake it points at), so `--resume` from a phase end continues exactly as if the run had never
stopped. SIGTERM / SIGUSR1 / Ctrl-C during steps 1-3 checkpoint after the current update instead (slurm's lead
time is shorter than a phase); that resume resets the envs, a faithful continuation but not a bit-exact one.
A second Ctrl-C exits at once, without a checkpoint (the Lake keeps what it committed).

Frame accounting: global_frames = env steps of all agents x frame skip (each env frame counted once, the
convention of CleanRL and PQN; the frame skip is 1 for MinAtar and gymnasium ids: there a frame is an env step). ALE's own counter differs only
at game boundaries: the step that ends a game emulates k <= frame_skip frames (the game is over after
frame k), and the next, autoreset step emulates the reset's noop and FIRE frames (1 to noop_max) instead
of frame_skip. So per env, ALE frames = frame_skip x steps - sum over ended games of (frame_skip - k)
- sum over autoreset steps of (frame_skip - reset frames); the initial reset of each phase is not an
env step, and a FIRE forced after a life loss (--fire-after-life-loss) is an ordinary one.
tests/test_pqn_lake.py checks this equality exactly against info["frame_number"].

Outputs in runs/<run_name>/: config.json (every flag, and "script": "pqn_lake" for compare.py), metrics.jsonl
(every metric, one JSON line per log call, always written), checkpoints/phase_NNNN.pt, checkpoints/best.pt (the
network with the best evaluation return so far, for --eval-only), lake/ (unless --lake-path), videos/ (MP4, with
--capture-video), wandb/ (wandb's local files, with --track). Bad flags stop the run before anything is created,
with one line and exit code 2; a run that ends before its first update (a locked Lake, say) leaves no folder behind.
"""

import atexit
import copy
import errno
import io
import json
import os
import random
import re
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, NoReturn, Optional

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before CUDA starts)
# torch's OpenMP threads sleep between parallel regions instead of spinning (read when torch loads): spinning doubled
# the CPU time of the same run, and more next to a busy process (benchmarks/RESULTS.md, "CPU time under load")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import av
import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro

from lake import Lake, LakeError


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
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "pqn-lake"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    wandb_group: Optional[str] = None
    """the wandb group (e.g. one group for the seeds of one configuration)"""
    capture_video: bool = False
    """whether to film the BigAgent's first evaluation game of every phase to runs/<run_name>/videos/ (H.264 MP4, in
    colour at the game's native size; with --track also to wandb as media/video)"""
    runs_dir: str = "runs"
    """the folder that holds one subfolder per run"""
    resume: Optional[str] = None
    """continue the run in this folder (runs/<run_name>) from its latest checkpoint, with its own flags; from this
    command line it takes --stop-after-phases, --stop-after-updates and these, printed when they change anything:
    --total-frames (to extend or shorten the run), --keep-checkpoints, --capture-video, --lake-fsync-every,
    --track and --wandb-*; any other flag is refused (exit 2), as it cannot change mid-run"""
    keep_checkpoints: int = 0
    """how many of the latest phase checkpoints to keep (0: all, the seed wants many along the way); a mid-phase
    checkpoint is kept until its phase ends"""
    stop_after_phases: int = 0
    """checkpoint and exit after this many phases in this process (0: run to --total-frames); the same
    path as SIGTERM/SIGUSR1"""
    stop_after_updates: int = 0
    """checkpoint and exit after this many agent updates in this process, mid-phase (0: never); the same
    path as SIGTERM/SIGUSR1 during the agents' part of a phase"""
    eval_only: bool = False
    """evaluate (and with --capture-video film) --checkpoint, print the returns and exit"""
    checkpoint: Optional[str] = None
    """the checkpoint file for --eval-only"""
    debug_dump_transitions: bool = False
    """write everything poured into the Ponds (and ALE's frame counters) to runs/<run_name>/debug/ (tests)"""

    # ---------------------------------------------------------------- environment
    env_id: str = "Breakout-v5"
    """an Atari id in envpool style (Breakout-v5, MsPacman-v5: ale-py's AtariVectorEnv), a MinAtar id as the
    minatar package registers them (MinAtar/Breakout-v1: minimal action set, -v0: all 6 actions; Asterix,
    Breakout, Freeway, Seaquest, SpaceInvaders), or a registered gymnasium id with uint8 image frames,
    "module:EnvId" allowed (tests.synthetic_env:PondGlyph-v0). Flags whose default is None take the
    family's default, named in their help (gymnasium ids take Atari's)"""
    total_frames: Optional[int] = None
    """total env frames of all agents (and the BigAgent's envs); default: Atari 100M (the seed's), MinAtar 5M
    (the MinAtar paper's budget, Young & Tian 2019: its DQN is near its plateau there)"""
    frame_height: int = 84
    """frame height (Atari: resized to it; gymnasium ids: must match the env's frames); PQN/CleanRL: 84.
    MinAtar: not used, a frame is the game's (10, 10, channels) grid of 0/1"""
    frame_width: int = 84
    """frame width (as --frame-height)"""
    rgb: bool = False
    """colour frames (H, W, 3) instead of grayscale; PQN/CleanRL: grayscale (MinAtar: not used)"""
    frame_skip: int = 4
    """Atari frames per env step, the last two max-pooled (PQN/CleanRL/envpool: 4); MinAtar and gymnasium ids
    have none (a frame is an env step)"""
    stack_size: Optional[int] = None
    """frames stacked into one observation; default: Atari 4 (PQN/CleanRL), MinAtar 1 (purejaxql pqn_minatar
    and the MinAtar paper stack none: the grids carry motion trails)"""
    noop_max: int = 30
    """Atari: up to this many no-op frames at reset (PQN/CleanRL/envpool: 30)"""
    repeat_action_probability: Optional[float] = None
    """sticky actions; default: Atari 0 (purejaxql pqn_atari.yaml; Machado et al. 2018 recommend 0.25), MinAtar
    0.1 (the minatar package's and the MinAtar paper's)"""
    max_episode_frames: int = 108_000
    """a game is truncated after this many frames (envpool/CleanRL: 108000, 30 minutes of Atari; MinAtar games
    have no cap in the package, so there it only stops a game that never ends)"""
    env_threads: int = 0
    """ale-py threads per vector env (0: one per core)"""
    fire_after_life_loss: bool = True
    """Atari games whose action set has FIRE: the step after a lost life plays FIRE, whatever the policy
    chose (Breakout waits for it; ale-py presses FIRE only at a game's reset). One ordinary step, the FIRE of
    SB3's FireResetEnv (CleanRL dqn_atari), not envpool's noops + FIRE; it is no learning transition.
    --no-fire-after-life-loss: the policy must press FIRE itself (the behaviour before this flag)"""

    # ---------------------------------------------------------------- PQN agents
    num_agents: int = 4
    """the number of independent PQN agents (the seed: four)"""
    num_envs: int = 128
    """envs per agent (purejaxql pqn_atari.yaml and pqn_minatar.yaml: 128; CleanRL pqn_atari_envpool.py: 8)"""
    num_steps: int = 32
    """steps per env in each rollout (purejaxql, Atari and MinAtar: 32; CleanRL: 128)"""
    update_epochs: int = 2
    """epochs over each rollout (purejaxql, Atari and MinAtar: 2; CleanRL: 4)"""
    num_minibatches: int = 32
    """minibatches per epoch (purejaxql, Atari and MinAtar: 32; CleanRL: 4)"""
    learning_rate: Optional[float] = None
    """RAdam learning rate of the agents; default: Atari 2.5e-4 (purejaxql pqn_atari.yaml, CleanRL), MinAtar 5e-4
    (purejaxql pqn_minatar.yaml)"""
    anneal_lr: bool = False
    """anneal each agent's learning rate linearly to 0 over its share of --total-frames, one step per minibatch step
    (purejaxql LR_LINEAR_DECAY, CleanRL anneal_lr). The rate follows the agent's own frames, so a clone keeps its place
    in the run (its ε restarts, its rate does not) and a resume continues it exactly"""
    gamma: float = 0.99
    """discount factor, agents and BigAgent (purejaxql, Atari and MinAtar, CleanRL: 0.99)"""
    q_lambda: float = 0.65
    """λ of the Q(λ) returns (purejaxql, Atari and MinAtar, CleanRL: 0.65)"""
    max_grad_norm: float = 10.0
    """gradient clipping of the agents (purejaxql, Atari and MinAtar, CleanRL: 10)"""
    agent_epsilon_start: float = 1.0
    """the agents' initial ε (purejaxql: 1)"""
    agent_epsilon_end: Optional[float] = None
    """the agents' final ε; default: Atari 0.001 (purejaxql pqn_atari.yaml; CleanRL: 0.01), MinAtar 0.05 (purejaxql
    pqn_minatar.yaml)"""
    agent_epsilon_decay_fraction: float = 0.1
    """the first decay lasts this fraction of an agent's share of --total-frames (purejaxql, Atari and MinAtar,
    CleanRL: 0.1)"""
    agent_updates_per_phase: Optional[int] = None
    """PQN updates (rollout + epochs) per agent in a phase; default: Atari 500 (the seed), MinAtar 50: 819,200
    frames a phase at the defaults, so 6 clones inside MinAtar's 5M frames (the seed's 100M hold 3), and each agent
    plays 204,800 frames a phase, the span in which PQN's own MinAtar Breakout run doubles its return"""
    pond_steps: int = 128
    """steps x num_envs a Pond holds on the device before it drains into the Lake (a multiple of --num-steps)"""
    batched_inference: bool = False
    """one vmapped forward pass (torch.func) for all agents' actions at each step instead of one per agent:
    fewer kernel launches on a GPU, but no env steps while it runs; no gain on the CPU, where the vmapped
    pass is ~1.7x slower (benchmarks/loop_bench.py measures it in the loop)"""

    # ---------------------------------------------------------------- clone
    agent_epsilon_reset: float = 1.0
    """after each clone the agents' ε restarts here (the seed's open question "reset to 1.0?"; 1.0 repeats
    the initial schedule)"""
    agent_epsilon_reset_decay_frames: int = 0
    """...and decays to --agent-epsilon-end over this many of each agent's frames; 0: a quarter of an agent's frames
    in a phase (--agent-updates-per-phase x --num-envs x --num-steps x frame skip / 4), so the clone re-explores
    around the BigAgent's policy for the first quarter and pours its own near-greedy play into the Lake for the
    rest, whatever the run's size (the seed's defaults: 2,048,000 frames, near the first decay's 10% of 25M)"""
    clone_optimizer: Literal["reset", "keep"] = "reset"
    """after a clone, start the agents' RAdam state afresh (reset) or keep each agent's own (keep)"""

    # ---------------------------------------------------------------- BigPond and BigAgent
    big_agent_schedule: Literal["phases", "live", "none"] = "phases"
    """phases: the seed's loop (BigPond, BigAgent, clone after every phase); live: the seed's second design (June 26),
    the BigAgent learns while the agents act, --big-replay-ratio x each agent update's new transitions after that
    update, on the Lake's BigPond (drawn at each phase start) plus the agents' Ponds read in place, and it is
    evaluated beside the agents; none: the single-PQN arm, no BigPond, BigAgent or clone, the agents learn on alone
    (--num-agents 1: the mixture's PQN agent given all the frames); its phases are only checkpoints (envs reset, as
    in the mixture) and its evaluations are its eval/return"""
    clone_every_updates: Optional[int] = None
    """clone the agents from the BigAgent every this many agent updates; default: every phase (--agent-updates-per-phase,
    the only value phases mode takes). live: 0 never clones (the BigAgent, trained from scratch on everyone's data, is
    the product), or a multiple of --agent-updates-per-phase (clones happen at phase ends, and at the run's end)"""
    live_lake_draw: Literal["uniform", "none"] = "uniform"
    """live: the BigPond's older transitions. uniform: --big-pond-size drawn uniformly from the Lake at every phase
    start (the seed's Lake under the BigAgent, older data never forgotten); none: only the Ponds, a recency window of
    the newest --pond-steps steps of every env of every agent (no disk read in the loop)"""
    big_pond_size: int = 1_000_000
    """transitions drawn uniformly from the Lake into the BigPond each phase (CleanRL dqn_atari buffer: 1M)"""
    big_pond_slice_steps: int = 64
    """the BigPond is read as contiguous stream slices of this many steps (longer: faster reads, more correlated
    neighbours in the BigPond)"""
    big_replay_ratio: float = 2.0
    """BigAgent samples per transition new to the Lake this phase: updates = ceil(ratio x new transitions /
    --big-batch-size), so its training follows the data. 2 = the agents' own (PQN: --update-epochs 2 over each
    rollout), which keeps the BigAgent's compute per phase below the agents' (a DQN sample costs ~1.7x a PQN one;
    CleanRL dqn_atari's ratio is 8); at 1 a Breakout pilot's BigAgent reached 0.7x the agents (benchmarks/RESULTS.md).
    0: --big-agent-updates-per-phase instead (the seed's literal 100)"""
    big_agent_updates_per_phase: int = 100
    """BigAgent updates per phase with --big-replay-ratio 0 (the seed's "stop after 100 steps": at the defaults a
    replay ratio of ~4e-4, too few for the BigAgent to learn what the agents know)"""
    big_batch_size: int = 256
    """BigAgent minibatch (CleanRL dqn_atari: 32; 256 does the same samples in 8x fewer, bigger steps)"""
    big_learning_rate: float = 2.5e-4
    """BigAgent Adam learning rate (CleanRL dqn_atari: 1e-4 at batch 32; the agents' 2.5e-4 at batch 256)"""
    big_target_network_frequency: int = 250
    """BigAgent updates between target syncs (CleanRL dqn_atari: 1000 steps at train frequency 4 = 250
    updates); the target is also synced when a phase's training starts"""
    big_double_dqn: bool = True
    """Double DQN targets (van Hasselt et al. 2016): the online net picks, the target net rates. Two departures
    from CleanRL dqn_atari: it is plain DQN (--no-big-double-dqn), and its network is the plain Nature CNN,
    where the BigAgent's is PQN's (LayerNorm after every hidden layer)"""
    big_loss: Literal["mse", "huber"] = "mse"
    """BigAgent TD loss (CleanRL dqn_atari: mse; Nature DQN: huber)"""
    big_n_step: int = 3
    """BigAgent targets over n steps of the BigPond's stream slices: n sign-clipped rewards, then γ^n times the
    (Double DQN) target network's value n observations on; cut short at a termination (no bootstrap), a truncation
    or a slice end (bootstrap there, as the agents' Q(λ) does). 1: the seed's one-step DQN; Rainbow, Ape-X: 3. 3 by
    the MinAtar learners study (benchmarks/RESULTS.md): the best final BigAgent of the four learners tried"""
    big_distill_coef: float = 0.0
    """weight of a distillation term in the BigAgent's loss (Policy Distillation, Rusu et al. 2016): KL(softmax(teacher
    Q / τ) || softmax(BigAgent Q)) on each sampled transition, the teacher being the agent whose stream it came from as
    it stands at the phase's end (the network the clone replaces); the BigAgent's own transitions have none. 0: the
    seed's DQN alone (the default: with 3-step targets it recovered faster on MinAtar but never learned Freeway)"""
    big_distill_temperature: float = 0.01
    """τ of the teacher's softmax over its Q-values (Rusu et al. 2016: 0.01, a near-greedy target)"""
    big_agent_reinit_each_phase: bool = False
    """re-initialise the BigAgent at each phase instead of continuing it (the seed's June 26 question)"""
    big_agent_num_envs: int = 0
    """if > 0, the BigAgent acts in this many envs of its own, one step per update; its frames count
    against --total-frames and feed the Lake as group "big_agent" """
    big_epsilon_reset: float = 1.0
    """the BigAgent's ε at the start of each phase (only used with --big-agent-num-envs)"""
    big_epsilon_end: float = 0.01
    """the BigAgent's final ε (CleanRL dqn_atari: 0.01)"""
    big_epsilon_decay_frames: int = 4_000_000
    """the BigAgent's ε decays over this many of its frames after each reset: CleanRL dqn_atari's decay, 10% of 10M
    steps = 1M steps = 4M frames (it restarts every phase: set it below the BigAgent's frames per phase,
    --big-agent-updates-per-phase x --big-agent-num-envs x frame skip, for ε to reach its end in a phase)"""

    # ---------------------------------------------------------------- evaluation
    eval_every_updates: int = 50
    """evaluate the agents every this many agent updates, and always at a phase's last update (the pre-clone level);
    they are evaluated once more right after each clone (the BigAgent's evaluation: the agents are its copies)"""
    eval_episodes: int = 10
    """full games per agent and evaluation (each on its own env, all envs stepped together, played to its end)"""
    eval_max_frames: Optional[int] = None
    """an evaluation game stops after this many frames, which bounds an evaluation's cost; default: Atari 108,000
    (the usual 30 minutes), MinAtar 10,000 (games of the MinAtar paper's DQN end far sooner)"""
    eval_epsilon: float = 0.05
    """ε of the evaluation policy (default 0.05, Mnih et al. 2015; CleanRL's current dqn_atari evaluates at its
    end_e, 0.01; purejaxql: 0)"""
    collapse_probe_states: int = 2000
    """Lake states drawn once a phase on which the BigAgent's greedy actions are compared with its agents' (the
    collapse metrics distill/*: a share's standard error is at most ~0.011 at 2000)"""

    # ---------------------------------------------------------------- Lake
    lake_path: Optional[str] = None
    """the Lake's folder (default runs/<run_name>/lake; on clusters point it at scratch)"""
    lake_capacity: int = 0
    """transitions the Lake keeps, oldest segments evicted first (0: all; 25M 84x84 steps take ~2-6 GB, frames
    compressed along time)"""
    lake_segment_mb: int = 1024
    """raw frames per Lake segment file, in MB (on disk ~1-4% of it: frames are compressed)"""
    lake_fsync_every: int = 0
    """fsync every n-th Lake commit for node-crash durability (0: never; commits survive process death)"""

    def __post_init__(self):
        apply_family_defaults(self)  # the flags left None take their env family's default (the user's win)


# ====================================================================== flag checks
# The flags left None take their env family's default, (Atari, MinAtar); each flag's help names the sources.
FAMILY_DEFAULTS = {
    "total_frames": (100_000_000, 5_000_000), "stack_size": (4, 1), "repeat_action_probability": (0.0, 0.1),
    "learning_rate": (2.5e-4, 5e-4), "agent_epsilon_end": (0.001, 0.05), "agent_updates_per_phase": (500, 50),
    "eval_max_frames": (108_000, 10_000),
}


def apply_family_defaults(args: Args) -> None:
    """Every flag the user left unset takes its family's default (gymnasium ids take Atari's); a given flag wins."""
    family = 1 if minatar_game(args.env_id) is not None else 0
    for name, defaults in FAMILY_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, defaults[family])


def usage_error(message: str) -> NoReturn:
    """A user's mistake: one line on stderr and exit code 2, as argparse (tyro) does for a malformed flag."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def check_args(args: Args) -> None:
    """Every flag, before anything is created (instead of a segfault in ale-py at --num-envs 0, or a run that does
    nothing at --total-frames -5): the first bad one stops the run with one line naming it, its value and the rule."""
    rules = [
        (("total_frames", "frame_skip", "stack_size", "max_episode_frames", "num_agents", "num_envs", "num_steps",
          "update_epochs", "num_minibatches", "agent_updates_per_phase", "pond_steps", "big_pond_size",
          "big_pond_slice_steps", "big_agent_updates_per_phase", "big_batch_size", "big_target_network_frequency",
          "eval_every_updates", "eval_episodes", "eval_max_frames", "lake_segment_mb"), lambda v: v >= 1, "must be >= 1"),
        (("seed", "keep_checkpoints", "stop_after_phases", "stop_after_updates", "noop_max", "env_threads",
          "agent_epsilon_reset_decay_frames", "big_agent_num_envs", "big_epsilon_decay_frames", "big_replay_ratio",
          "lake_capacity", "lake_fsync_every"), lambda v: v >= 0, "must be >= 0"),
        (("repeat_action_probability", "gamma", "q_lambda", "agent_epsilon_start", "agent_epsilon_end",
          "agent_epsilon_decay_fraction", "agent_epsilon_reset", "big_epsilon_reset", "big_epsilon_end", "eval_epsilon"),
         lambda v: 0 <= v <= 1, "must be in [0, 1]"),
        (("learning_rate", "max_grad_norm", "big_learning_rate"), lambda v: 0 < v < float("inf"), "must be > 0"),
    ]
    if minatar_game(args.env_id) is None:
        rules.append((("frame_height", "frame_width"), lambda v: v >= 36, "the Nature CNN needs 36 pixels at least"))
    for names, ok, rule in rules:
        for name in names:
            if not ok(getattr(args, name)):
                usage_error(f"--{name.replace('_', '-')} {getattr(args, name)}: {rule}")
    if args.num_envs * args.num_steps % args.num_minibatches:
        usage_error(f"--num-minibatches {args.num_minibatches}: must divide --num-envs x --num-steps = "
                    f"{args.num_envs * args.num_steps}")
    clone_every = args.clone_every_updates
    if args.big_agent_schedule == "live":
        if clone_every is not None and (clone_every < 0 or clone_every % args.agent_updates_per_phase):
            usage_error(f"--clone-every-updates {clone_every}: in live mode 0 (never) or a multiple of "
                        f"--agent-updates-per-phase ({args.agent_updates_per_phase}), as clones happen at phase ends")
        if args.big_agent_reinit_each_phase:
            usage_error("--big-agent-reinit-each-phase: live mode's BigAgent learns on across phases (that is the design)")
        if args.big_replay_ratio == 0:
            usage_error("--big-replay-ratio 0: live mode trains the BigAgent after every agent update on ratio x its "
                        "new transitions, so it needs a ratio > 0")
    elif clone_every is not None and clone_every != (args.agent_updates_per_phase if args.big_agent_schedule == "phases" else 0):
        usage_error(f"--clone-every-updates {clone_every}: --big-agent-schedule {args.big_agent_schedule} clones "
                    f"{'after every phase' if args.big_agent_schedule == 'phases' else 'never'}; only live mode takes it")
    if args.pond_steps % args.num_steps:
        usage_error(f"--pond-steps {args.pond_steps}: must be a multiple of --num-steps ({args.num_steps})")
    try:
        check_env_id(args.env_id)
    except ValueError as error:
        usage_error(str(error))
    if atari_game(args.env_id) is None and minatar_game(args.env_id) is None:  # a gymnasium id: one env made and
        # closed, to check what it gives
        try:
            env = gym.make(args.env_id)
        except (gym.error.Error, ImportError) as error:
            usage_error(f"--env-id {args.env_id!r}: {error}")
        frames, actions = env.observation_space, env.action_space
        env.close()
        want = (args.frame_height, args.frame_width) + ((3,) if args.rgb else ())
        if getattr(frames, "shape", None) != want or frames.dtype != np.uint8:
            usage_error(f"--env-id {args.env_id} gives frames {getattr(frames, 'shape', frames)} "
                        f"{getattr(frames, 'dtype', '')}, the flags ask for uint8 {want}: set "
                        "--frame-height/--frame-width/--rgb to match")
        if not isinstance(actions, gym.spaces.Discrete):
            usage_error(f"--env-id {args.env_id} has actions {actions}: Q-networks need a Discrete action space")


# ====================================================================== environments
def atari_game(env_id: str) -> Optional[str]:
    """envpool-style id -> ale-py ROM name ("MsPacman-v5" -> "ms_pacman"); None for other ids."""
    m = re.fullmatch(r"([A-Z][A-Za-z0-9]*)-v5", env_id)
    return None if m is None else re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()


MINATAR_GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway", "Seaquest": "seaquest",
                 "SpaceInvaders": "space_invaders"}


def minatar_game(env_id: str) -> Optional[tuple]:
    """MinAtar id -> (game, minimal action set?): "MinAtar/SpaceInvaders-v1" -> ("space_invaders", True), as the
    minatar package registers its ids (-v1 the game's minimal action set, -v0 all 6 actions); None for other ids."""
    m = re.fullmatch(r"MinAtar/([A-Za-z]+)-v([01])", env_id)
    return None if m is None or m[1] not in MINATAR_GAMES else (MINATAR_GAMES[m[1]], m[2] == "1")


def minatar_environment():
    """minatar.Environment. The package imports matplotlib's pyplot and seaborn (scipy, pandas) at import, for a GUI
    that no script here draws: ~3-5 s of every MinAtar run's start. Both are hidden from that one import (minatar then
    skips them, and its warning that it cannot render is muted); they import normally afterwards."""
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
    if minatar_game(env_id) is not None:
        try:
            minatar_environment()
        except ImportError:
            raise ValueError(f"--env-id {env_id!r} needs the minatar package (pip install -r requirements.txt)") from None
        return
    minatar_ids = [f"MinAtar/{name}-v{v}" for name in MINATAR_GAMES for v in (0, 1)]
    if env_id.lower().startswith("minatar"):
        import difflib

        close = difflib.get_close_matches(env_id, minatar_ids, n=3, cutoff=0.5)
        raise ValueError(f"--env-id {env_id!r} is no MinAtar game: the ids are MinAtar/<Game>-v1 (minimal action set) "
                         f"or -v0 (all 6 actions) for {', '.join(MINATAR_GAMES)}; close matches: {close or 'none'}")
    from ale_py.roms import get_all_rom_ids  # here: a MinAtar run needs no ale-py

    roms = get_all_rom_ids()
    game = atari_game(env_id)
    if game is not None and game in roms:
        return
    atari_ids = ["".join(p.capitalize() for p in rom.split("_")) + "-v5" for rom in roms]
    ale_gym_ids = {k for k, spec in gym.registry.items() if "ale_py" in str(spec.entry_point)}
    if env_id in ale_gym_ids:  # e.g. ALE/Breakout-v5: one env, full-size RGB frames, no vector env
        short = env_id.split("/")[-1].split("-")[0]
        raise ValueError(f"--env-id {env_id!r} is ale-py's single-env gymnasium id; use the envpool-style id "
                         f"{short}-v5 (ale-py's AtariVectorEnv with the PQN/CleanRL preprocessing)")
    if game is None and (":" in env_id or env_id in gym.registry):
        return  # gymnasium id; "module:EnvId" imports the module that registers it
    import difflib

    others = [k for k in gym.registry if k not in ale_gym_ids]
    close = difflib.get_close_matches(env_id, atari_ids + others, n=5, cutoff=0.5)
    raise ValueError(f"--env-id {env_id!r} is neither an Atari game of ale-py (envpool-style ids such as "
                     f"Breakout-v5) nor a registered gymnasium id; close matches: {close or 'none'}")


class GymnasiumVectorEnv:
    """Registered gymnasium envs with ale-py's vector interface: frames stacked like ale-py's (zeros, then
    the reset frame), next-step autoreset, send/recv, and info["lives"] (0 when the env has none)."""

    def __init__(self, env_id: str, num_envs: int, stack_size: int):
        def make():
            return gym.wrappers.FrameStackObservation(gym.make(env_id), stack_size, padding_type="zero")

        self.envs = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
        self.single_action_space = self.envs.single_action_space
        self.single_observation_space = self.envs.single_observation_space
        self.num_envs, self.actions = num_envs, None

    def _info(self, info: dict) -> dict:
        return {"lives": np.asarray(info.get("lives", np.zeros(self.num_envs, np.int64)))}

    def reset(self, seed: int):
        obs, info = self.envs.reset(seed=seed)
        return obs, self._info(info)

    def send(self, actions: np.ndarray) -> None:
        self.actions = actions

    def recv(self):
        obs, rewards, terminated, truncated, info = self.envs.step(self.actions)
        return obs, rewards, terminated, truncated, self._info(info)

    def step(self, actions: np.ndarray):
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        self.envs.close()


class FireAfterLifeLoss:
    """ale-py's AtariVectorEnv, except that the step after a life loss that did not end the game plays FIRE
    whatever action was sent (--fire-after-life-loss): Breakout and other FIRE games wait for it, and ale-py
    presses FIRE only at a game's reset. FIRE alone, the core of SB3's FireResetEnv (which CleanRL dqn_atari
    wraps around EpisodicLifeEnv: after a life loss NOOP, FIRE, then action 2, three steps the agent never
    sees), rather than envpool's episodic-life reset (1 to noop_max noop frames, then FIRE, not counted as
    a step): one ordinary step of frame_skip frames, so the frame accounting is unchanged (it counts
    against the budget as ALE counts it) and no extra randomness enters. The forced step is marked
    info["forced"]; the scripts treat it as the autoreset step: the obs it returns is an `episode_start`, so
    the step (whose recorded action, the policy's, was not played) is no learning transition in the PQN
    loss mask, the Lake or the replay memory, while the frame stack runs on; its reward counts in the
    game's return. With sticky actions (--repeat-action-probability) the FIRE can be lost, as the reset's."""

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

    def step(self, actions: np.ndarray):
        self.send(actions)
        return self.recv()


class MinAtarVectorEnv:
    """MinAtar games (the minatar package, Young & Tian 2019) with ale-py's vector interface, all stepped in one
    Python loop (a step costs 5-60 µs, less than handing it to a thread): observations (N, stack, 10, 10, C) uint8
    0/1 grids, stacked as ale-py stacks (zeros, then the reset frame), the package's sticky actions, next-step
    autoreset, a game truncated after `max_steps` steps, info["lives"] 0 (a game over is the only terminal).
    Env n is seeded with seed + n at reset, as gymnasium's vector envs; a reset also forgets the action a sticky
    step would repeat (the package keeps it across games), so a reset gives the same games in any process."""

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

    def step(self, actions: np.ndarray):
        self.send(actions)
        return self.recv()

    def close(self) -> None:
        pass


def make_envs(args: Args, num_envs: int):
    """`num_envs` envs giving uint8 observations (num_envs, stack, *frame_shape(args)), next-step autoreset,
    info["lives"]; life loss is `terminated` while the game goes on (ale-py's episodic_life=True would reset the
    whole game), then FIRE (FireAfterLifeLoss), rewards raw (clipped by the learners)."""
    game, minatar = atari_game(args.env_id), minatar_game(args.env_id)
    if minatar is not None:
        envs = MinAtarVectorEnv(minatar[0], num_envs, args.stack_size, minatar[1], args.repeat_action_probability,
                                args.max_episode_frames)
    elif game is not None:
        from ale_py import Action
        from ale_py.vector_env import AtariVectorEnv

        envs = AtariVectorEnv(
            game, num_envs, frameskip=args.frame_skip, maxpool=True, img_height=args.frame_height,
            img_width=args.frame_width, grayscale=not args.rgb, stack_num=args.stack_size, noop_max=args.noop_max,
            episodic_life=False, life_loss_info=True, reward_clipping=False, use_fire_reset=True,
            repeat_action_probability=args.repeat_action_probability,
            max_num_frames_per_episode=args.max_episode_frames, num_threads=args.env_threads)
        action_set = list(envs.ale.get_action_set())
        if args.fire_after_life_loss and Action.FIRE in action_set:
            envs = FireAfterLifeLoss(envs, action_set.index(Action.FIRE))
    else:
        envs = GymnasiumVectorEnv(args.env_id, num_envs, args.stack_size)
    want = (args.stack_size, *frame_shape(args))
    space = envs.single_observation_space
    if tuple(space.shape) != want or space.dtype != np.uint8:
        raise ValueError(f"--env-id {args.env_id} gives observations {tuple(space.shape)} {space.dtype}, the flags "
                         f"ask for uint8 {want}: set --frame-height/--frame-width/--rgb/--stack-size to match")
    return envs


def frame_shape(args: Args) -> tuple:
    """One frame: MinAtar's (10, 10, channels) grid (the channels are the game's), else (H, W), (H, W, 3) with --rgb."""
    minatar = minatar_game(args.env_id)
    if minatar is not None:
        return tuple(minatar_environment()(minatar[0]).state_shape())
    return (args.frame_height, args.frame_width) + ((3,) if args.rgb else ())


def minatar_rgb(grid: np.ndarray, scale: int = 32) -> np.ndarray:
    """A MinAtar grid (10, 10, C) in colour, in the package's own palette (its render: black for an empty cell,
    channel c in seaborn's "cubehelix" colour c of C, i.e. matplotlib's cubehelix at the C inner points of an even
    split of [0, 1]; a cell in several channels shows the last), each cell `scale` x `scale` pixels."""
    import matplotlib

    C = grid.shape[-1]
    palette = np.vstack([[0, 0, 0], matplotlib.colormaps["cubehelix"](np.linspace(0, 1, C + 2)[1:-1])[:, :3]])
    rgb = (palette[(grid * np.arange(1, C + 1)).max(-1)] * 255).round().astype(np.uint8)
    return rgb.repeat(scale, 0).repeat(scale, 1)


def frames_per_step(args: Args) -> int:
    return args.frame_skip if atari_game(args.env_id) is not None else 1


def derive_seed(args: Args, *keys: int) -> int:
    """A seed for one purpose (env resets, BigPond draws, evaluation) of one phase, from --seed."""
    return int(np.random.SeedSequence([args.seed, *keys]).generate_state(1)[0] & 0x3FFFFFFF)


ENV_RESET, BIG_POND_DRAW, EVALUATION, PROBE = 0, 1, 2, 3  # the purposes of derive_seed
BIG_AGENT = 1000  # the BigAgent's "agent index" in derived seeds


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
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)), nn.LayerNorm([32, h1, w1]), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.LayerNorm([64, h2, w2]), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.LayerNorm([64, h3, w3]), nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * h3 * w3, 512)), nn.LayerNorm(512), nn.ReLU(),
            layer_init(nn.Linear(512, n_actions)),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs: uint8 (B, stack, H, W), or (B, stack, H, W, 3) for RGB (stack and colour become channels)."""
        if obs.dim() == 5:
            obs = obs.permute(0, 1, 4, 2, 3).flatten(1, 2)
        return self.network(obs.float() / 255.0)


class MinAtarQNetwork(nn.Module):
    """PQN's MinAtar network (purejaxql pqn_minatar.py): conv 16 3x3 stride 1 (no padding) + LayerNorm + ReLU, dense
    128 + LayerNorm + ReLU, linear head. The first LayerNorm normalises each cell's 16 channels, as flax's LayerNorm
    (over the last axis) does there; initialised as QNetwork (CleanRL's orthogonal init). The 0/1 grids go in as
    they are: purejaxql divides them by 255, a constant scale that the LayerNorm after the conv undoes."""

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
        return MinAtarQNetwork(n_actions, args.stack_size * shape[2], shape[0], shape[1]).to(device)
    return QNetwork(n_actions, args.stack_size * (3 if args.rgb else 1), shape[0], shape[1]).to(device)


def chosen(q_values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    # A one-hot product rather than gather: gather's backward is a scatter-add, not deterministic on CUDA.
    return (q_values * F.one_hot(actions, q_values.shape[1])).sum(1)


def epsilon_greedy(q_values: torch.Tensor, epsilon: float, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    # Draws the random numbers even when ε = 0, so the RNG stream does not depend on ε.
    greedy = q_values.argmax(1)
    random_actions = torch.randint(q_values.shape[1], greedy.shape, device=q_values.device, generator=generator)
    return torch.where(torch.rand(greedy.shape, device=q_values.device, generator=generator) < epsilon,
                       random_actions, greedy)


def epsilon(schedule: dict, frames: int) -> float:
    """Linear from schedule["start"] to schedule["end"] over schedule["decay_frames"] frames, counted
    from the actor's frame count at the schedule's last reset."""
    progress = (frames - schedule["frames_at_reset"]) / max(1, schedule["decay_frames"])
    return schedule["start"] + min(1.0, progress) * (schedule["end"] - schedule["start"])


# ====================================================================== Pond, agents, BigPond
@dataclass
class Pond:
    """One actor's last `pond_steps` steps x num_envs, on the device where the actor's obs already are
    (the scalars stay on the host, where the env returns them). Also the PQN rollout storage: an update
    trains on the Pond's newest num_steps rows. A full Pond drains into the Lake in one append."""

    obs: torch.Tensor  # (P, N, stack, *frame) uint8: the observation each action was taken on
    actions: torch.Tensor  # (P, N) int64
    rewards: np.ndarray  # (P, N) float32, raw (the Lake never clips; learners do)
    terminated: np.ndarray  # (P, N) bool: life loss or game over (the learning terminal)
    truncated: np.ndarray  # (P, N) bool
    episode_start: np.ndarray  # (P, N) bool: obs is a reset observation
    pos: int = 0


def make_pond(args: Args, num_envs: int, device: torch.device) -> Pond:
    P, N = args.pond_steps, num_envs
    return Pond(obs=torch.zeros((P, N, args.stack_size, *frame_shape(args)), dtype=torch.uint8, device=device),
                actions=torch.zeros((P, N), dtype=torch.int64, device=device),
                rewards=np.zeros((P, N), np.float32), terminated=np.zeros((P, N), bool),
                truncated=np.zeros((P, N), bool), episode_start=np.zeros((P, N), bool))


def drain_pond(pond: Pond, lake: Lake, group: str) -> int:
    """Pour the Pond's steps into the Lake and empty it; returns the number of transitions poured. The
    Lake copies on the device and writes on its own thread: no wait here unless its queue is full."""
    P = pond.pos
    if P == 0:
        return 0
    lake.append(group, pond.obs[:P], pond.actions[:P], pond.rewards[:P], pond.terminated[:P], pond.truncated[:P],
                pond.episode_start[:P])
    lake.commit()
    pond.pos = 0
    return P * pond.actions.shape[1]


@dataclass
class Agent:
    """An actor-learner: one of the PQN agents, or the BigAgent (target_network set; acts only with
    --big-agent-num-envs). Its envs, Pond and acting state live here; functions below do the work."""

    name: str  # also its Lake group
    q_network: nn.Module  # QNetwork or MinAtarQNetwork
    optimizer: torch.optim.Optimizer
    epsilon_schedule: dict
    target_network: Optional[nn.Module] = None
    envs: object = None
    pond: Optional[Pond] = None
    frames: int = 0  # env frames this actor generated (its ε schedule runs on them)
    updates: int = 0
    # acting state, reset at every phase start
    obs: Optional[torch.Tensor] = None  # (N, stack, *frame) on the device
    obs_host: Optional[np.ndarray] = None
    episode_start: Optional[np.ndarray] = None
    game_over: Optional[np.ndarray] = None
    episode_return: Optional[np.ndarray] = None
    episode_length: Optional[np.ndarray] = None
    finished: list = field(default_factory=list)  # (return, length) of full games since the last log
    # PQN rollout extras (rows of the current rollout)
    values: Optional[torch.Tensor] = None  # (T, N) max_a Q(obs_t, a) at acting time
    rollout_game_over: Optional[np.ndarray] = None  # (T, N) step t ended a game (the next step is an autoreset)
    rollout_autoreset: Optional[np.ndarray] = None  # (T, N) step t is an autoreset step (obs_t a final obs) or forced FIRE
    debug: Optional[dict] = None  # --debug-dump-transitions: lists of per-step arrays


def reset_envs(agent: Agent, seed: int, device: torch.device, debug: bool) -> None:
    obs, info = agent.envs.reset(seed=seed)
    N = obs.shape[0]
    agent.obs_host, agent.obs = obs, torch.from_numpy(obs).to(device)
    agent.episode_start, agent.game_over = np.ones(N, bool), np.zeros(N, bool)
    agent.episode_return, agent.episode_length = np.zeros(N, np.float64), np.zeros(N, np.int64)
    if debug:
        agent.debug = {k: [] for k in ("obs", "actions", "rewards", "terminated", "truncated", "episode_start",
                                       "lives", "frame_number", "episode_frame_number")}
        agent.debug["reset_frame_number"] = info.get("frame_number", np.zeros(N, np.int64)).copy()


def act(agent: Agent, t: Optional[int] = None, q_values: Optional[torch.Tensor] = None,
        generator: Optional[torch.Generator] = None) -> None:
    """Choose actions on the current obs (ε-greedy; `q_values` if already computed for them; random draws from
    `generator`, else torch's), write obs and actions into the Pond and send the actions to the envs; they step on
    their own threads until `receive`. The .cpu() of the actions is the only host sync of a step."""
    pond, p = agent.pond, agent.pond.pos
    pond.obs[p] = agent.obs
    pond.episode_start[p] = agent.episode_start
    if q_values is None:
        with torch.no_grad():
            q_values = agent.q_network(agent.obs)
    actions = epsilon_greedy(q_values, epsilon(agent.epsilon_schedule, agent.frames), generator)
    pond.actions[p] = actions
    if t is not None:
        agent.values[t] = q_values.max(1).values
    actions = actions.cpu().numpy()
    if agent.debug is not None:
        agent.debug["obs"].append(agent.obs_host)
        agent.debug["actions"].append(actions)
    agent.envs.send(actions)


def receive(agent: Agent, frames_per_step: int, device: torch.device, t: Optional[int] = None) -> None:
    """Collect the step sent by `act`: rewards and flags into the Pond, full-game statistics, next obs."""
    obs, rewards, terminated, truncated, info = agent.envs.recv()
    pond, p = agent.pond, agent.pond.pos
    pond.rewards[p], pond.terminated[p], pond.truncated[p] = rewards, terminated, truncated
    # Full games, unclipped: an autoreset step (the one after a game over) is not part of any game.
    playing = ~agent.game_over
    agent.episode_return += rewards * playing
    agent.episode_length += playing
    game_over = truncated | (terminated & (info["lives"] == 0))
    for n in np.flatnonzero(game_over):
        agent.finished.append((float(agent.episode_return[n]), int(agent.episode_length[n])))
    agent.episode_return[game_over], agent.episode_length[game_over] = 0, 0
    # A FIRE forced after a life loss (FireAfterLifeLoss) is, like an autoreset step, no transition.
    no_transition = agent.game_over | info.get("forced", False)
    if t is not None:
        agent.rollout_autoreset[t], agent.rollout_game_over[t] = no_transition, game_over
    if agent.debug is not None:
        for k, v in (("rewards", rewards), ("terminated", terminated), ("truncated", truncated),
                     ("episode_start", pond.episode_start[p].copy()), ("lives", info["lives"]),
                     ("frame_number", info.get("frame_number", np.zeros_like(info["lives"]))),
                     ("episode_frame_number", info.get("episode_frame_number", np.zeros_like(info["lives"])))):
            agent.debug[k].append(np.array(v, copy=True))
    # Next-step autoreset: the step that ends a game returns its final obs, the next one a reset obs.
    agent.episode_start, agent.game_over = no_transition, game_over
    agent.obs_host, agent.obs = obs, torch.from_numpy(obs).to(device)
    pond.pos += 1
    agent.frames += len(rewards) * frames_per_step


def stacked_forward(q_networks: list):
    """All agents' Q-networks (one architecture, own weights) as one vmapped function (torch.func):
    obs (K, N, ...) -> q-values (K, N, A). The weights are stacked (copied) here, so build it again after
    they change; the results equal the networks' own up to float rounding (other kernels)."""
    params, buffers = torch.func.stack_module_state(q_networks)
    skeleton = copy.deepcopy(q_networks[0]).to("meta")  # the architecture without weights
    forward = torch.vmap(lambda p, b, obs: torch.func.functional_call(skeleton, (p, b), (obs,)))
    return lambda obs: forward(params, buffers, obs)


def rollout(agents: list, num_steps: int, frames_per_step: int, device: torch.device,
            batched_inference: bool = False) -> None:
    """num_steps steps of every agent's envs. Agent k's envs step (ale-py threads, GIL released) while
    agent k+1 receives its step and infers its next actions. With batched_inference all agents' actions
    come from one vmapped forward pass per step: fewer, bigger kernels (the GPU's gain), but no env steps
    while it runs (see benchmarks/loop_bench.py)."""
    if batched_inference:
        with torch.no_grad():
            forward = stacked_forward([agent.q_network for agent in agents])
    for t in range(num_steps):
        for agent in agents:
            if t > 0:
                receive(agent, frames_per_step, device, t - 1)
            if not batched_inference:
                act(agent, t)
        if batched_inference:
            with torch.no_grad():
                q_values = forward(torch.stack([agent.obs for agent in agents]))
            for agent, q in zip(agents, q_values):
                act(agent, t, q)
    for agent in agents:
        receive(agent, frames_per_step, device, num_steps - 1)


def q_lambda_returns(rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor,
                     lambdas: torch.Tensor, gamma: float) -> torch.Tensor:
    """returns[t] = r_t + γ (1 - terminated_t) [(1 - λ_t) V(s_{t+1}) + λ_t returns[t+1]], V = max_a Q.
    λ_t = 0 where the chain is cut (the step ends a game, or ends the rollout), so a return never runs
    past an episode end (the bug CleanRL fixed in its PR 494). All (T, N) float tensors."""
    returns = torch.empty_like(rewards)
    next_return = next_values[-1]
    for t in reversed(range(rewards.shape[0])):
        next_return = rewards[t] + gamma * (1 - terminated[t]) * (
            (1 - lambdas[t]) * next_values[t] + lambdas[t] * next_return)
        returns[t] = next_return
    return returns


def pqn_update(agent: Agent, args: Args, device: torch.device) -> dict:
    """Q(λ) targets for the rollout in the Pond's newest num_steps rows, then update_epochs x
    num_minibatches gradient steps (purejaxql pqn_atari.py / CleanRL pqn_atari_envpool.py)."""
    T, N = args.num_steps, args.num_envs
    rows = slice(agent.pond.pos - T, agent.pond.pos)
    host = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device, torch.float32)  # noqa: E731
    with torch.no_grad():
        next_value = agent.q_network(agent.obs).max(1).values  # V of the obs after the rollout
        next_values = torch.cat([agent.values[1:], next_value[None]])
        lambdas = args.q_lambda * (1 - host(agent.rollout_game_over))
        lambdas[-1] = 0
        returns = q_lambda_returns(host(np.sign(agent.pond.rewards[rows])), host(agent.pond.terminated[rows]),
                                   next_values, lambdas, args.gamma)
    # The autoreset step (obs_t is a game's final obs, its action ignored) and a forced FIRE are no transition: no loss.
    mask = 1 - host(agent.rollout_autoreset).flatten()
    obs, actions, returns = agent.pond.obs[rows].flatten(0, 1), agent.pond.actions[rows].flatten(), returns.flatten()
    minibatch = T * N // args.num_minibatches
    td_loss, q_mean = torch.zeros((), device=device), torch.zeros((), device=device)
    steps = args.update_epochs * args.num_minibatches
    rollout_frames = T * N * frames_per_step(args)
    for epoch in range(args.update_epochs):
        order = torch.randperm(T * N, device=device)
        for i, start in enumerate(range(0, T * N, minibatch)):
            if args.anneal_lr:
                step = epoch * args.num_minibatches + i
                for group in agent.optimizer.param_groups:
                    group["lr"] = annealed_lr(args, agent.frames - rollout_frames * (1 - step / steps))
            mb = order[start : start + minibatch]
            q_taken = chosen(agent.q_network(obs[mb]), actions[mb])
            loss = 0.5 * ((q_taken - returns[mb]) ** 2 * mask[mb]).sum() / mask[mb].sum().clamp(min=1)
            agent.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.q_network.parameters(), args.max_grad_norm)
            agent.optimizer.step()
            td_loss += loss.detach()
            q_mean += q_taken.detach().mean()
    agent.updates += 1
    return {"losses/td_loss": (td_loss / steps).item(), "losses/q_values": (q_mean / steps).item()}


def annealed_lr(args: Args, frames: float) -> float:
    """The agents' learning rate after `frames` of an agent's own frames: linear from --learning-rate to 0 at its
    share of the run, --total-frames / --num-agents."""
    return args.learning_rate * max(0.0, 1.0 - frames / (args.total_frames / args.num_agents))


@dataclass
class BigPond:
    """The BigAgent's replay on the device, frames stored once: transition i is obs = frames[obs_start[i] :
    obs_start[i] + stack], its target returns[i] + discounts[i] x V(frames[bootstrap_start[i] : ... + stack])."""

    frames: torch.Tensor  # (F, *frame) uint8
    obs_start: torch.Tensor  # (M,) int64
    actions: torch.Tensor  # (M,) int64
    returns: torch.Tensor  # (M,) float32: the n-step sum of sign-clipped rewards (n = 1: the reward)
    discounts: torch.Tensor  # (M,) float32: γ^m, 0 after a termination (m <= n: the steps the sum spans)
    bootstrap_start: torch.Tensor  # (M,) int64: the first frame of the observation m steps on
    teacher: torch.Tensor  # (M,) int64: the agent whose stream the transition came from (-1: the BigAgent's own)
    teacher_q: Optional[torch.Tensor] = None  # (M, actions) float32: that agent's Q-values (with --big-distill-coef)


def n_step_targets(obs_start: np.ndarray, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                   n: int, gamma: float) -> tuple:
    """(returns, discounts, bootstrap_start) of every transition of concatenated stream slices: transition i sums
    the sign-clipped rewards of i .. j = i + m - 1, m <= n, and bootstraps from j's next obs (frame obs_start[j] + 1)
    times γ^m, or not at all if j terminated. The chain goes on from j to j + 1 only if j neither terminated nor was
    truncated and j + 1 is the next step of the same slice (its obs starts one frame later: slices, and games after
    an autoreset step, never do). n = 1 gives the one-step target, exactly (r, γ (1 - terminated), obs_start + 1)."""
    M = len(obs_start)
    follows = np.zeros(M, bool)
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
    """Draw --big-pond-size transitions uniformly from the Lake as contiguous stream slices (one preadv
    each), then copy them once into one preallocated device tensor (peak host memory: one BigPond)."""
    size, steps = args.big_pond_size, args.big_pond_slice_steps
    chunks, total = [], 0
    while total < size:
        # ~4k transitions a call: one call's frames (~30 MB) then reuse freed memory; a 64k-transition call
        # (~460 MB) faults in fresh pages every time and filled at half the rate (benchmarks/lake_bench.py)
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
    returns, discounts, bootstrap_start = n_step_targets(  # before the cut to `size`: chains may run past it
        obs_start, *(np.concatenate([getattr(c, k) for c in chunks]) for k in ("rewards", "terminated", "truncated")),
        args.big_n_step, args.gamma)
    groups, group_of = np.unique(np.concatenate([c.group for c in chunks]), return_inverse=True)  # "agentK", "big_agent"
    teacher = np.array([int(g[len("agent"):]) if g.startswith("agent") else -1 for g in groups], np.int64)[group_of]
    take = {"obs_start": obs_start, "actions": np.concatenate([c.actions for c in chunks]), "returns": returns,
            "discounts": discounts, "bootstrap_start": bootstrap_start, "teacher": teacher}
    return BigPond(frames=frames, **{k: torch.from_numpy(v[:size]).to(device) for k, v in take.items()})


def add_teacher_q(big_pond: BigPond, teachers: list, stack_size: int, n_actions: int) -> None:
    """Each transition's teacher Q-values, from the network of the agent whose stream it came from as it stands now (at
    the phase's end, before the clone): once per phase, 4,096 transitions a forward pass; the BigAgent's own get 0."""
    offsets = torch.arange(stack_size, device=big_pond.frames.device)
    big_pond.teacher_q = torch.zeros((len(big_pond.obs_start), n_actions), device=big_pond.frames.device)
    with torch.no_grad():
        for k, network in enumerate(teachers):
            (rows,) = torch.nonzero(big_pond.teacher == k, as_tuple=True)
            for part in rows.split(4096):
                big_pond.teacher_q[part] = network(big_pond.frames[big_pond.obs_start[part, None] + offsets])


def big_agent_update(big_agent: Agent, big_pond: BigPond, args: Args) -> tuple:
    """One (Double) DQN gradient step on --big-batch-size transitions drawn uniformly from the BigPond: n-step targets
    (--big-n-step), plus --big-distill-coef x the KL from each transition's teacher to the BigAgent. Returns the TD
    loss, the mean Q of the actions taken, and the distillation loss (0 without it)."""
    device = big_pond.frames.device
    idx = torch.randint(len(big_pond.obs_start), (args.big_batch_size,), device=device)
    offsets = torch.arange(args.stack_size, device=device)
    obs, next_obs = (big_pond.frames[start[idx, None] + offsets] for start in (big_pond.obs_start, big_pond.bootstrap_start))
    teacher_q = big_pond.teacher_q[idx] if args.big_distill_coef > 0 else None
    return big_agent_step(big_agent, obs, big_pond.actions[idx], big_pond.returns[idx], big_pond.discounts[idx],
                          next_obs, big_pond.teacher[idx], teacher_q, args)


def big_agent_step(big_agent: Agent, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
                   discounts: torch.Tensor, next_obs: torch.Tensor, teacher: torch.Tensor,
                   teacher_q: Optional[torch.Tensor], args: Args) -> tuple:
    """The gradient step of a batch: TD loss on returns + discounts x the (Double DQN) target's value of next_obs,
    plus the distillation term on the transitions that have a teacher (teacher >= 0)."""
    with torch.no_grad():
        target_q = big_agent.target_network(next_obs)
        if args.big_double_dqn:
            next_v = chosen(target_q, big_agent.q_network(next_obs).argmax(1))
        else:
            next_v = target_q.max(1).values
        td_target = returns + discounts * next_v
    q = big_agent.q_network(obs)
    q_taken = chosen(q, actions)
    loss = td_loss = (F.mse_loss if args.big_loss == "mse" else F.smooth_l1_loss)(q_taken, td_target)
    distill = torch.zeros((), device=obs.device)
    if args.big_distill_coef > 0:  # KL(teacher || BigAgent) over the transitions that have a teacher
        teacher_probs = F.softmax(teacher_q / args.big_distill_temperature, dim=1)
        kl = (teacher_probs * (torch.log(teacher_probs.clamp(min=1e-12)) - F.log_softmax(q, dim=1))).sum(1)
        taught = (teacher >= 0).float()
        distill = (kl * taught).sum() / taught.sum().clamp(min=1)
        loss = td_loss + args.big_distill_coef * distill
    big_agent.optimizer.zero_grad()
    loss.backward()
    big_agent.optimizer.step()
    big_agent.updates += 1
    return td_loss.detach(), q_taken.detach().mean(), distill.detach()


@dataclass
class FreshView:
    """Live mode: the agents' transitions of this phase that are still in their Ponds, read in place (no frame is
    copied: the Pond is the BigPond's fresh part). Transition i is agent k's Pond row at time j of env n, under a
    virtual index v = offset_k + n (L_k + 1) + j (L_k: the Pond rows written this phase, at most --pond-steps, in
    time order; j = L_k is the agent's current obs, the next obs of its newest row), so that n_step_targets chains
    consecutive steps as it does the Lake's slices."""

    agents: list  # the agents whose Ponds are read
    offsets: list  # offset_k of each agent's virtual indices
    rows: list  # (L_k + 1,) int64 device tensors: the Pond row of each time j (the last, j = L_k, unused)
    obs_index: torch.Tensor  # (M,) int64: v of each transition's obs
    actions: torch.Tensor  # (M,) int64
    returns: torch.Tensor  # (M,) float32
    discounts: torch.Tensor  # (M,) float32
    bootstrap_index: torch.Tensor  # (M,) int64: v of the obs it bootstraps from
    teacher: torch.Tensor  # (M,) int64: the agent (its index)


def fresh_view(agents: list, rows_written: int, args: Args) -> FreshView:
    """Every transition that the agents made this phase and their Ponds still hold: rows_written rows of each Pond at
    most (the Pond is a ring: after a drain its rows stay until overwritten), the newest ending at pos - 1. A row is a
    transition unless the obs after it is a reset obs (an autoreset step, or a FIRE forced after a life loss)."""
    device = agents[0].pond.actions.device
    offsets, rows_list, parts, offset = [], [], [], 0
    for k, agent in enumerate(agents):
        pond = agent.pond
        P, N = pond.actions.shape
        L = min(rows_written, P)
        rows = (pond.pos - L + np.arange(L)) % P  # time order
        next_start = np.concatenate([pond.episode_start[rows[1:]], agent.episode_start[None]])  # (L, N)
        n, j = np.nonzero(~next_start.T)  # env-major: each env's steps in time order, as a stream slice
        v = offset + n * (L + 1) + j
        returns, discounts, bootstrap = n_step_targets(v, pond.rewards[rows[j], n], pond.terminated[rows[j], n],
                                                       pond.truncated[rows[j], n], args.big_n_step, args.gamma)
        rows_t = torch.from_numpy(np.append(rows, 0)).to(device)
        actions = pond.actions[rows_t[torch.from_numpy(j).to(device)], torch.from_numpy(n).to(device)]
        parts.append((v, actions, returns, discounts, bootstrap, np.full(len(v), k)))
        offsets.append(offset)
        rows_list.append(rows_t)
        offset += N * (L + 1)
    host = lambda i, dtype: torch.from_numpy(np.concatenate([p[i] for p in parts]).astype(dtype)).to(device)  # noqa: E731
    return FreshView(agents=agents, offsets=offsets, rows=rows_list, obs_index=host(0, np.int64),
                     actions=torch.cat([p[1] for p in parts]), returns=host(2, np.float32), discounts=host(3, np.float32),
                     bootstrap_index=host(4, np.int64), teacher=host(5, np.int64))


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


def live_big_agent_update(big_agent: Agent, big_pond: Optional[BigPond], view: FreshView, teachers: list, args: Args,
                          generator: torch.Generator) -> tuple:
    """live: one gradient step on --big-batch-size transitions drawn uniformly from the BigPond (the Lake's draw) and
    the fresh view together, with the BigAgent's own generator (the agents' random stream stays theirs); teacher
    Q-values come from the agents as they are now."""
    device = view.actions.device
    lake_size = 0 if big_pond is None else len(big_pond.obs_start)
    idx = torch.randint(lake_size + len(view.actions), (args.big_batch_size,), device=device, generator=generator)
    parts = []
    if lake_size:
        old = idx[idx < lake_size]
        offsets = torch.arange(args.stack_size, device=device)
        parts.append([big_pond.frames[big_pond.obs_start[old, None] + offsets], big_pond.actions[old],
                      big_pond.returns[old], big_pond.discounts[old],
                      big_pond.frames[big_pond.bootstrap_start[old, None] + offsets], big_pond.teacher[old]])
    new = idx[idx >= lake_size] - lake_size
    parts.append([fresh_obs(view, view.obs_index[new]), view.actions[new], view.returns[new], view.discounts[new],
                  fresh_obs(view, view.bootstrap_index[new]), view.teacher[new]])
    obs, actions, returns, discounts, next_obs, teacher = (torch.cat(p) for p in zip(*parts))
    teacher_q = None
    if args.big_distill_coef > 0:
        with torch.no_grad():
            teacher_q = torch.zeros_like(big_agent.q_network(obs[:1])).expand(len(obs), -1).clone()
            for k, network in enumerate(teachers):
                (rows,) = torch.nonzero(teacher == k, as_tuple=True)
                teacher_q[rows] = network(obs[rows])
    return big_agent_step(big_agent, obs, actions, returns, discounts, next_obs, teacher, teacher_q, args)


def collapse_metrics(big_network: nn.Module, agent_networks: list, probe: torch.Tensor, n_actions: int) -> dict:
    """On the probe states: how often the BigAgent's greedy action is each agent's (distill/agreement: their mean;
    agentK/distill/agreement), the share of its most frequent greedy action (distill/top_action_share) and the entropy
    of its greedy actions in nats (distill/greedy_entropy; log(actions) if uniform, 0 if one action)."""
    with torch.no_grad():
        big = torch.cat([big_network(part).argmax(1) for part in probe.split(4096)])
        agreement = [float(torch.cat([net(part).argmax(1) for part in probe.split(4096)]).eq(big).float().mean())
                     for net in agent_networks]
    share = np.bincount(big.cpu().numpy(), minlength=n_actions) / len(big)
    return {"distill/agreement": float(np.mean(agreement)),
            **{f"agent{k}/distill/agreement": a for k, a in enumerate(agreement)},
            "distill/top_action_share": float(share.max()),
            "distill/greedy_entropy": float(-(share[share > 0] * np.log(share[share > 0])).sum())}


# ====================================================================== evaluation and video
def make_camera(args: Args):
    """The env that films an Atari evaluation game in colour at the game's native size (210x160 RGB). ale-py's vector
    env gives only its preprocessed frames, never the screen (its ALEVectorInterface has no getScreenRGB), so this is
    one more env of the same flags but 210x160 RGB frames and no stack: reset with the seed of the filmed env and sent
    its actions, it plays the very game being scored (ALE is deterministic given the seed, its noops and sticky
    actions included; FireAfterLifeLoss wraps it alike). Its frames are max-pooled over the frame skip's last two
    frames, as the agent's are (no flicker)."""
    return make_envs(replace(args, frame_height=210, frame_width=160, rgb=True, stack_size=1), 1)


def evaluate(q_networks: list, args: Args, envs, seed: int, device: torch.device, film: bool = False):
    """One full game (life loss is not the end, --eval-max-frames at most) per env, --eval-episodes envs per
    network, all stepped together; ε = --eval-epsilon, drawn from a generator of its own (seeded by `seed`), so
    evaluating never changes the training's random stream. Returns (returns (K, E), lengths (K, E), frames of
    the first game of network 0 if film: colour from make_camera for Atari, MinAtar's grids in its colours (scaled
    up), the observations for gymnasium ids)."""
    K, E = len(q_networks), args.eval_episodes
    max_steps = -(-args.eval_max_frames // frames_per_step(args))
    generator = torch.Generator(device).manual_seed(seed)
    obs, _ = envs.reset(seed=seed)
    camera = make_camera(args) if film and atari_game(args.env_id) is not None else None
    minatar = minatar_game(args.env_id) is not None
    if camera is not None:
        screen, _ = camera.reset(seed=seed)  # env 0's seed: a vector env's env i is reset with seed + i
    returns, lengths = np.zeros(K * E), np.zeros(K * E, np.int64)
    done, video = np.zeros(K * E, bool), []
    while not done.all():
        if film and not done[0]:
            video.append(screen[0, -1] if camera is not None else minatar_rgb(obs[0, -1]) if minatar else obs[0, -1])
        obs_device = torch.from_numpy(obs).to(device)
        with torch.no_grad():
            actions = torch.cat([epsilon_greedy(net(obs_device[k * E : (k + 1) * E]), args.eval_epsilon, generator)
                                 for k, net in enumerate(q_networks)]).cpu().numpy()
        obs, rewards, terminated, truncated, info = envs.step(actions)
        if camera is not None and not done[0]:
            screen = camera.step(actions[:1])[0]
        returns += rewards * ~done
        lengths += ~done
        done |= truncated | (terminated & (info["lives"] == 0)) | (lengths >= max_steps)
    if camera is not None:
        camera.close()
    return returns.reshape(K, E), lengths.reshape(K, E), video


def write_video(path: Path, frames: list, fps: int = 15) -> None:
    """An H.264 MP4 (yuv420p, which browsers and wandb play) of uint8 frames (H, W) or (H, W, 3), one per env step
    (15 fps: real time for Atari's 60 Hz at frame skip 4), written with PyAV, whose wheel ships FFmpeg (gymnasium's
    RecordVideo needs moviepy). Grayscale frames become RGB; odd sizes are padded to even (yuv420p halves them)."""
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


# ====================================================================== checkpoints
SESSION_FLAGS = ("resume", "stop_after_phases", "stop_after_updates", "eval_only", "checkpoint")  # taken from the command line on --resume
RESUME_CAN_CHANGE = ("total_frames", "keep_checkpoints", "capture_video", "lake_fsync_every", "track", "wandb_project_name",
                     "wandb_entity", "wandb_group")  # also taken on --resume (they change no state a checkpoint holds)


def resumed_args(args: Args, checkpoint: dict) -> Args:
    """--resume: the checkpoint's flags, with the session flags and the RESUME_CAN_CHANGE flags of this command line
    (each change printed); any other flag on the command line is refused rather than silently dropped."""
    fields = set(vars(args))
    given = []  # the flags on the command line (--flag, --flag=value, --no-flag), as field names
    for token in sys.argv[1:]:
        name = token[2:].split("=", 1)[0].replace("-", "_") if token.startswith("--") else ""
        name = name[3:] if name.startswith("no_") and name[3:] in fields else name
        if name in fields and name not in SESSION_FLAGS and name not in given:
            given.append(name)
    refused = [f"--{n.replace('_', '-')}" for n in given if n not in RESUME_CAN_CHANGE]
    if refused:
        usage_error(f"--resume continues a run with its own flags; {', '.join(refused)} cannot change mid-run (allowed: "
                    + ", ".join(f"--{n.replace('_', '-')}" for n in RESUME_CAN_CHANGE) + ")")
    saved = checkpoint["args"]
    changes = {n: getattr(args, n) for n in given if getattr(args, n) != saved[n]}
    if changes.get("total_frames", float("inf")) < checkpoint["global_frames"]:
        usage_error(f"--total-frames {changes['total_frames']}: the run is at {checkpoint['global_frames']} frames already")
    for name, value in changes.items():
        print(f"--resume applies --{name.replace('_', '-')} {value} (was {saved[name]})")
    return Args(**{**saved, **{k: getattr(args, k) for k in SESSION_FLAGS}, **changes})
# a finished phase, or a stop after an update; nothing else (best.pt, a user's copy) is resumed from or pruned
CHECKPOINT_NAME = re.compile(r"phase_(\d+)(?:_update_(\d+))?\.pt")


def checkpoint_order(path: Path) -> Optional[tuple]:
    """(phase, update) of a checkpoint's name, a finished phase as (phase, inf): after its mid-phase checkpoints,
    though "phase_0003.pt" sorts before "phase_0003_update_000050.pt" by name. None: not a checkpoint."""
    match = CHECKPOINT_NAME.fullmatch(path.name)
    return match and (int(match[1]), float("inf") if match[2] is None else int(match[2]))


def checkpoints_in_order(folder: Path) -> list[Path]:
    return sorted((p for p in folder.glob("phase_*.pt") if checkpoint_order(p)), key=checkpoint_order)


def atomic_save(path: Path, state: dict) -> None:
    """torch.save to a tmp file, then os.replace: a kill never leaves a half-written file at `path`. Serialised in
    memory first and written by Python, so a full disk is an OSError naming the file and its errno (torch's own
    writer raises a RuntimeError without them), and the partial tmp file goes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    try:
        with open(tmp, "wb") as f:
            f.write(buffer.getbuffer())
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(tmp)) from None
    os.replace(tmp, path)


def save_checkpoint(path: Path, state: dict, keep: int) -> None:
    """Atomic (atomic_save), then the checkpoints it supersedes go (and the oldest beyond --keep-checkpoints)."""
    atomic_save(path, state)
    phase, update = checkpoint_order(path)
    finished = []
    for old in checkpoints_in_order(path.parent):
        old_phase, old_update = checkpoint_order(old)
        if old_update == float("inf"):
            finished.append(old)
        elif update == float("inf") and old_phase <= phase:  # a finished phase supersedes the mid-phase
            old.unlink()  # checkpoints it passed (a kill may have left some of earlier phases)
    if keep > 0:  # mid-phase checkpoints are newer than every finished phase: they stay until their phase ends
        for old in finished[:-keep]:
            old.unlink()


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    found = checkpoints_in_order(run_dir / "checkpoints")
    return found[-1] if found else None


def agent_state(agent: Agent) -> dict:
    state = {"q_network": agent.q_network.state_dict(), "optimizer": agent.optimizer.state_dict(),
             "epsilon_schedule": dict(agent.epsilon_schedule), "frames": agent.frames, "updates": agent.updates}
    if agent.target_network is not None:
        state["target_network"] = agent.target_network.state_dict()
    return state


def load_agent_state(agent: Agent, state: dict) -> None:
    agent.q_network.load_state_dict(state["q_network"])
    agent.optimizer.load_state_dict(state["optimizer"])
    agent.epsilon_schedule, agent.frames, agent.updates = dict(state["epsilon_schedule"]), state["frames"], state["updates"]
    if agent.target_network is not None:
        agent.target_network.load_state_dict(state["target_network"])


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# A stop request during the agents' updates checkpoints after the current update; resuming there bit-exactly
# would need the envs' emulator states (ale-py's vector env cannot save them; only replaying all the phase's
# actions from the phase-start reset would rebuild them), so that resume resets the envs and cuts the games
# in progress. During the BigAgent's part, the stop waits for the phase end, which resumes bit-exactly.
stop_requested = False


def request_stop(signum, frame) -> None:
    """SIGTERM, SIGUSR1 (slurm) and Ctrl-C (SIGINT): checkpoint after the current update and exit 0. A second
    Ctrl-C exits at once, without a checkpoint: what the Lake committed stays (it survives even SIGKILL)."""
    global stop_requested
    # os.write, not print: a handler that prints while the main thread is inside a print to the same stream
    # (a write the signal interrupted) fails with "RuntimeError: reentrant call inside <_io.BufferedWriter>".
    if stop_requested and signum == signal.SIGINT:
        os.write(sys.stdout.fileno(), b"got SIGINT again: exiting now, without a checkpoint\n")
        remove_unstarted_run()
        os._exit(130)
    stop_requested = True
    message = f"got {signal.Signals(signum).name}: checkpointing and exiting after the current update"
    os.write(sys.stdout.fileno(), (message + (" (Ctrl-C again: exit now)\n" if signum == signal.SIGINT else "\n")).encode())


new_run_dir: Optional[Path] = None  # the folder of a run this process started, until the run has logged


def remove_unstarted_run() -> None:
    """At exit: a new run that ends before its first update was logged (a locked Lake, a crash or Ctrl-C during
    start-up) leaves no folder behind, so compare.py never counts it (with a default --lake-path, its Lake goes too)."""
    metrics_path = new_run_dir / "metrics.jsonl" if new_run_dir is not None else None
    if metrics_path is not None and not (metrics_path.exists() and metrics_path.stat().st_size > 0):
        shutil.rmtree(new_run_dir, ignore_errors=True)


DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a full disk, the process's file-size limit, a quota


def one_line_errors(kind, error, traceback) -> None:
    """sys.excepthook: the user's errors in one line (the Lake's: locked by another run, made with other settings,
    not a Lake, disk full; a full disk for a checkpoint; Ctrl-C during start-up); everything else keeps its traceback."""
    if issubclass(kind, LakeError):
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
    elif issubclass(kind, OSError) and error.errno in DISK_FULL:  # a checkpoint or metrics.jsonl could not be written
        print(f"{Path(sys.argv[0]).name}: error: disk full writing {error.filename or 'a file'} ({error.strerror}): the "
              "last checkpoint and what the Lake committed are intact; free some space, then --resume", file=sys.stderr)
    elif issubclass(kind, KeyboardInterrupt):
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
    else:
        sys.__excepthook__(kind, error, traceback)


def device_sync(device: torch.device) -> None:
    """Before a timer is read: CUDA runs asynchronously, so without this the BigAgent's queued kernels would be billed
    to the agents (whoever synchronises next)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_optimizer(args: Args, q_network: nn.Module, big: bool) -> torch.optim.Optimizer:
    # foreach: one multi-tensor kernel per step for all weights (CUDA's default already); on the CPU the per-tensor
    # loop took a third of a MinAtar PQN minibatch step (benchmarks/minatar_bench.py)
    if big:  # CleanRL dqn_atari
        return torch.optim.Adam(q_network.parameters(), lr=args.big_learning_rate, foreach=True)
    return torch.optim.RAdam(q_network.parameters(), lr=args.learning_rate, foreach=True)  # purejaxql, CleanRL pqn


def make_agent(args: Args, name: str, device: torch.device) -> Agent:
    """A PQN agent with its --num-envs envs, its Pond and its rollout extras."""
    envs = make_envs(args, args.num_envs)
    q_network = make_q_network(args, envs.single_action_space.n, device)
    decay = int(args.agent_epsilon_decay_fraction * args.total_frames / args.num_agents)
    schedule = {"start": args.agent_epsilon_start, "end": args.agent_epsilon_end, "decay_frames": decay, "frames_at_reset": 0}
    agent = Agent(name, q_network, make_optimizer(args, q_network, big=False), schedule, envs=envs,
                  pond=make_pond(args, args.num_envs, device))
    agent.values = torch.zeros((args.num_steps, args.num_envs), device=device)
    agent.rollout_game_over = np.zeros((args.num_steps, args.num_envs), bool)
    agent.rollout_autoreset = np.zeros((args.num_steps, args.num_envs), bool)
    return agent


def make_big_agent(args: Args, n_actions: int, device: torch.device) -> Agent:
    q_network = make_q_network(args, n_actions, device)
    target_network = make_q_network(args, n_actions, device)
    target_network.load_state_dict(q_network.state_dict())
    schedule = {"start": args.big_epsilon_reset, "end": args.big_epsilon_end,
                "decay_frames": args.big_epsilon_decay_frames, "frames_at_reset": 0}
    return Agent("big_agent", q_network, make_optimizer(args, q_network, big=True), schedule, target_network)


def evaluate_checkpoint(args: Args) -> None:
    """--eval-only: the BigAgent and the agents of a checkpoint, as after a phase; checkpoints/best.pt holds one network
    (stored as the BigAgent and as every agent) and "best", what it scored when it was kept."""
    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    saved = Args(**{**checkpoint["args"], **{k: getattr(args, k) for k in SESSION_FLAGS},
                    "capture_video": args.capture_video, "eval_episodes": args.eval_episodes,
                    "eval_epsilon": args.eval_epsilon, "cuda": args.cuda})
    device = torch.device("cuda" if torch.cuda.is_available() and saved.cuda else "cpu")
    torch.manual_seed(saved.seed)
    envs = make_envs(saved, (saved.num_agents + 1) * saved.eval_episodes)
    n_actions = envs.single_action_space.n
    networks = []
    for state in [checkpoint["big_agent"]] + checkpoint["agents"]:
        net = make_q_network(saved, n_actions, device)
        net.load_state_dict(state["q_network"])
        networks.append(net.eval())
    returns, lengths, video = evaluate(networks, saved, envs, derive_seed(saved, EVALUATION, checkpoint["phase"], 1),
                                       device, film=saved.capture_video)
    envs.close()
    names = ["big_agent"] + [f"agent{k}" for k in range(saved.num_agents)]
    result = {"checkpoint": args.checkpoint, "phase": checkpoint["phase"], "global_frames": checkpoint["global_frames"],
              **({"best": checkpoint["best"]} if "best" in checkpoint else {})}
    for name, r, n in zip(names, returns, lengths):
        result[f"{name}/eval/return"], result[f"{name}/eval/length"] = float(r.mean()), float(n.mean())
    if saved.capture_video:  # named after the checkpoint: best.pt's film does not overwrite its phase's
        name = f"eval_only_{Path(args.checkpoint).stem}_big_agent.mp4"
        path = Path(args.checkpoint).resolve().parent.parent / "videos" / name
        write_video(path, video)
        result["video"] = str(path)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.excepthook = one_line_errors
    args = tyro.cli(Args)
    if args.eval_only:
        if args.checkpoint is None or not Path(args.checkpoint).is_file():
            usage_error(f"--eval-only needs --checkpoint PATH of a checkpoint file (got {args.checkpoint})")
        evaluate_checkpoint(args)
        sys.exit(0)

    # ------------------------------------------------------------------ flags, run folder, Lake: before envs and networks
    checkpoint = None
    if args.resume is not None:
        run_dir = Path(args.resume)
        path = latest_checkpoint(run_dir)
        if path is None:
            usage_error(f"--resume {run_dir}: no checkpoints/phase_*.pt in it")
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        args = resumed_args(args, checkpoint)
        run_name = run_dir.name
        print(f"resuming {run_name} from {path} (phase {checkpoint['phase']}, {checkpoint['global_frames']:,} frames)")
    else:
        run_name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', args.env_id)}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir = Path(args.runs_dir) / run_name
    check_args(args)
    if args.agent_epsilon_reset_decay_frames == 0:  # a quarter of an agent's frames per phase (see its help)
        args.agent_epsilon_reset_decay_frames = (args.agent_updates_per_phase * args.num_envs * args.num_steps
                                                 * frames_per_step(args) // 4)
    if checkpoint is None:
        new_run_dir = run_dir
        atexit.register(remove_unstarted_run)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            usage_error(f"--runs-dir {args.runs_dir}: cannot make the run folder ({error.strerror or error})")
    lake_path = Path(args.lake_path) if args.lake_path else run_dir / "lake"
    if checkpoint is not None and not lake_path.is_dir():
        usage_error(f"--resume {run_dir}: the run's Lake {lake_path} is gone")
    try:  # opened first: a locked Lake (another run writing it) or one made with other settings fails here, at once
        lake = Lake(lake_path, frame_shape=frame_shape(args),
                    stack_size=args.stack_size, env_id=args.env_id, capacity=args.lake_capacity,
                    segment_bytes=args.lake_segment_mb << 20, fsync_every=args.lake_fsync_every)
    except OSError as error:
        usage_error(f"--lake-path {lake_path}: {error.strerror or error}")

    # ------------------------------------------------------------------ seeding, device
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.backends.cudnn.benchmark = not args.torch_deterministic
    if device.type == "cuda":  # the CPU kernels used here are deterministic already (and this import costs seconds)
        torch.use_deterministic_algorithms(args.torch_deterministic, warn_only=True)
    frame_skip = frames_per_step(args)

    # config.json: what compare.py groups runs by (script, env_id, seed), every flag and the device used (not the
    # --cuda wish). Written when the run starts; a resume keeps it, updating the flags it applied (and writes it only
    # for a run started before config.json existed).
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text()) if config_path.exists() else {
        "script": "pqn_lake", "env_id": args.env_id, "seed": args.seed, "run_name": run_name, **vars(args),
        "cuda": device.type == "cuda", "device": str(device)}
    applied = {k: getattr(args, k) for k in RESUME_CAN_CHANGE if config.get(k) != getattr(args, k)}
    if not config_path.exists() or applied:
        config_path.with_name("config.json.tmp").write_text(json.dumps({**config, **applied}, indent=2) + "\n")
        os.replace(config_path.with_name("config.json.tmp"), config_path)  # never a half-written config.json

    # ------------------------------------------------------------------ agents, BigAgent, their envs
    agents = [make_agent(args, f"agent{k}", device) for k in range(args.num_agents)]
    n_actions = agents[0].envs.single_action_space.n
    big_agent = make_big_agent(args, n_actions, device)
    if args.big_agent_num_envs > 0:
        big_agent.envs = make_envs(args, args.big_agent_num_envs)
        big_agent.pond = make_pond(args, args.big_agent_num_envs, device)
    live = args.big_agent_schedule == "live"
    # live: the BigAgent draws from a generator of its own, so the agents' random stream is the same as without it
    big_generator = torch.Generator(device).manual_seed(derive_seed(args, BIG_AGENT))
    clone_every = args.agent_updates_per_phase if args.clone_every_updates is None else args.clone_every_updates
    eval_envs = make_envs(args, args.num_agents * args.eval_episodes)
    # live: the BigAgent's evaluation games, on envs and a seed of their own (the agents' games stay those of the
    # other modes: evaluate's ε draws would shift with one more network in the same call)
    big_eval_envs = make_envs(args, args.eval_episodes) if live else None
    # Random play (ε = 1) under the evaluation protocol: the floor every evaluation is read against. Its own seed
    # (no phase 0 is ever evaluated) and its own generator: the training's random stream is untouched.
    random_returns, *_ = evaluate([a.q_network for a in agents], replace(args, eval_epsilon=1.0), eval_envs,
                                  derive_seed(args, EVALUATION, 0, 0), device)
    random_return = float(random_returns.mean())

    # ------------------------------------------------------------------ state: fresh, or from the checkpoint
    phase, global_frames, new_transitions, wandb_id = 0, 0, 0, None  # new_transitions: poured since the last BigPond fill
    # The last clone: its frame count, each agent's evaluation just before it (the level to regain) and the frames
    # after it at which each agent's evaluation first regained that level (None: not yet). No clone before phase 1.
    clone = {"frames": 0, "levels": None, "recovered": None}
    best_return = -float("inf")  # the best evaluation return so far, that of checkpoints/best.pt
    if checkpoint is not None:
        for agent, state in zip(agents, checkpoint["agents"]):
            load_agent_state(agent, state)
        load_agent_state(big_agent, checkpoint["big_agent"])
        phase, global_frames, wandb_id = checkpoint["phase"], checkpoint["global_frames"], checkpoint["wandb_id"]
        new_transitions, clone = checkpoint["new_transitions"], checkpoint.get("clone", clone)
        best_return = checkpoint.get("best_return", best_return)  # a checkpoint from before best.pt: none yet
        if lake.num_transitions != checkpoint["lake_transitions"]:
            print(f"warning: the Lake holds {lake.num_transitions:,} transitions, {checkpoint['lake_transitions']:,} "
                  "at the checkpoint (the run died mid-phase?): the extra ones stay in the Lake, so this run is "
                  "no longer exactly the uninterrupted one")
        set_rng_state(checkpoint["rng"])
        if "big_generator" in checkpoint:
            big_generator.set_state(checkpoint["big_generator"])

    # metrics.jsonl: always written; on resume, lines past the checkpoint (a run that died mid-phase) go.
    metrics_path = run_dir / "metrics.jsonl"
    if checkpoint is not None and metrics_path.exists():
        kept = [line for line in metrics_path.read_text().splitlines() if json.loads(line)["global_frames"] <= global_frames]
        metrics_path.write_text("".join(line + "\n" for line in kept))
    metrics_file = open(metrics_path, "a")
    if args.track:
        import wandb

        wandb_id = wandb_id or uuid.uuid4().hex[:8]  # kept in the checkpoints: a resumed run logs to the same wandb run
        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, group=args.wandb_group, name=run_name,
                   config=vars(args), id=wandb_id, resume="allow", save_code=True, dir=run_dir)  # runs/<run>/wandb/
        # global_frames is the x-axis of every chart, not wandb's step: the agents' evaluations before and right after
        # a clone share their frame count, and logging both at one step would keep only the second
        wandb.define_metric("global_frames")
        wandb.define_metric("*", step_metric="global_frames")

    def log(metrics: dict) -> None:
        """One JSON line in metrics.jsonl and, with --track, one wandb.log, both against global_frames."""
        row = {"global_frames": global_frames, **metrics}
        metrics_file.write(json.dumps(row) + "\n")
        metrics_file.flush()
        if args.track:
            wandb.log(row)

    def pop_games(agent: Agent, prefix: str = "") -> dict:
        if not agent.finished:
            return {}
        returns, lengths = zip(*agent.finished)
        agent.finished.clear()
        return {f"{prefix}charts/episodic_return": float(np.mean(returns)), f"{prefix}charts/episodic_length": float(np.mean(lengths))}

    def evaluate_agents(seed_keys: tuple, line_phase: int, film: bool = False, big_row: bool = True) -> tuple:
        """--eval-episodes games per agent at ε = --eval-epsilon, logged against the frames since the last clone
        (agentK/eval/return, eval/agents_mean; live: the BigAgent's own games too, as the run's eval/return, unless not
        big_row); notes the first evaluation at which each agent regains its level before the last clone. Returns
        (per-agent mean returns, all returns, lengths, video, seconds, the BigAgent's mean return or None)."""
        eval_start = time.time()
        returns, lengths, video = evaluate([a.q_network for a in agents], args, eval_envs,
                                           derive_seed(args, EVALUATION, *seed_keys), device, film=film)
        means, since = returns.mean(1), global_frames - clone["frames"]
        if clone["levels"] is not None:
            clone["recovered"] = [r if r is not None or m < level else since
                                  for r, m, level in zip(clone["recovered"], means, clone["levels"])]
        row = {"eval/agents_mean": float(means.mean()), "eval/frames_since_clone": since, "charts/phase": line_phase}
        if args.big_agent_schedule == "none":  # no BigAgent: the agents' evaluations are the run's
            row["eval/return"] = row["eval/agents_mean"]
        big_return = None
        if live and big_row:  # the BigAgent is the run's product: its curve is the run's
            big_returns, big_lengths, _ = evaluate([big_agent.q_network], args, big_eval_envs,
                                                   derive_seed(args, EVALUATION, *seed_keys, BIG_AGENT), device)
            big_return = row["eval/return"] = row["big_agent/eval/return"] = float(big_returns.mean())
            row["big_agent/eval/length"] = float(big_lengths.mean())
        for agent, m, n in zip(agents, means, lengths):
            row[f"{agent.name}/eval/return"], row[f"{agent.name}/eval/length"] = float(m), float(n.mean())
        log(row)
        seconds = time.time() - eval_start
        print(f"eval at {global_frames:,} frames" + (f" ({since:,} after the clone)" if clone["levels"] is not None else "")
              + ": agents " + " ".join(f"{m:.2f}" for m in means)
              + (f", BigAgent {big_return:.2f}" if big_return is not None else "") + f", {returns.size} games, {lengths.sum():,} steps, {seconds:.1f}s", flush=True)
        return means, returns, lengths, video, seconds, big_return

    def keep_best(score: float, agent: Agent) -> None:
        """checkpoints/best.pt: the network of the best evaluation so far (training can regress), replaced only by a
        strictly better one. It holds what --eval-only reads, the network stored as the BigAgent and as every agent."""
        global best_return
        if score <= best_return:
            return
        best_return = score
        network = {"q_network": agent.q_network.state_dict()}
        atomic_save(run_dir / "checkpoints" / "best.pt", {
            "args": vars(args), "run_name": run_name, "phase": phase, "global_frames": global_frames,
            "big_agent": network, "agents": [network] * len(agents),
            "best": {"return": score, "global_frames": global_frames, "network": agent.name}})

    for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):  # before this, Ctrl-C just ends the start-up
        signal.signal(signum, request_stop)
    if checkpoint is None:
        log({"eval/random_return": random_return})
    print(f"run {run_name}: {args.num_agents} agents x {args.num_envs} envs on {device}, Lake at {lake_path}; random play "
          f"scores {random_return:.2f} ({random_returns.size} games)", flush=True)
    start_time, start_frames, phases_here, updates_here = time.time(), global_frames, 0, 0
    steps_per_update = args.num_agents * args.num_envs * args.num_steps
    resume_update = checkpoint.get("update", 0) if checkpoint is not None else 0  # > 0: stopped mid-phase

    def save(name: str, update: int = 0) -> None:
        """Everything needed to continue; update > 0: a mid-phase checkpoint after that agent update."""
        lake.commit(wait=True)  # the checkpoint never points past what the Lake holds
        save_checkpoint(run_dir / "checkpoints" / name, {
            "args": vars(args), "run_name": run_name, "phase": phase, "update": update, "global_frames": global_frames,
            "agents": [agent_state(a) for a in agents], "big_agent": agent_state(big_agent),
            "lake_transitions": lake.num_transitions, "new_transitions": new_transitions, "wandb_id": wandb_id,
            "clone": clone, "best_return": best_return, "rng": rng_state(), "big_generator": big_generator.get_state(),
            "teachers": teachers}, args.keep_checkpoints)  # the agents' networks before the phase's clone

    stopped = False
    while global_frames < args.total_frames and not stopped:
        teachers = None  # the agents' networks just before this phase's clone
        # A phase starts with every agent's envs reset from (seed, agent, phase): ale-py cannot save its
        # emulators, so this is what makes a run resumed at a phase end equal the uninterrupted one. A run
        # stopped mid-phase resumes after its last update with envs reset from (seed, agent, phase, update):
        # the games in progress are cut there, so it is a faithful continuation, not a bit-exact one.
        first_update, resume_update = resume_update + 1, 0
        if first_update == 1:
            phase += 1
        phase_start, eval_seconds = time.time(), 0.0
        print(f"phase {phase}: agents acting from {global_frames:,} frames", flush=True)
        for k, agent in enumerate(agents):
            keys = (k, phase) if first_update == 1 else (k, phase, first_update - 1)
            reset_envs(agent, derive_seed(args, ENV_RESET, *keys), device, args.debug_dump_transitions)
        if live:  # the BigPond's older part, from the Lake; its fresh part is the Ponds' rows of this phase
            big_pond, rows_written, big_agent_seconds, big_start_updates = None, 0, 0.0, big_agent.updates
            fill_start = time.time()
            if args.live_lake_draw == "uniform" and lake.num_transitions > 0:
                big_pond = fill_big_pond(lake, args, np.random.default_rng(derive_seed(args, BIG_POND_DRAW, phase)), device)
            fill_seconds = time.time() - fill_start
            if big_agent.envs is not None:
                reset_envs(big_agent, derive_seed(args, ENV_RESET, BIG_AGENT, phase), device, args.debug_dump_transitions)

        # -------------------------------------------------------------- 1-3: PQN agents -> Ponds -> Lake
        for update in range(first_update, args.agent_updates_per_phase + 1):
            rollout(agents, args.num_steps, frame_skip, device, args.batched_inference)
            global_frames += steps_per_update * frame_skip
            metrics, games = {}, []
            for agent in agents:
                games += agent.finished
                metrics.update(pop_games(agent, f"{agent.name}/"))
                for key, value in pqn_update(agent, args, device).items():
                    metrics[f"{agent.name}/{key}"] = value
                metrics[f"{agent.name}/charts/epsilon"] = epsilon(agent.epsilon_schedule, agent.frames)
                if agent.pond.pos == args.pond_steps:
                    new_transitions += drain_pond(agent.pond, lake, agent.name)
            if live:  # the BigAgent learns on what the agents just made: ratio x their transitions, in samples
                big_start = time.time()
                rows_written += args.num_steps
                view = fresh_view(agents, rows_written, args)
                owed = int(args.big_replay_ratio * sum(a.frames for a in agents) // frame_skip // args.big_batch_size)
                stats, updates_before = [torch.zeros((), device=device) for _ in range(3)], big_agent.updates
                for _ in range(owed - updates_before):
                    if big_agent.envs is not None and global_frames < args.total_frames:  # one step per update
                        act(big_agent, generator=big_generator)
                        receive(big_agent, frame_skip, device)
                        global_frames += args.big_agent_num_envs * frame_skip
                        if big_agent.pond.pos == args.pond_steps:
                            drain_pond(big_agent.pond, lake, big_agent.name)
                    for total, x in zip(stats, live_big_agent_update(big_agent, big_pond, view, [a.q_network for a in agents],
                                                                      args, big_generator)):
                        total += x
                    if big_agent.updates % args.big_target_network_frequency == 0:
                        big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
                device_sync(device)
                big_agent_seconds += time.time() - big_start
                metrics.update({f"big_agent/losses/{k}": (x / max(1, big_agent.updates - updates_before)).item()
                                for k, x in zip(("td_loss", "q_values", "distill"), stats)})
                metrics.update({"big_agent/charts/updates": big_agent.updates, "charts/replay_ratio": big_agent.updates
                                * args.big_batch_size / max(1, sum(a.frames for a in agents) // frame_skip)})
            sps = int((global_frames - start_frames) / frame_skip / (time.time() - start_time))
            if games:
                metrics["charts/episodic_return"] = float(np.mean([g[0] for g in games]))
                metrics["charts/episodic_length"] = float(np.mean([g[1] for g in games]))
            log({**metrics, "charts/SPS": sps, "charts/phase": phase})
            if update % max(1, args.agent_updates_per_phase // 10) == 0:
                ret = metrics.get("charts/episodic_return")
                print(f"phase {phase} update {update}/{args.agent_updates_per_phase}  frames {global_frames:,}  SPS {sps:,}"
                      + (f"  episodic_return {ret:.2f}" if ret is not None else ""), flush=True)
            last_update = update == args.agent_updates_per_phase or global_frames >= args.total_frames
            if update % args.eval_every_updates == 0 or last_update:  # the last: the level the clone must regain
                levels, *_, seconds, big_return = evaluate_agents((phase, update), phase)
                keep_best(float(levels.max()), agents[int(levels.argmax())])  # the best agent of this evaluation
                if big_return is not None:
                    keep_best(big_return, big_agent)
                eval_seconds += seconds
            if global_frames >= args.total_frames:
                break
            updates_here += 1
            if update < args.agent_updates_per_phase and (
                    stop_requested or (args.stop_after_updates and updates_here >= args.stop_after_updates)):
                stopped = True
                break
        for agent in agents + ([big_agent] if live and big_agent.envs is not None else []):
            new_transitions += drain_pond(agent.pond, lake, agent.name)  # what is left goes too: all reach the Lake
        lake.commit(wait=True)
        if stopped:  # slurm's lead time is short and a phase is long: checkpoint now, not at the phase end
            save(f"phase_{phase:04d}_update_{update:06d}.pt", update)
            print(f"stopping in phase {phase} after update {update}; continue with --resume {run_dir}", flush=True)
            break
        agents_seconds = time.time() - phase_start - eval_seconds - (big_agent_seconds + fill_seconds if live else 0)
        if clone["levels"] is not None:  # how fast the last clone got back to the agents' level before it
            frames = [r if r is not None else global_frames - clone["frames"] for r in clone["recovered"]]
            log({**{f"{a.name}/recovery/frames": f for a, f in zip(agents, frames)}, "recovery/frames": float(np.mean(frames)),
                 "recovery/agents_regained": sum(r is not None for r in clone["recovered"]), "charts/phase": phase})

        summary = f"agents {agents_seconds:.1f}s"
        result = "eval/return agents " + " ".join(f"{x:.2f}" for x in levels)
        if args.big_agent_schedule == "phases":
            # -------------------------------------------------------------- 4: BigPond from the Lake
            fill_start = time.time()
            big_pond = fill_big_pond(lake, args, np.random.default_rng(derive_seed(args, BIG_POND_DRAW, phase)), device)
            if args.big_distill_coef > 0:
                add_teacher_q(big_pond, [agent.q_network for agent in agents], args.stack_size, n_actions)
            # the states of this phase's collapse metrics, drawn before the BigAgent pours anything
            probe = torch.from_numpy(np.asarray(lake.sample(args.collapse_probe_states, rng=np.random.default_rng(
                derive_seed(args, PROBE, phase))).obs)).to(device)
            fill_seconds = time.time() - fill_start
            fresh, new_transitions = new_transitions, 0  # the Lake's transitions that are new to this BigPond draw

            # -------------------------------------------------------------- 5-6: BigAgent, (Double) DQN
            if args.big_agent_reinit_each_phase:
                big_agent.q_network = make_q_network(args, n_actions, device)
                big_agent.optimizer = make_optimizer(args, big_agent.q_network, big=True)
            big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
            big_agent.epsilon_schedule = {"start": args.big_epsilon_reset, "end": args.big_epsilon_end,
                                          "decay_frames": args.big_epsilon_decay_frames, "frames_at_reset": big_agent.frames}
            if big_agent.envs is not None:
                reset_envs(big_agent, derive_seed(args, ENV_RESET, BIG_AGENT, phase), device, args.debug_dump_transitions)
            big_updates = args.big_agent_updates_per_phase
            if args.big_replay_ratio > 0:
                big_updates = max(1, int(np.ceil(args.big_replay_ratio * fresh / args.big_batch_size)))
            td_losses, q_values, distill_losses = (torch.zeros((), device=device) for _ in range(3))
            for i in range(1, big_updates + 1):
                if big_agent.envs is not None and global_frames < args.total_frames:
                    act(big_agent)
                    receive(big_agent, frame_skip, device)
                    global_frames += args.big_agent_num_envs * frame_skip
                    if big_agent.pond.pos == args.pond_steps:
                        new_transitions += drain_pond(big_agent.pond, lake, big_agent.name)
                loss, q, distill = big_agent_update(big_agent, big_pond, args)
                td_losses += loss
                q_values += q
                distill_losses += distill
                if i % args.big_target_network_frequency == 0:
                    big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
            if big_agent.envs is not None:
                new_transitions += drain_pond(big_agent.pond, lake, big_agent.name)
            del big_pond
            device_sync(device)
            big_agent_seconds = time.time() - fill_start - fill_seconds
            replay_ratio = big_updates * args.big_batch_size / max(1, fresh)
            big_row = {"big_agent/losses/td_loss": (td_losses / big_updates).item(),
                       "big_agent/losses/q_values": (q_values / big_updates).item(),
                       "big_agent/losses/distill": (distill_losses / big_updates).item()}
            big_row_after = {"charts/replay_ratio": replay_ratio, "big_agent/charts/updates": big_updates}
            summary += f", BigPond fill {fill_seconds:.1f}s, BigAgent {big_updates:,} updates {big_agent_seconds:.1f}s"
            result = f"replay ratio {replay_ratio:.3g}, " + result.replace("eval/return agents", "agents before the clone")
        elif live:  # the BigAgent trained after every update; the phase's Lake states for the collapse metrics
            del big_pond
            big_updates = big_agent.updates - big_start_updates
            probe = torch.from_numpy(np.asarray(lake.sample(args.collapse_probe_states, rng=np.random.default_rng(
                derive_seed(args, PROBE, phase))).obs)).to(device)
            big_row, big_row_after = {}, {"big_agent/charts/phase_updates": big_updates}
            summary += f", BigAgent {big_updates:,} updates {big_agent_seconds:.1f}s"

        if args.big_agent_schedule != "none":
            # -------------------------------------------------------------- collapse: greedy actions on the probe
            # The BigAgent against each agent it replaces (its teacher), on the same Lake states: a BigAgent that
            # ignores the screen shows as one action's share near 1 and an entropy near 0, whatever its return.
            teachers = [copy.deepcopy(agent.q_network.state_dict()) for agent in agents]  # kept in the checkpoint
            collapse = collapse_metrics(big_agent.q_network, [agent.q_network for agent in agents], probe, n_actions)
            times = {"time/agents_seconds": agents_seconds, "time/big_pond_fill_seconds": fill_seconds,
                     "time/big_agent_seconds": big_agent_seconds}
        clone_now = args.big_agent_schedule == "phases" or live and clone_every > 0 and (
            agents[0].updates % clone_every == 0 or global_frames >= args.total_frames)  # live: the run's end clones too
        if live and not clone_now:
            phase_seconds = time.time() - phase_start
            log({**collapse, **big_row_after, **times, "time/eval_seconds": eval_seconds,
                 "time/eval_fraction": eval_seconds / phase_seconds, "charts/lake_transitions": lake.num_transitions,
                 "charts/phase": phase, **pop_games(big_agent, "big_agent/")})
        if clone_now:
            # -------------------------------------------------------------- 7: clone the agents from the BigAgent
            for agent in agents:
                agent.q_network.load_state_dict(big_agent.q_network.state_dict())
                if args.clone_optimizer == "reset":
                    agent.optimizer = make_optimizer(args, agent.q_network, big=False)
                agent.epsilon_schedule = {"start": args.agent_epsilon_reset, "end": args.agent_epsilon_end,
                                          "decay_frames": args.agent_epsilon_reset_decay_frames, "frames_at_reset": agent.frames}
            clone = {"frames": global_frames, "levels": [float(x) for x in levels], "recovered": [None] * len(agents)}

            # -------------------------------------------------------------- evaluation right after the clone
            # The agents are now copies of the BigAgent: their games are the BigAgent's evaluation (--eval-episodes x
            # agents games of one network) and the first point of the next phase's recovery curve.
            _, returns, lengths, video, seconds, _ = evaluate_agents((phase, 0), phase + 1, film=args.capture_video,
                                                                     big_row=False)
            eval_seconds += seconds
            big_return, agents_return = float(returns.mean()), float(np.mean(levels))
            phase_seconds = time.time() - phase_start
            log({"eval/return": big_return, "eval/length": float(lengths.mean()), "big_agent/eval/return": big_return,
                 "big_agent/eval/length": float(lengths.mean()), "distill/big_minus_agents": big_return - agents_return,
                 # a ratio of returns means something only above 0 (not for Pong's -21..21)
                 **({"distill/big_over_agents": big_return / agents_return} if agents_return > 0 else {}),
                 **big_row, **collapse, **big_row_after, **times, "time/eval_seconds": eval_seconds,
                 "time/eval_fraction": eval_seconds / phase_seconds, "charts/lake_transitions": lake.num_transitions,
                 "charts/phase": phase, **pop_games(big_agent, "big_agent/"),
                 **({"big_agent/charts/epsilon": epsilon(big_agent.epsilon_schedule, big_agent.frames)} if big_agent.envs else {})})
            # the after-clone evaluation is the BigAgent's: all its games (--eval-episodes x agents) rate its network
            keep_best(big_return, big_agent)
            result += f", eval/return BigAgent {big_return:.2f}"
            if args.capture_video:
                video_path = run_dir / "videos" / f"phase_{phase:04d}_big_agent.mp4"
                write_video(video_path, video)
                if args.track:  # wandb only: metrics.jsonl holds numbers
                    wandb.log({"global_frames": global_frames, "media/video": wandb.Video(str(video_path), format="mp4")})

        # -------------------------------------------------------------- checkpoint
        if args.debug_dump_transitions:
            for agent in agents + ([big_agent] if big_agent.envs is not None else []):
                dump = {k: np.stack(v) if isinstance(v, list) else v for k, v in agent.debug.items() if not isinstance(v, list) or v}
                (run_dir / "debug").mkdir(exist_ok=True)
                np.savez(run_dir / "debug" / f"{agent.name}_phase_{phase:04d}.npz", **dump)
        save(f"phase_{phase:04d}.pt")
        phases_here += 1
        print(f"phase {phase} done: {global_frames:,} frames, {time.time() - phase_start:.1f}s ({summary}, evaluation "
              f"{eval_seconds:.1f}s), {result} (random play {random_return:.2f})", flush=True)
        if stop_requested or (args.stop_after_phases and phases_here >= args.stop_after_phases):
            print(f"stopping after phase {phase}; continue with --resume {run_dir}", flush=True)
            stopped = True

    lake.close()
    for env in [a.envs for a in agents] + [big_agent.envs, eval_envs, big_eval_envs]:
        if env is not None:
            env.close()
    metrics_file.close()
    if args.track:
        wandb.finish()
