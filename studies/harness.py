"""The studies' harness: the scripts' runs launched side by side (one thread each unless told), a run with a checkpoint
resumed from it, a finished one recorded and skipped; records (gzipped metrics.jsonl and config.json, its paths made
relative, the commit that ran it) in the committed record folders; and what the tables read from the records: final
returns, curves, random play, CPU minutes, projected GPU-hours, the per-game figure. A closed question's driver keeps
its tables only and names the commit to check out to run its arms again (closed)."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
import compare  # noqa: E402  (a run's or a record's metrics)

# The MinAtar paper's DQN (with experience replay and a target network) at 5M frames, read from its Figure 2: the 1 of
# every normalised MinAtar score
PAPER_DQN = {"Asterix": 17, "Breakout": 10, "Freeway": 50, "SpaceInvaders": 43, "Seaquest": 20}
# The 0, per game: random play (eval/random_return, ε = 1) pooled over the records of one PQN agent and the loop at
# its defaults, seeds 1-3, so that adding an arm to a table moves no other row
NORMALISER_ARMS, NORMALISER_SEEDS = ("pqn-anneal", "mixture-anneal"), (1, 2, 3)
# The GPU node's measured rates (an H200, benchmarks/gpu_runs/): Atari env steps/s of one agent's 128 envs and of the
# mixture's four agents in their threads, seconds per BigAgent update at batch 256; 100M frames are 25M env steps
GPU_AGENT_STEPS_PER_S, GPU_MIXTURE_STEPS_PER_S, GPU_BIG_AGENT_UPDATE_S = 9_659, 15_768, 2.24e-3
ATARI_FRAMES, ATARI_FRAME_SKIP = 100_000_000, 4


# ====================================================================== runs
def run_folder(where, name: str):
    """The latest run folder (or record) of a run named <game>__<arm>__<seed> in `where` (the scripts name it
    <env>__<exp_name>__<seed>__<time>), or None."""
    found = sorted(Path(where).glob(f"*__{name}__*")) if where else []
    return found[-1] if found else None


def progress(run_dir) -> int:
    """Frames of the run's latest checkpoint (0: none)."""
    import torch

    if run_dir is None:
        return 0
    checkpoints = [p for p in (run_dir / "checkpoints").glob("*.pt") if p.name != "best.pt"]
    return max((torch.load(p, map_location="cpu", weights_only=False)["global_frames"] for p in checkpoints), default=0)


def evaluated(run_dir) -> int:
    """Frames of the run's last evaluation (0: none): a record holds no checkpoint, its evaluations say it finished."""
    if not compare.has_metrics(run_dir):
        return 0
    rows = [json.loads(line) for line in compare.metrics_text(run_dir).splitlines() if line.strip()]
    return max((r["global_frames"] for r in rows if "eval/return" in r), default=0)


def minatar_run(runs_dir: str, game: str, seed: int, arm: str, frames: int, flags: list, script="pqn_lake.py"):
    """(name, frames, command) of a run of `script` on a MinAtar game, the arm's flags on top."""
    name = f"{game}__{arm}__{seed}"
    where = ["--env-id", f"MinAtar/{game}-v1", "--seed", str(seed), "--total-frames", str(frames)]
    return name, frames, [script, *where, "--runs-dir", runs_dir, "--exp-name", name, *flags]


def keep_record(runs_dir: str, record_dir: str, run_dir: Path) -> None:
    """metrics.jsonl (gzipped) and config.json of a finished run into record_dir, its paths written relative to
    runs_dir and the commit that ran it added."""
    record = Path(record_dir) / run_dir.name
    if record.is_dir():
        return
    record.mkdir(parents=True)
    compare.write_record_metrics(record, compare.metrics_text(run_dir))
    config = json.loads((run_dir / "config.json").read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout

    def relative(path: str) -> str:  # a path of this machine, written relative to runs_dir
        inside = os.path.relpath(path, os.path.abspath(runs_dir))
        return "<runs-dir>" if inside == "." else f"<runs-dir>/{inside}"

    config = {k: relative(v) if isinstance(v, str) and os.path.isabs(v) else v for k, v in config.items()}
    (record / "config.json").write_text(json.dumps({**config, "commit": commit.strip()}, indent=2) + "\n")
    print(f"{run_dir.name}: recorded", flush=True)


def still_to_run(planned: list, runs_dir: str, record_dir: str) -> list:
    """(name, command) of the planned (name, frames, command) runs still to make, in their order: a recorded one
    skipped, a finished one recorded (a stopped call had not) and skipped, one with a checkpoint resumed from it (its
    own flags, the plan's frames), one started but never checkpointed started again."""
    queue = []
    for name, frames, command in planned:
        run_dir = run_folder(runs_dir, name)
        if evaluated(run_folder(record_dir, name)) >= frames:
            continue
        if evaluated(run_dir) >= frames:
            keep_record(runs_dir, record_dir, run_dir)
        elif progress(run_dir) > 0:
            queue.append((name, [command[0], "--resume", str(run_dir), "--total-frames", str(frames)]))
        else:
            if run_dir is not None:
                shutil.rmtree(run_dir)
            queue.append((name, command))
    return queue


def run_queue(queue: list, runs_dir: str, record_dir: str, parallel: int, threads: int = 1) -> None:
    """The queue's runs, `parallel` at a time with `threads` torch threads each, each output in <runs_dir>/<name>.log;
    a run that reached its --total-frames recorded (a stop by SIGTERM exits 0 too, short of them)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    running, start = [], time.time()
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    while queue or running:
        while queue and len(running) < parallel:
            running.append(launch(runs_dir, *queue.pop(0), env))
        for name, proc in ended(running):
            run_dir = run_folder(runs_dir, name)
            total = json.loads((run_dir / "config.json").read_text())["total_frames"] if run_dir else 0
            if proc.returncode == 0 and evaluated(run_dir) >= total > 0:
                keep_record(runs_dir, record_dir, run_dir)
    print(f"all runs done in {(time.time() - start) / 60:.1f} min", flush=True)


def launch(runs_dir: str, name: str, command: list, env: dict) -> tuple:
    """`python command` started in the repository's root, its output appended to <runs_dir>/<name>.log: (name, its
    process)."""
    print(f"{time.strftime('%H:%M:%S')} start {name}: python {' '.join(command)}", flush=True)
    log = open(Path(runs_dir) / f"{name}.log", "a")
    return name, subprocess.Popen([sys.executable, *command], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def ended(running: list) -> list:
    """After a pause, the (name, process) of `running` that have exited, taken out of it, each reported."""
    time.sleep(5)
    done = [r for r in running if r[1].poll() is not None]
    for name, proc in done:
        running.remove((name, proc))
        print(f"{time.strftime('%H:%M:%S')} {name}: exit code {proc.returncode}", flush=True)
    return done


def closed(driver: str, commit: str) -> None:
    """A closed question's driver asked to run: say where its arms can run again, and stop."""
    sys.exit(
        f"{driver}: this question is answered and its driver keeps its tables only (--table-only); its records name "
        f"the commits that ran them. To run its arms again: git worktree add ../closed {commit}; this command there"
    )


