"""Benchmark the PQN agents' acting+training loop of pqn_lake.py (phase steps 1-3), the Lake on and off, real Atari.

    python benchmarks/loop_bench.py                       # default sizes, a few minutes on a 2-core machine
    python benchmarks/loop_bench.py --num-envs 128 --num-minibatches 32 --updates 20 --rounds 5 --device cuda

One update of the loop is what pqn_lake.py does between two log lines of phase 1: `rollout` (num_steps steps of
every agent's envs, ε-greedy inference, each step written into the agent's Pond), then `pqn_update` of each agent
(Q(λ) targets, update_epochs x num_minibatches gradient steps), and a full Pond drains. The functions are
pqn_lake's own; only the drain differs between the variants:

  Lake off        4 agents; a full Pond is just emptied (the baseline)
  Lake on         4 agents; a full Pond drains into a real Lake on disk (`drain_pond`: Lake.append + commit)
  1 agent         Lake on, one PQN agent with all 4 x num_envs envs in one vector env, num_agents x num_minibatches
                  minibatches: the same transitions, minibatch size and gradient steps as the 4 agents together

  Lake off (A/A)  with --control: a second, independent Lake off variant; its ratio to the first is the noise floor

Each variant keeps its own agents, envs (reset once, then stepped on) and Pond; the variants take turns, a window of
--updates timed updates each per round, in an order rotated every round, so that the load of other processes falls
on all of them alike. --updates should be a multiple of pond_steps / num_steps, so that every window holds as many
Pond drains; a Lake window ends with `lake.commit(wait=True)` inside the timing, so that no variant is billed for
the Lake writer's leftovers of another. Figures are medians over the rounds; a ratio is the median of the
per-round ratios (pairs measured close in time suffer less from drifting load than medians of each).

On a machine shared with other jobs the ratios move by several percent from round to round (see --control), more
than the 3% the Lake may cost. So the Lake's cost is also accounted for directly, which other jobs hardly skew: the
time the training thread spends in `drain_pond` (Lake.append + commit) and the CPU time of the Lake's writer thread
(from /proc), against the Lake-on loop's own time; their sum bounds what the Lake takes from the loop.
"""

import os
import platform
import shlex
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # pqn_lake.py and lake.py live at the root
import pqn_lake
import speed
from lake import Lake


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
    """untimed updates of each variant before the first round"""
    updates: int = 4
    """timed updates of each variant per round (a multiple of pond_steps / num_steps: one Pond drain per agent at
    the defaults); short windows and many rounds pair the variants' figures closely in time"""
    rounds: int = 5
    """rounds; the variants take turns within each"""
    device: str = "cpu"
    """torch device of the networks and Ponds (cpu, cuda)"""
    lake_dir: Optional[str] = None
    """parent of the Lake's scratch folder (default: the system's temp dir; point it at the disk a run would use);
    the folder is removed at exit"""
    single_agent: bool = True
    """also measure one agent with all envs (Lake on)"""
    control: bool = False
    """also measure a second Lake off variant: the A/A ratio shows how far this machine's noise moves a ratio"""
    env_threads: int = 0
    """ale-py threads per vector env (0: one per core)"""
    torch_threads: int = 1
    """torch intra-op threads (0: torch's default). 1 by default: on a machine shared with other jobs OpenMP's
    spinning threads collapse (10x slower updates here at 2 threads under load), which would drown the Lake's cost"""
    seed: int = 1


@dataclass
class Variant:
    name: str
    agents: list
    args: pqn_lake.Args
    lake: Optional[Lake]
    steps_per_s: list = field(default_factory=list)  # one figure per round
    seconds: float = 0.0  # totals over the timed windows
    cpu_seconds: float = 0.0  # the process's CPU time (all threads: trainer, env threads, Lake writer)
    drain_seconds: float = 0.0  # the training thread's time in drain_pond
    writer_cpu_seconds: float = 0.0
    updates: int = 0


