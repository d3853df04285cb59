"""Does each learner learn MinAtar on this CPU? One PQN agent and the DQN baseline on four MinAtar games.

    python benchmarks/minatar_learning.py                      # every run (resumable, finished runs skipped), then the table
    python benchmarks/minatar_learning.py --table-only         # the table of the runs already made

PQN: `pqn_lake.py --num-agents 1 --big-agent-schedule none` at its MinAtar defaults (the PQN paper's MinAtar
configuration): the mixture's PQN agent given all the frames, never cloned (its phases are only checkpoints).
DQN: `dqn_single_baseline.py` at its MinAtar defaults (the MinAtar paper's DQN, its 32 samples per transition in
batches of 128 every 4 transitions). Runs go --parallel at a time with one thread each (OMP_NUM_THREADS=1: two
runs side by side on two cores do not spin); a run cut by the end of a session is resumed from its last checkpoint
(--resume) by the next call, a finished one is skipped, so the study can span sessions.

The table: per game, the final evaluation (10 games at ε 0.05, the last of the run) of each seed, their mean, random
play under the same protocol (ε = 1, logged by each run as eval/random_return) and the MinAtar paper's DQN at 5M
frames as read from its learning curves (Young & Tian 2019, Figure 2; those are training returns, 30 seeds).
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
sys.path.insert(0, str(ROOT))  # lake.py, for the Lakes' bytes per transition
# The MinAtar paper's DQN (with experience replay and a target network) at 5M frames, read from its Figure 2.
PAPER_DQN = {"Asterix": 17, "Breakout": 10, "Freeway": 50, "SpaceInvaders": 43, "Seaquest": 20}


@dataclasses.dataclass
class Args:
    runs_dir: str = "runs/minatar_learning"
    """where the runs go (one folder each, named <game>__<script>__<seed>)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    """MinAtar games (MinAtar/<game>-v1, the minimal action sets)"""
    pqn_seeds: tuple[int, ...] = (1, 2)
    """seeds of the PQN agent"""
    dqn_seeds: tuple[int, ...] = (1,)
    """seeds of the DQN baseline"""
    pqn_frames: int = 5_000_000
    """frames of a PQN run (the MinAtar paper's budget)"""
    dqn_frames: int = 2_000_000
    """frames of a DQN run: 32 samples per transition cost ~1.7 ms a frame on one core here, so 5M frames would be
    ~2.5 hours a run; the MinAtar paper's DQN is near its plateau by 2M frames on these four games"""
    scripts: tuple[Literal["pqn_lake.py", "dqn_single_baseline.py"], ...] = ("pqn_lake.py", "dqn_single_baseline.py")
    """which scripts to run (the table reads every run in --runs-dir)"""
    parallel: int = 2
    """runs at once, one thread each"""
    table_only: bool = False
    """print the table of the runs in --runs-dir without running anything"""


def planned(args: Args) -> list:
    """(run folder name, total frames, command) of every run of the study."""
    runs = []
    for script in args.scripts:
        pqn = script == "pqn_lake.py"
        for seed in args.pqn_seeds if pqn else args.dqn_seeds:
            for game in args.games:
                name = f"{game}__{Path(script).stem}__{seed}"
                frames = args.pqn_frames if pqn else args.dqn_frames
                command = [script, "--env-id", f"MinAtar/{game}-v1", "--seed", str(seed), "--total-frames", str(frames),
                           "--runs-dir", args.runs_dir, "--exp-name", name]
                if pqn:
                    command += ["--num-agents", "1", "--big-agent-schedule", "none"]
                runs.append((name, frames, command))
    return runs


def run_folder(args: Args, name: str):
    """The run folder of a study run (the scripts name it <env>__<exp_name>__<seed>__<time>), or None."""
    found = sorted(Path(args.runs_dir).glob(f"MinAtar_*__{name}__*"))
    return found[-1] if found else None


def progress(run_dir) -> int:
    """Frames of the run's latest checkpoint (0: none)."""
    import torch

    if run_dir is None:
        return 0
    checkpoints = [p for p in (run_dir / "checkpoints").glob("*.pt") if p.name != "best.pt"]
    return max((torch.load(p, map_location="cpu", weights_only=False)["global_frames"] for p in checkpoints), default=0)


def run_all(args: Args) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    queue, running = [], []
    for name, frames, command in planned(args):
        run_dir = run_folder(args, name)
        done = progress(run_dir)
        if done >= frames:
            print(f"{name}: finished ({done:,} frames), skipped", flush=True)
            continue
        if done > 0:
            command = [command[0], "--resume", str(run_dir)]
        elif run_dir is not None:  # started but never checkpointed: start again
            subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        queue.append((name, command))
    start = time.time()
    while queue or running:
        while queue and len(running) < args.parallel:
            name, command = queue.pop(0)
            print(f"{time.strftime('%H:%M:%S')} start {name}: python {' '.join(command)}", flush=True)
            log = open(Path(args.runs_dir) / f"{name}.log", "a")
            running.append((name, subprocess.Popen([sys.executable, *command], cwd=ROOT, env=env, stdout=log,
                                                   stderr=subprocess.STDOUT)))
        time.sleep(5)
        for name, proc in [r for r in running if r[1].poll() is not None]:
            running.remove((name, proc))
            print(f"{time.strftime('%H:%M:%S')} {name}: exit code {proc.returncode}", flush=True)
    print(f"all runs done in {(time.time() - start) / 60:.1f} min", flush=True)


def table(args: Args) -> str:
    from lake import Lake

    lines = ["| game | script | seeds | final eval/return per seed | mean | random play | MinAtar paper's DQN at 5M | "
             "frames | SPS (mean) | Lake, B/transition |", "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for game in args.games:
        for script in ("pqn_lake.py", "dqn_single_baseline.py"):
            finals, randoms, frames, sps, lake_bytes = [], [], [], [], []
            for seed in args.pqn_seeds if script == "pqn_lake.py" else args.dqn_seeds:
                run_dir = run_folder(args, f"{game}__{Path(script).stem}__{seed}")
                if run_dir is None or not (run_dir / "metrics.jsonl").exists():
                    continue
                rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
                evals = [r for r in rows if "eval/return" in r]
                if not evals:
                    continue
                finals.append(evals[-1]["eval/return"])
                frames.append(evals[-1]["global_frames"])
                randoms += [r["eval/random_return"] for r in rows if "eval/random_return" in r]
                sps += [r["charts/SPS"] for r in rows if "charts/SPS" in r][-1:]
                if (run_dir / "lake").is_dir():  # the PQN agent pours every transition into its Lake
                    with Lake(run_dir / "lake", mode="r") as lake:
                        stats = lake.stats()
                    lake_bytes.append(stats["disk_bytes"] / max(1, stats["transitions"]))
            if not finals:
                continue
            lines.append(f"| {game} | {Path(script).stem} | {len(finals)} | {', '.join(f'{f:.1f}' for f in finals)} | "
                         f"{np.mean(finals):.1f} | {np.mean(randoms):.2f} | {PAPER_DQN[game]} | "
                         f"{', '.join(f'{f:,}' for f in frames)} | {np.mean(sps):,.0f} | "
                         + (f"{np.mean(lake_bytes):.0f} |" if lake_bytes else "(no Lake) |"))
    return "\n".join(lines)


def main(args: Args) -> None:
    args.runs_dir = str(Path(args.runs_dir).resolve())  # the runs start in the repository's root
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        run_all(args)
    print(table(args))


if __name__ == "__main__":
    main(tyro.cli(Args))
