"""Benchmark the PQN agents' acting+training loop of pqn_lake.py (phase steps 1-3), the Lake on and off, real Atari.

    python benchmarks/loop_bench.py                       # default sizes, a few minutes on a 2-core machine
    python benchmarks/loop_bench.py --num-envs 128 --num-minibatches 32 --updates 20 --rounds 5 --device cuda

A window is pqn_lake.py itself (the agents' part alone: --big-agent-schedule none), run by benchmarks/timed_run.py
for --warmup-updates + --updates agent updates, the last --updates timed: each update is every agent's rollout
(num_steps steps of its envs, ε-greedy inference, each step written into its Pond) and PQN update, and a full Pond
drains. Only the drain differs between the variants:

  Lake off        4 agents; a full Pond is just emptied (timed_run.py --no-lake: the baseline)
  Lake on         4 agents; a full Pond drains into a real Lake on disk (Lake.append + commit)
  1 agent         Lake on, one PQN agent with all 4 x num_envs envs in one vector env, num_agents x num_minibatches
                  minibatches: the same transitions, minibatch size and gradient steps as the 4 agents together
  Lake off (A/A)  with --control: a second, independent Lake off variant; its ratio to the first is the noise floor

The variants take turns, a window each per round, in an order rotated every round, so that the load of other
processes falls on all of them alike; --updates should be a multiple of pond_steps / num_steps, so that every window
holds as many Pond drains. Figures are medians over the rounds; a ratio is the median of the per-round ratios (pairs
measured close in time suffer less from drifting load than medians of each).

On a machine shared with other jobs the ratios move by several percent from round to round (see --control), more
than the 3% the Lake may cost. So the Lake's cost is also accounted for directly, which other jobs hardly skew: the
time the loop's thread spends in the drains (Lake.append + commit) and the CPU time of the Lake's writer thread
(from /proc), against the Lake-on loop's own time; their sum bounds what the Lake takes from the loop.
"""

import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import envs  # noqa: E402  (Atari's frame skip)


@dataclass
class Args:
    env_id: str = "Breakout-v5"
    """Atari game (envpool-style id, as pqn_lake.py)"""
    num_agents: int = 4
    """PQN agents of the multi-agent variants"""
    num_envs: int = 8
    """envs per agent (the single agent gets num_agents x num_envs)"""
    num_steps: int = 32
    """steps per env in each rollout"""
    update_epochs: int = 2
    """epochs over each rollout (pqn_lake.py's default)"""
    num_minibatches: int = 4
    """minibatches per epoch of each agent (the single agent gets num_agents x as many: the same minibatch size)"""
    pond_steps: int = 128
    """steps a Pond holds before it drains (pqn_lake.py's default)"""
    warmup_updates: int = 2
    """untimed updates first, in every window"""
    updates: int = 4
    """timed updates of each variant per round (a multiple of pond_steps / num_steps: one Pond drain per agent at
    the defaults)"""
    rounds: int = 5
    """rounds; the variants take turns within each"""
    device: str = "cpu"
    """torch device of the networks and Ponds (cpu, cuda)"""
    lake_dir: Optional[str] = None
    """parent of the runs' scratch folder, their Lakes in it (default: the system's temp dir; point it at the disk a
    run would use); removed at exit"""
    single_agent: bool = True
    """also measure one agent with all envs (Lake on)"""
    control: bool = False
    """also measure a second Lake off variant: the A/A ratio shows how far this machine's noise moves a ratio"""
    torch_threads: int = 1
    """torch intra-op threads (0: torch's default). 1 by default: on a machine shared with other jobs OpenMP's
    spinning threads collapse (10x slower updates here at 2 threads under load), which would drown the Lake's cost"""
    seed: int = 1


