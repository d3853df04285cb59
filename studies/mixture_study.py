"""The mixture against the single agent on real Atari, small enough for a 2-core CPU in about an hour.

    python studies/mixture_study.py                         # runs both scripts x 2 seeds, then prints the table
    python studies/mixture_study.py --table-only   # the table (and compare.py's figures) of runs already made

Breakout: with FIRE after a lost life (--fire-after-life-loss) a CPU run of PQN learns visibly within a few hundred
thousand frames (a pilot of 245,760 frames went from random play's ~1.3 to ~3-5 per game), where Pong needs
millions of frames to leave -21 and Boxing's first games were below random play. The mixture runs phases of
--agent-updates-per-phase 30 (122,880 frames: 4 agents x 8 envs x 32 steps x 30 updates x frame skip 4), four of
them (three clones inside the run), evaluated every 10 updates and right after each clone. The BigAgent keeps the
script's --big-replay-ratio 2 but takes CleanRL dqn_atari's batch 32 and Adam 1e-4: a phase here brings only ~30k
new transitions, so batch 256 would give it 240 gradient steps a phase (an earlier run of this study: its BigAgent
mostly ignored the screen), batch 32 gives 1,920 for the same samples and CPU time. dqn_single_baseline.py spends
the same frames on 8 envs and evaluates at the same frame counts. All runs go at once (one thread each,
OMP_NUM_THREADS=1); --scripts reruns one script beside the other's runs.

The table, per seed and phase: the agents' evaluation before the clone (their mean), the BigAgent's evaluation
(the agents right after the clone), their ratio, and the frames the clones needed to regain their level (mean
over agents; "never" counts the phase's frames); then the final evaluation of both scripts at equal frames, and
random play's return (ε = 1, the same evaluation protocol) as the floor. compare.py draws the figures into
<runs-dir>/compare/ (Breakout-v5.png: return against frames; Breakout-v5_recovery.png: recovery curves).
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # pqn_lake and lake, for random play and the BigAgents' probe


@dataclasses.dataclass
class Args:
    runs_dir: str = "runs/mixture_study"
    """where the four runs go (and compare.py's output, in <runs-dir>/compare)"""
    env_id: str = "Breakout-v5"
    """the game"""
    seeds: tuple[int, ...] = (1, 2)
    """seeds of each script"""
    agent_updates_per_phase: int = 30
    """the mixture's phase length in agent updates (122,880 frames at 30)"""
    phases: int = 4
    """phases of the mixture (phases - 1 clones inside the run); the baseline gets the same frames"""
    eval_every_updates: int = 10
    """the agents' evaluation period inside a phase (the baseline evaluates at the same frame counts)"""
    eval_episodes: int = 4
    """games per agent and evaluation (and per evaluation of the baseline)"""
    random_games: int = 32
    """games of random play for the floor"""
    big_batch_size: int = 32
    """the BigAgent's minibatch: 32 (CleanRL dqn_atari's), not the script's 256, because a phase here has only
    ~30k new transitions: at --big-replay-ratio 2 that is 1,920 gradient steps of 32 instead of 240 of 256, for
    the same samples and about the same CPU time"""
    big_learning_rate: float = 1e-4
    """the BigAgent's Adam learning rate at batch 32 (CleanRL dqn_atari's)"""
    scripts: tuple[Literal["pqn_lake.py", "dqn_single_baseline.py"], ...] = ("pqn_lake.py", "dqn_single_baseline.py")
    """which scripts to run (the table reads every run in --runs-dir: rerun one script beside the other's runs)"""
    table_only: bool = False
    """print the table and draw the figures of the runs in --runs-dir without running anything"""


FRAME_SKIP, NUM_AGENTS, NUM_ENVS, NUM_STEPS = 4, 4, 8, 32


def commands(args: Args) -> list:
    frames_per_update = NUM_AGENTS * NUM_ENVS * NUM_STEPS * FRAME_SKIP
    total = frames_per_update * args.agent_updates_per_phase * args.phases
    common = [
        "--env-id",
        args.env_id,
        "--runs-dir",
        args.runs_dir,
        "--num-envs",
        str(NUM_ENVS),
        "--total-frames",
        str(total),
        "--eval-episodes",
        str(args.eval_episodes),
        "--env-threads",
        "1",
    ]
    runs = []
    for seed in args.seeds:
        runs.append(
            [
                "pqn_lake.py",
                *common,
                "--seed",
                str(seed),
                "--num-steps",
                str(NUM_STEPS),
                "--num-minibatches",
                "4",
                "--pond-steps",
                "64",
                "--agent-updates-per-phase",
                str(args.agent_updates_per_phase),
                "--eval-every-updates",
                str(args.eval_every_updates),
                "--big-pond-size",
                "50000",
                "--big-batch-size",
                str(args.big_batch_size),
                "--big-learning-rate",
                str(args.big_learning_rate),
            ]
        )
        runs.append(
            [
                "dqn_single_baseline.py",
                *common,
                "--seed",
                str(seed),
                "--eval-every-frames",
                str(frames_per_update * args.eval_every_updates),
                "--learning-starts",
                "2000",
                "--buffer-size",
                "100000",
            ]
        )
    return [run for run in runs if run[0] in args.scripts]


def random_play(args: Args) -> tuple:
    """Mean and standard error of random play's return (ε = 1) under pqn_lake.py's evaluation protocol."""
    import torch

    import pqn_lake

    flags = pqn_lake.Args(env_id=args.env_id, eval_episodes=args.random_games, eval_epsilon=1.0, env_threads=1)
    envs = pqn_lake.make_envs(flags, args.random_games)
    network = pqn_lake.make_q_network(flags, envs.single_action_space.n, torch.device("cpu"))
    returns, _, _ = pqn_lake.evaluate([network], flags, envs, seed=12345, device=torch.device("cpu"))
    envs.close()
    return float(returns.mean()), float(returns.std(ddof=1) / np.sqrt(returns.size))


def greedy_actions(run_dir: Path, phase: int, states: int = 2000) -> str:
    """The action the BigAgent of a phase's checkpoint picks most often over `states` states drawn uniformly from
    the run's Lake, and its share: a share of 1 is a policy that ignores the screen."""
    import torch

    import pqn_lake
    from lake import Lake

    checkpoint = torch.load(run_dir / "checkpoints" / f"phase_{phase:04d}.pt", map_location="cpu", weights_only=False)
    flags = pqn_lake.Args(**checkpoint["args"])
    with Lake(run_dir / "lake", mode="r") as lake:
        obs = torch.from_numpy(np.asarray(lake.sample(states, rng=np.random.default_rng(0)).obs))
    envs = pqn_lake.make_envs(flags, 1)
    action_set = envs.ale.get_action_set()
    envs.close()
    network = pqn_lake.make_q_network(flags, len(action_set), torch.device("cpu"))
    network.load_state_dict(checkpoint["big_agent"]["q_network"])
    with torch.no_grad():
        counts = np.bincount(network(obs).argmax(1).numpy())
    return f"{action_set[counts.argmax()].name} {counts.max() / states:.0%}"


def read(run_dir: Path) -> tuple:
    config = json.loads((run_dir / "config.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return config, rows


def table(args: Args) -> str:
    runs = sorted(p for p in Path(args.runs_dir).iterdir() if (p / "metrics.jsonl").exists())
    random_mean, random_se = random_play(args)
    lines = [
        f"{args.env_id}, runs in {os.path.relpath(args.runs_dir)}; random play: {random_mean:.2f} ± {random_se:.2f} "
        f"(mean ± s.e. of {args.random_games} games)",
        "",
        "| seed | phase | frames at the clone | agents before the clone | BigAgent | BigAgent / agents | "
        "recovery frames (mean over agents) | agents regained | BigAgent's greedy action (share of 2,000 Lake "
        "states) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    finals = {}
    for run_dir in runs:
        config, rows = read(run_dir)
        evals = [r for r in rows if "eval/return" in r]
        if evals:
            finals.setdefault(config["script"], []).append(
                (config["seed"], evals[-1]["global_frames"], evals[-1]["eval/return"])
            )
        if config["script"] != "pqn_lake":
            continue
        recovery = {r["charts/phase"]: r for r in rows if "recovery/frames" in r}
        for big in (r for r in rows if "distill/big_minus_agents" in r):
            phase = big["charts/phase"]
            before = big["eval/return"] - big["distill/big_minus_agents"]
            ratio = big.get("distill/big_over_agents")
            rec = recovery.get(phase + 1)
            lines.append(
                f"| {config['seed']} | {phase} | {big['global_frames']:,} | {before:.2f} | {big['eval/return']:.2f} | "
                + (f"{ratio:.2f}" if ratio is not None else "n/a")
                + " | "
                + (
                    f"{rec['recovery/frames']:,.0f} | {rec['recovery/agents_regained']}/{NUM_AGENTS} |"
                    if rec
                    else "(last clone) | |"
                )
                + f" {greedy_actions(run_dir, phase)} |"
            )
    lines += ["", "| script | seed | frames | final eval/return |", "| --- | ---: | ---: | ---: |"]
    for script, results in sorted(finals.items()):
        for seed, frames, value in sorted(results):
            lines.append(f"| {script} | {seed} | {frames:,} | {value:.2f} |")
        lines.append(f"| {script} | mean | | {np.mean([v for _, _, v in results]):.2f} |")
    return "\n".join(lines)


def main(args: Args) -> None:
    args.runs_dir = str(Path(args.runs_dir).resolve())  # the runs start in the repository's root
    if not args.table_only:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
        Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
        procs = []
        for command in commands(args):
            print("python " + " ".join(command), flush=True)
            log = open(
                Path(args.runs_dir) / f"{Path(command[0]).stem}_seed{command[command.index('--seed') + 1]}.log", "w"
            )
            procs.append(
                subprocess.Popen([sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
        start = time.time()
        codes = [p.wait() for p in procs]
        print(f"all runs done in {(time.time() - start) / 60:.1f} min, exit codes {codes}", flush=True)
        if any(codes):
            raise SystemExit(f"mixture_study.py: a run failed; its log is in {args.runs_dir}")
    print(table(args))
    subprocess.run(
        [sys.executable, "compare.py", args.runs_dir, "--out", str(Path(args.runs_dir) / "compare")],
        cwd=ROOT,
        check=True,
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