# ====================================================================== what the tables read
def curves(args, arm: str, game: str, budget: int) -> dict:
    """{seed: (frames, eval/return, random play's return or None)} of the arm's records (args.record_dir, args.seeds)
    that reached `budget`."""
    out = {}
    for seed in args.seeds:
        run_dir = run_folder(args.record_dir, f"{game}__{arm}__{seed}")
        if run_dir is not None:
            frames, values, _, random = compare.read_metrics(run_dir, "eval/return")
            if len(frames) and frames[-1] >= budget:
                out[seed] = (frames, values, random)
    return out


def finals(args, arm: str, budget: int) -> dict:
    """{game: {seed: (eval/return at `budget` frames, random play's return or None)}} of the arm's records that
    reached it: compare.py's final return (interpolated between the evaluations around the budget)."""
    out = {}
    for game in args.games:
        for seed, (frames, values, random) in curves(args, arm, game, budget).items():
            out.setdefault(game, {})[seed] = (float(np.interp(budget, frames, values)), random)
    return out


def random_play(args) -> dict:
    """{game: random play's return}, the normaliser's zero (NORMALISER_ARMS)."""
    fixed = dataclasses.replace(args, seeds=NORMALISER_SEEDS)
    randoms = {
        game: [random for arm in NORMALISER_ARMS for _, _, random in curves(fixed, arm, game, 0).values()]
        for game in args.games
    }
    return {game: float(np.mean(r)) for game, r in randoms.items() if r}


def cpu_minutes(record: Path) -> float:
    """A recorded run's minutes on this CPU (one thread, another run beside it): its phases' seconds (time/*), or for
    a run that logs none (one agent, no BigAgent) the time its charts/SPS implies, process by process."""
    rows = [json.loads(line) for line in compare.metrics_text(record).splitlines() if line.strip()]
    parts = ("agents", "big_pond_fill", "big_agent", "eval")
    seconds = sum(row.get(f"time/{part}_seconds", 0.0) for row in rows for part in parts)
    rated = [(row["global_frames"], row["charts/SPS"]) for row in rows if row.get("charts/SPS")]
    if seconds == 0 and rated:  # charts/SPS: the frames since the process's start (one row's frames before its first)
        step = min(b - a for (a, _), (b, _) in zip(rated, rated[1:])) if len(rated) > 1 else rated[0][0]
        start, before = rated[0][0] - step, 0.0
        for frames, sps in rated:
            if (frames - start) / sps < before:  # time went back: a resumed process's own clock (a slower one is
                seconds, start = seconds + before, frames - step  # not told apart: its time is then overcounted)
            before = (frames - start) / sps
        seconds += before
    return seconds / 60


def ratio_interval(ours: np.ndarray, theirs: np.ndarray, draws: int = 10_000) -> str:
    """mean(ours) / mean(theirs), and its 95% percentile bootstrap interval: each side's seeds resampled on its own
    (the seeds are not paired), 10,000 draws from a fixed generator."""
    point = ours.mean() / theirs.mean()
    if min(len(ours), len(theirs)) < 2:
        return f"{point:.2f}"
    rng = np.random.default_rng(0)
    boot = rng.choice(ours, (draws, len(ours))).mean(1) / rng.choice(theirs, (draws, len(theirs))).mean(1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return f"{point:.2f} [{low:.2f}, {high:.2f}]"


def plot_per_game(args, arms, series, png_path: Path, xlabel: str, ylabel: str, ylim=None) -> None:
    """Per game a panel, per arm the mean over its recorded seeds of series(arm, game) = [(frames, values) a seed],
    over the points every seed reached."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.games), figsize=(4 * len(args.games), 3.6), squeeze=False)
    for ax, game in zip(axes[0], args.games):
        for i, arm in enumerate(arms):
            runs = series(arm, game)
            if runs:
                n = min(len(values) for _, values in runs)
                mean = np.mean([np.asarray(values[:n]) for _, values in runs], axis=0)
                ax.plot(
                    np.asarray(runs[0][0][:n]), mean, color=f"C{i}", marker="o", ms=2, label=f"{arm} (n={len(runs)})"
                )
        ax.set_title(game, fontsize="small")
        ax.set_xlabel(xlabel)
        ax.set_ylim(ylim)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small")
    axes[0, 0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    print(f"figure: {png_path}")