def window(bench: Args, num_agents: int, lake: bool, folder: Path) -> dict:
    """One window of a variant: steps/s, CPU seconds per update, the drains' seconds and the writer's CPU seconds
    over its timed updates, and its Lake's bytes and transitions."""
    folder.mkdir(parents=True)
    scale = bench.num_agents // num_agents  # the single agent: all envs, as many minibatches of the same size
    updates = bench.warmup_updates + bench.updates
    command = [sys.executable, "benchmarks/timed_run.py", str(folder / "timed.json"), *([] if lake else ["--no-lake"])]
    command += ["pqn_lake.py", "--env-id", bench.env_id, "--seed", str(bench.seed), "--num-agents", str(num_agents)]
    command += ["--num-envs", str(bench.num_envs * scale), "--num-steps", str(bench.num_steps)]
    command += ["--update-epochs", str(bench.update_epochs), "--num-minibatches", str(bench.num_minibatches * scale)]
    command += ["--pond-steps", str(bench.pond_steps)]
    command += ["--big-agent-schedule", "none", "--agent-updates-per-phase", str(updates + 1)]
    command += ["--stop-after-updates", str(updates), "--runs-dir", str(folder / "runs")]
    command += ["--eval-episodes", "1"]  # (random play at the start is not timed: one game, not ten)
    command += [] if bench.device == "cuda" else ["--no-cuda"]
    threads = {"OMP_NUM_THREADS": str(bench.torch_threads)} if bench.torch_threads else {}
    done = subprocess.run(
        command, cwd=ROOT, env={**os.environ, **threads, "WANDB_MODE": "disabled"}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"a window failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    snapshots = json.loads((folder / "timed.json").read_text())["updates"]
    first, last = snapshots[bench.warmup_updates - 1], snapshots[updates - 1]
    took = {k: last[k] - first[k] for k in first}
    (run_dir,) = (folder / "runs").iterdir()
    lake_files = [p for p in (run_dir / "lake").rglob("*") if p.is_file()]
    steps = bench.updates * bench.num_steps * bench.num_envs * bench.num_agents
    return {
        "steps/s": steps / took["t"],
        "seconds": took["t"],
        "cpu": took["cpu"],
        "drains": took["lake"],
        "writer_cpu": took["writer_cpu"],
        "lake_bytes": sum(p.stat().st_blocks * 512 for p in lake_files),
    }


def table(rows: list) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        lines.append(
            "| " + " | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))) + " |"
        )
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 1) + ("-" if j == 0 else ":") for j, w in enumerate(widths)) + "|")
    return "\n".join(lines)