def make_variant(name: str, bench: Args, num_agents: int, lake: Optional[Lake], device: torch.device) -> Variant:
    """Agents as pqn_lake.py makes them (pqn_lake.make_agent), envs reset as at a phase start."""
    scale = bench.num_agents // num_agents  # the single agent: all envs, as many minibatches of the same size
    args = pqn_lake.Args(
        env_id=bench.env_id,
        seed=bench.seed,
        num_agents=num_agents,
        num_envs=bench.num_envs * scale,
        num_steps=bench.num_steps,
        update_epochs=bench.update_epochs,
        num_minibatches=bench.num_minibatches * scale,
        pond_steps=bench.pond_steps,
        env_threads=bench.env_threads,
        cuda=device.type == "cuda",
    )
    agents = []
    for k in range(num_agents):
        agent = pqn_lake.make_agent(args, f"{name.replace(' ', '_')}_agent{k}", device)  # its own Lake group
        pqn_lake.reset_envs(agent, pqn_lake.derive_seed(args, pqn_lake.ENV_RESET, k, 1), device)
        agents.append(agent)
    return Variant(name, agents, args, lake)


def one_update(v: Variant, frame_skip: int, device: torch.device) -> None:
    """One update of every agent, as in pqn_lake.py's phase loop (without its metrics line)."""
    K, A, args = len(v.agents), v.agents[0].envs.single_action_space.n, v.args
    drawn = speed.draw_in_serial_order(K, args.num_steps, args.num_envs, A, args.update_epochs, device)
    speed.in_agent_threads(pqn_lake.pqn_update, v.agents, drawn, [args] * K, [device] * K)  # as pqn_lake's loop
    for agent in v.agents:
        if agent.pond.pos == v.args.pond_steps:
            if v.lake is not None:
                t0 = time.perf_counter()
                pqn_lake.drain_pond(agent.pond, v.lake, agent.name)
                v.drain_seconds += time.perf_counter() - t0
            else:
                agent.pond.pos = 0  # Lake off: the Pond fills (the same writes) and is just emptied


def writer_cpu_seconds() -> float:
    """CPU seconds (user + system) the Lake's writer thread has used so far (Linux /proc; 0 elsewhere)."""
    for thread in threading.enumerate():
        if thread.name == "lake-writer" and thread.native_id is not None:
            try:
                with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after the name: state is field 3 of proc(5)
            except OSError:
                return 0.0
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)
    return 0.0


