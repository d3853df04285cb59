"""Steps per second of pqn_lake.py's agents on MinAtar, and where the time goes (env stepping, inference, training,
Lake), for one PQN agent and for the mixture's four, at the PQN paper's MinAtar settings (pqn_lake's MinAtar
defaults: 128 envs x 32 steps an update, 2 epochs x 32 minibatches of 128).

    python benchmarks/minatar_bench.py                                  # Breakout, a few minutes on 2 cores
    python benchmarks/minatar_bench.py --env-id MinAtar/SpaceInvaders-v1 --rounds 9 --threads 2

A window is pqn_lake.py itself (the agents' part alone: --big-agent-schedule none), run by benchmarks/timed_run.py for
--warmup + --updates agent updates, the last --updates timed; the variants take turns for --rounds windows, in an order
rotated every round, so that other processes' load falls on all of them alike; a figure is the median over the rounds, a
ratio the median of the per-round ratios. The split, as shares of an agent's time (its thread's; serial: the wall's):
"env" the wait for its envs' step, "training" its gradient steps, "inference" the rest of its update (forward passes,
ε-greedy, Pond writes, Q(λ) targets); "Lake" the drains' share of the wall. Each baseline is the same agents without
threads (timed_run.py --serial: one after another, the same random numbers, so the same results).
"""

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Args:
    env_id: str = "MinAtar/Breakout-v1"
    """a MinAtar id"""
    updates: int = 5
    """timed updates per variant and round (one update: --num-envs x 32 steps per agent)"""
    rounds: int = 5
    """rounds: the variants take turns, so that the machine's drift falls on all of them alike"""
    warmup: int = 2
    """untimed updates first, in every window"""
    threads: tuple[int, ...] = (1, 2)
    """torch intra-op threads to measure with (this machine has 2 cores)"""
    num_envs: int = 128
    """envs per agent (PQN's MinAtar setting; fewer for a quick check that it runs)"""


def window(bench: Args, num_agents: int, serial: bool, threads: int, folder: Path) -> dict:
    """One window of a variant: steps/s over its timed updates and the split (see above)."""
    folder.mkdir(parents=True)
    out, runs = folder / "timed.json", folder / "runs"
    command = [sys.executable, "benchmarks/timed_run.py", str(out), *(["--serial"] if serial else []), "pqn_lake.py"]
    command += ["--env-id", bench.env_id, "--num-agents", str(num_agents), "--big-agent-schedule", "none"]
    command += ["--num-envs", str(bench.num_envs), "--agent-updates-per-phase", str(bench.warmup + bench.updates + 1)]
    command += ["--stop-after-updates", str(bench.warmup + bench.updates), "--runs-dir", str(runs), "--no-cuda"]
    command += ["--eval-episodes", "1"]  # (random play at the start is not timed: one game, not ten)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "WANDB_MODE": "disabled"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"a window failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    snapshots = json.loads(out.read_text())["updates"]
    first, last = snapshots[bench.warmup - 1], snapshots[bench.warmup + bench.updates - 1]
    took = {k: last[k] - first[k] for k in first}
    thread = took["t"] if serial else took["agents"]
    shares = {"env": took["env"] / thread, "training": took["training"] / thread, "Lake": took["lake"] / took["t"]}
    shares["inference"] = 1 - shares["env"] - shares["training"]
    (run_dir,) = runs.iterdir()
    steps = bench.updates * num_agents * bench.num_envs * json.loads((run_dir / "config.json").read_text())["num_steps"]
    return {"steps/s": steps / took["t"], **shares}


def main(bench: Args) -> None:
    # (each pair: the agents without threads, its baseline, then pqn_lake's agents in threads)
    variants = [
        ("1 agent, serial (baseline)", 1, True),
        ("1 agent (pqn_lake.py's loop)", 1, False),
        ("4 agents, serial (baseline)", 4, True),
        ("4 agents, a thread each (the mixture)", 4, False),
    ]
    print(
        "| threads | variant | env steps/s (median) | vs its baseline (median of paired rounds) | env | inference | "
        "training | Lake |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads in bench.threads:
        results = {name: [] for name, *_ in variants}
        with tempfile.TemporaryDirectory() as folder:
            for r in range(bench.rounds):  # the variants take turns, in an order rotated every round
                for name, agents, serial in variants[r % len(variants) :] + variants[: r % len(variants)]:
                    results[name].append(
                        window(bench, agents, serial, threads, Path(folder) / f"{r}_{agents}_{serial}")
                    )
        for i, (name, *_) in enumerate(variants):
            rounds, base = results[name], results[variants[i - i % 2][0]]
            ratio = np.median([r["steps/s"] / b["steps/s"] for r, b in zip(rounds, base)])
            share = {k: np.median([r[k] for r in rounds]) for k in ("env", "inference", "training", "Lake")}
            print(
                f"| {threads} | {name} | {np.median([r['steps/s'] for r in rounds]):,.0f} | {ratio:.2f}x | "
                + " | ".join(f"{share[k]:.0%}" for k in share)
                + " |",
                flush=True,
            )
    print(
        f"\n{bench.env_id}, {bench.num_envs} envs an agent: {bench.rounds} rounds of {bench.updates} timed updates per "
        f"variant (after {bench.warmup} untimed in each window)"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