if __name__ == "__main__":
    bench = tyro.cli(Args)
    drain_every = bench.pond_steps // bench.num_steps
    assert bench.pond_steps % bench.num_steps == 0, "--pond-steps must be a multiple of --num-steps"
    if bench.updates % drain_every:
        print(
            f"warning: --updates {bench.updates} is not a multiple of pond_steps / num_steps = {drain_every}: "
            "the windows hold different numbers of Pond drains",
            flush=True,
        )
    print("$ python " + shlex.join(sys.argv))
    print(
        f"machine: {os.cpu_count()} CPUs, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB "
        f"RAM, Python {platform.python_version()}; device {bench.device}, {bench.torch_threads or 'default'} torch "
        f"threads; load average {os.getloadavg()[0]:.2f} (other processes skew every timing below)",
        flush=True,
    )
    A = bench.num_agents
    variants = [("Lake off", A, False), ("Lake on", A, True)]
    variants += [("1 agent", 1, True)] if bench.single_agent else []
    variants += [("Lake off (A/A)", A, False)] if bench.control else []
    results = {name: [] for name, *_ in variants}
    with tempfile.TemporaryDirectory(prefix="loop_bench_", dir=bench.lake_dir) as scratch:
        for r in range(bench.rounds):
            for name, agents, lake in variants[r % len(variants) :] + variants[: r % len(variants)]:
                results[name].append(window(bench, agents, lake, Path(scratch) / f"{r}_{name.replace(' ', '_')}"))
            print(
                f"round {r + 1}/{bench.rounds}: "
                + ", ".join(f"{name} {results[name][-1]['steps/s']:,.0f}" for name, *_ in variants)
                + " steps/s",
                flush=True,
            )

    # ------------------------------------------------------------------ the table
    steps_per_s = {name: np.array([w["steps/s"] for w in windows]) for name, windows in results.items()}
    describe = {
        "Lake off": f"{A} agents x {bench.num_envs} envs, Ponds emptied (baseline)",
        "Lake on": f"{A} agents x {bench.num_envs} envs, Ponds drain into the Lake",
        "1 agent": f"1 agent x {A * bench.num_envs} envs, Lake on, {A * bench.num_minibatches} minibatches",
        "Lake off (A/A)": f"{A} agents x {bench.num_envs} envs, Ponds emptied (control)",
    }
    frame_skip = envs.FRAME_SKIP if envs.atari_game(bench.env_id) else 1
    rows = [["variant", "steps/s", "frames/s", "s/update", "CPU s/update", "vs Lake off", "rounds, steps/s"]]
    for name, *_ in variants:
        med = float(np.median(steps_per_s[name]))
        cpu = sum(w["cpu"] for w in results[name]) / (bench.updates * bench.rounds)
        rows.append(
            [
                describe[name],
                f"{med:,.0f}",
                f"{med * frame_skip:,.0f}",
                f"{bench.num_steps * bench.num_envs * A / med:.2f}",
                f"{cpu:.2f}",
                f"{np.median(steps_per_s[name] / steps_per_s['Lake off']):.3f}",
                " ".join(f"{x:,.0f}" for x in steps_per_s[name]),
            ]
        )
    print()
    print(table(rows))

    def paired(a: str, b: str) -> str:
        ratios = steps_per_s[a] / steps_per_s[b]
        return f"{np.median(ratios):.3f}  [{' '.join(f'{x:.3f}' for x in ratios)}]"

    print(f"\nratios of steps/s (median of the {bench.rounds} per-round ratios; per round in brackets):")
    print(f"  Lake on / Lake off (target >= 0.97): {paired('Lake on', 'Lake off')}")
    if bench.control:
        print(f"  Lake off (A/A) / Lake off, the noise floor (ideally 1): {paired('Lake off (A/A)', 'Lake off')}")
    if bench.single_agent:
        print(
            f"  {A} agents / 1 agent with the same {A * bench.num_envs} envs (both Lake on): "
            + paired("Lake on", "1 agent")
        )
    on, timed = results["Lake on"], bench.updates * bench.rounds
    seconds, drains, writer = (sum(w[k] for w in on) for k in ("seconds", "drains", "writer_cpu"))
    share = (drains + writer) / seconds
    print(
        f"\nthe Lake's cost, accounted directly over the Lake on variant's {timed} timed updates ({seconds:.0f}s of "
        f"loop):\n  loop's thread in the drains (Lake.append + commit): {drains / timed * 1e3:.1f} ms/update\n"
        f"  Lake writer thread, CPU time: {writer / timed * 1e3:.1f} ms/update\n"
        f"  {'PASS' if share <= 0.03 else 'FAIL'}  together {share:.2%} of the loop's time (target <= 3%; an upper "
        "bound: the writer's CPU time counts in full even where it used an idle core)"
    )
    print(
        f"\none update = {bench.num_steps} steps of every env, then {bench.update_epochs} epochs x minibatches of "
        f"{bench.num_envs * bench.num_steps // bench.num_minibatches} per agent; Pond {bench.pond_steps} steps (a "
        f"drain every {drain_every} updates); {bench.updates} timed updates per variant and window after "
        f"{bench.warmup_updates} warm-up updates; frames/s = steps/s x frame skip {frame_skip}; a Lake on window's "
        f"Lake: {on[-1]['lake_bytes'] / 1e6:,.1f} MB on disk (removed)"
    )