def timed_window(v: Variant, updates: int, frame_skip: int, device: torch.device) -> None:
    """`updates` updates, the Lake's commit of them included: appends steps/s and adds to the totals."""
    writer = writer_cpu_seconds()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(updates):
        one_update(v, frame_skip, device)
    if v.lake is not None:
        v.lake.commit(wait=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    v.cpu_seconds += time.process_time() - cpu0
    if v.lake is not None:  # the writer is idle between windows: each ends with commit(wait=True)
        v.writer_cpu_seconds += writer_cpu_seconds() - writer
    v.seconds += seconds
    v.updates += updates
    v.steps_per_s.append(updates * v.args.num_steps * v.args.num_envs * len(v.agents) / seconds)


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
    if bench.torch_threads:
        torch.set_num_threads(bench.torch_threads)
    start = time.time()
    device = torch.device(bench.device)
    import ale_py
    import h5py

    print("$ python " + shlex.join(sys.argv))
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(
        f"machine: {os.cpu_count()} CPUs, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} "
        "GiB RAM, "
        f"Python {platform.python_version()}, torch {torch.__version__} ({torch.get_num_threads()} intra-op threads), "
        f"ale-py {ale_py.__version__}, h5py {h5py.__version__}; device {device}{gpu}; load average "
        f"{os.getloadavg()[0]:.2f} (other processes skew every timing below)",
        flush=True,
    )
    torch.manual_seed(bench.seed)
    frame_skip = pqn_lake.frames_per_step(pqn_lake.Args(env_id=bench.env_id))

    scratch = Path(tempfile.mkdtemp(prefix="loop_bench_", dir=bench.lake_dir))
    lake = None
    try:
        probe = pqn_lake.Args(env_id=bench.env_id)
        lake = Lake(
            scratch / "lake",
            frame_shape=(probe.frame_height, probe.frame_width),
            stack_size=probe.stack_size,
            env_id=bench.env_id,
        )
        A = bench.num_agents
        variants = [make_variant("Lake off", bench, A, None, device), make_variant("Lake on", bench, A, lake, device)]
        if bench.single_agent:
            variants.append(make_variant("1 agent", bench, 1, lake, device))
        if bench.control:
            variants.append(make_variant("Lake off (A/A)", bench, A, None, device))
        for v in variants:
            for _ in range(bench.warmup_updates):
                one_update(v, frame_skip, device)
            if v.lake is not None:
                v.lake.commit(wait=True)
            v.drain_seconds = 0.0
        print(
            f"variants built and warmed up ({bench.warmup_updates} updates each) in {time.time() - start:.0f}s",
            flush=True,
        )

        for r in range(bench.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                timed_window(v, bench.updates, frame_skip, device)
            print(
                f"round {r + 1}/{bench.rounds}: "
                + ", ".join(f"{v.name} {v.steps_per_s[-1]:,.0f}" for v in variants)
                + " steps/s",
                flush=True,
            )
        lake_bytes = sum(p.stat().st_blocks * 512 for p in (scratch / "lake").rglob("*") if p.is_file())
        lake_transitions = lake.num_transitions
    finally:
        if lake is not None:
            lake.close()
        shutil.rmtree(scratch, ignore_errors=True)

    # ------------------------------------------------------------------ the table
    base = variants[0]
    by_name = {v.name: v for v in variants}
    describe = {
        "Lake off": f"{A} agents x {bench.num_envs} envs, Ponds emptied (baseline)",
        "Lake on": f"{A} agents x {bench.num_envs} envs, Ponds drain into the Lake",
        "1 agent": f"1 agent x {A * bench.num_envs} envs, Lake on, {A * bench.num_minibatches} minibatches",
        "Lake off (A/A)": f"{A} agents x {bench.num_envs} envs, Ponds emptied (control)",
    }
    rows = [["variant", "steps/s", "frames/s", "s/update", "CPU s/update", f"vs {base.name}", "rounds, steps/s"]]
    for v in variants:
        med = float(np.median(v.steps_per_s))
        per_update = v.args.num_steps * v.args.num_envs * len(v.agents) / med
        ratio = float(np.median(np.array(v.steps_per_s) / np.array(base.steps_per_s)))
        rows.append(
            [
                describe[v.name],
                f"{med:,.0f}",
                f"{med * frame_skip:,.0f}",
                f"{per_update:.2f}",
                f"{v.cpu_seconds / v.updates:.2f}",
                f"{ratio:.3f}",
                " ".join(f"{x:,.0f}" for x in v.steps_per_s),
            ]
        )
    print()
    print(table(rows))

    def paired(a: str, b: str) -> str:
        ratios = np.array(by_name[a].steps_per_s) / np.array(by_name[b].steps_per_s)
        return f"{np.median(ratios):.3f}  [{' '.join(f'{x:.3f}' for x in ratios)}]"

    print(f"\nratios of steps/s (median of the {bench.rounds} per-round ratios; per round in brackets):")
    print(f"  Lake on / Lake off (target >= 0.97): {paired('Lake on', 'Lake off')}")
    if "Lake off (A/A)" in by_name:
        print(f"  Lake off (A/A) / Lake off, the noise floor (ideally 1): {paired('Lake off (A/A)', 'Lake off')}")
    if "1 agent" in by_name:
        print(
            f"  {A} agents / 1 agent with the same {A * bench.num_envs} envs (both Lake on): "
            f"{paired('Lake on', '1 agent')}"
        )

    on = by_name["Lake on"]
    share = (on.drain_seconds + on.writer_cpu_seconds) / on.seconds
    print(
        f"\nthe Lake's cost, accounted directly over the Lake on variant's {on.updates} timed updates "
        f"({on.seconds:.0f}s of loop):\n"
        f"  training thread in drain_pond (Lake.append + commit): {on.drain_seconds / on.updates * 1e3:.1f} ms/update\n"
        f"  Lake writer thread, CPU time: {on.writer_cpu_seconds / on.updates * 1e3:.1f} ms/update\n"
        f"  {'PASS' if share <= 0.03 else 'FAIL'}  together {share:.2%} of the loop's time (target <= 3%; an upper "
        "bound: "
        f"the writer's CPU time counts in full even where it used an idle core)"
    )
    print(
        f"\none update = {bench.num_steps} steps of every env, then {bench.update_epochs} epochs x minibatches of "
        f"{bench.num_envs * bench.num_steps // bench.num_minibatches} per agent; Pond {bench.pond_steps} steps (a "
        "drain "
        f"every {drain_every} updates); {bench.updates} timed updates per variant and round after "
        f"{bench.warmup_updates} "
        f"warm-up updates; frames/s = steps/s x frame skip {frame_skip}."
    )
    print(f"the Lake took {lake_transitions:,} transitions, {lake_bytes / 1e6:,.0f} MB on disk, in {scratch} (removed)")
    print(f"\nwall time {time.time() - start:.0f}s; load average {os.getloadavg()[0]:.2f} at the end")
