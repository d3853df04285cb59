"""Live mode on one device: what would overlapping the BigAgent's updates with the agents' loop gain?

    python benchmarks/overlap_bench.py                          # MinAtar Breakout on the CPU, a few minutes
    python benchmarks/overlap_bench.py --device cuda            # the same on a GPU

In `pqn_lake_live.py` the BigAgent's updates run between the agents' (one device, one Python
thread): after each agent update (rollout + pqn_update of every agent) it makes the updates that --big-replay-ratio
owes for that update's transitions, then the agents go on. This bench times that loop with pqn_lake's own functions,
and the same loop with the BigAgent's updates moved to a second Python thread (on a CUDA stream of its own on a GPU),
where they run while the agents make their next update:

  serial      pqn_lake_live's loop: agents' update u, then the BigAgent's updates for u (the baseline)
  overlapped  the BigAgent's updates for u in a worker thread while the agents make update u + 1

The serial variant also times its two parts apart (synchronising the device at their ends), which gives the best any
overlap can do: max(agents, BigAgent) a round instead of their sum.

What this measures is time only. The overlapped loop is not a correct learner: its worker reads the Ponds' rows while
the next rollout writes them (a ring that wraps overwrites rows of the view it samples; the agents' current
observations it reads from copies of its own, so no freed memory is read). Building it for real needs double-buffered
Ponds (the rollout writes one buffer while the BigAgent reads the
other), a CUDA stream for the BigAgent with an event per hand-over, and the BigAgent's random stream kept its own.

The BigPond here is the agents' Ponds alone (the recency window, as in a live run's first phase; a uniform draw from
the Lake
adds one gather per update from a device tensor, the same kind of work). The Ponds are emptied when full, not drained
into a Lake (benchmarks/loop_bench.py measures the Lake's cost), in both variants alike. Windows of --updates agent
updates alternate between the variants, in a rotated order each round; figures are medians over --rounds.
"""

import dataclasses
import os
import platform
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import numpy as np
import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # pqn_lake.py and lake.py live at the root
import pqn_lake
import speed
import pqn_lake_live
from loop_bench import table  # the same markdown table as the Lake's loop bench


@dataclass
class Args:
    env_id: str = "MinAtar/Breakout-v1"
    """game (pqn_lake.py's ids); every other setting is pqn_lake_live.py's default for it"""
    device: str = "cpu"
    """torch device of the networks and Ponds (cpu, cuda)"""
    warmup_updates: int = 4
    """untimed agent updates of each variant before the first round (the Ponds fill, kernels compile)"""
    updates: int = 4
    """timed agent updates of each variant per round (each followed by the BigAgent's owed updates)"""
    rounds: int = 5
    """rounds; the variants take turns within each"""
    torch_threads: int = 1
    """torch intra-op threads (0: torch's default). 1: the two threads of the overlapped variant then use one core
    each, as two runs side by side do in the studies"""
    seed: int = 1
    num_envs: Optional[int] = None
    """envs per agent (default: pqn_lake_live.py's)"""


@dataclass
class Variant:
    name: str
    agents: list
    big_agent: pqn_lake.BigAgent
    generator: torch.Generator
    rows_written: int = 0
    steps_per_s: list = field(default_factory=list)  # one figure per round
    agents_seconds: float = 0.0  # serial only: the agents' part and the BigAgent's part, each synchronised
    big_seconds: float = 0.0
    updates: int = 0
    big_updates: int = 0
    worker: Optional[threading.Thread] = None


def make_variant(name: str, args: pqn_lake.Args, device: torch.device) -> Variant:
    agents = []
    for k in range(args.num_agents):
        agent = pqn_lake.make_agent(args, f"agent{k}", device)
        pqn_lake.reset_envs(agent, pqn_lake.derive_seed(args, pqn_lake.ENV_RESET, k, 1), device)
        agents.append(agent)
    big_agent = pqn_lake.make_big_agent(args, agents[0].envs.single_action_space.n, device)
    return Variant(name, agents, big_agent, torch.Generator(device).manual_seed(args.seed))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def agents_update(v: Variant, args: pqn_lake.Args, frame_skip: int, device: torch.device) -> None:
    """One agent update, as pqn_lake.py's phase loop makes it (a full Pond is emptied instead of drained)."""
    K, A = len(v.agents), v.agents[0].envs.single_action_space.n
    drawn = speed.draw_in_serial_order(K, args.num_steps, args.num_envs, A, args.update_epochs, device)
    speed.in_agent_threads(pqn_lake.pqn_update, v.agents, drawn, [args] * K, [device] * K)  # as pqn_lake's loop
    for agent in v.agents:
        if agent.pond.pos == args.pond_steps:
            agent.pond.pos = 0
    v.rows_written += args.num_steps


def big_agent_updates(v: Variant, view: pqn_lake_live.FreshView, owed: int, args: pqn_lake.Args) -> None:
    """The BigAgent's updates owed for one agent update, as pqn_lake_live.py's loop makes them."""
    for _ in range(owed):
        pqn_lake_live.live_big_agent_update(v.big_agent, None, view, args, v.generator)
        if v.big_agent.updates % args.big_target_network_frequency == 0:
            v.big_agent.target_network.load_state_dict(v.big_agent.q_network.state_dict())
    v.big_updates += owed


def owed_updates(args: pqn_lake.Args) -> int:
    """--big-replay-ratio x one agent update's transitions, in --big-batch-size batches."""
    return round(args.big_replay_ratio * args.num_agents * args.num_envs * args.num_steps / args.big_batch_size)


def serial_window(v: Variant, args: pqn_lake.Args, updates: int, frame_skip: int, device: torch.device) -> float:
    start = time.perf_counter()
    for _ in range(updates):
        t0 = time.perf_counter()
        agents_update(v, args, frame_skip, device)
        sync(device)
        t1 = time.perf_counter()
        big_agent_updates(v, pqn_lake_live.fresh_view(v.agents, v.rows_written, args), owed_updates(args), args)
        sync(device)
        v.agents_seconds += t1 - t0
        v.big_seconds += time.perf_counter() - t1
    return time.perf_counter() - start


def overlapped_window(
    v: Variant, args: pqn_lake.Args, updates: int, frame_skip: int, device: torch.device, big_stream
) -> float:
    """The BigAgent's updates for agent update u run in a worker thread (its own CUDA stream on a GPU) while the
    agents make update u + 1; the window ends when the last worker is done."""

    def work(view: pqn_lake_live.FreshView) -> None:
        if big_stream is None:
            big_agent_updates(v, view, owed_updates(args), args)
            return
        with torch.cuda.stream(big_stream):
            big_agent_updates(v, view, owed_updates(args), args)
        big_stream.synchronize()

    start = time.perf_counter()
    for _ in range(updates):
        agents_update(v, args, frame_skip, device)
        if v.worker is not None:
            v.worker.join()
        # The worker reads the agents' current obs while their next rollout replaces (and frees) them: it reads copies
        # of its own, kept until it is done (the worker synchronises its stream before it ends)
        view = dataclasses.replace(
            pqn_lake_live.fresh_view(v.agents, v.rows_written, args),
            agents=[SimpleNamespace(obs=a.obs.clone(), pond=a.pond) for a in v.agents],
        )
        if big_stream is not None:  # the view's tensors were made on the default stream
            big_stream.wait_stream(torch.cuda.current_stream(device))
        v.worker = threading.Thread(target=work, args=(view,))
        v.worker.start()
    v.worker.join()
    v.worker = None
    sync(device)
    return time.perf_counter() - start


if __name__ == "__main__":
    bench = tyro.cli(Args)
    if bench.torch_threads:
        torch.set_num_threads(bench.torch_threads)
    start = time.time()
    device = torch.device(bench.device)
    print("$ python " + shlex.join(sys.argv))
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__} "
        f"({torch.get_num_threads()} intra-op threads); device {device}{gpu}; load average {os.getloadavg()[0]:.2f} "
        "(other processes skew every timing below)",
        flush=True,
    )
    torch.manual_seed(bench.seed)
    args = pqn_lake_live.Args(env_id=bench.env_id, seed=bench.seed, cuda=device.type == "cuda")
    args = dataclasses.replace(args, num_envs=bench.num_envs or args.num_envs)
    frame_skip = pqn_lake.frames_per_step(args)
    serial, overlapped = make_variant("serial", args, device), make_variant("overlapped", args, device)
    big_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    for v in (serial, overlapped):
        for _ in range(bench.warmup_updates):
            agents_update(v, args, frame_skip, device)
            big_agent_updates(v, pqn_lake_live.fresh_view(v.agents, v.rows_written, args), owed_updates(args), args)
        sync(device)
        v.big_updates = 0
    print(f"built and warmed up ({bench.warmup_updates} updates each) in {time.time() - start:.0f}s", flush=True)

    steps_per_update = args.num_agents * args.num_envs * args.num_steps
    for r in range(bench.rounds):
        for v in (serial, overlapped) if r % 2 == 0 else (overlapped, serial):
            seconds = (
                serial_window(v, args, bench.updates, frame_skip, device)
                if v is serial
                else overlapped_window(v, args, bench.updates, frame_skip, device, big_stream)
            )
            v.updates += bench.updates
            v.steps_per_s.append(bench.updates * steps_per_update / seconds)
        print(
            f"round {r + 1}/{bench.rounds}: serial {serial.steps_per_s[-1]:,.0f}, overlapped "
            f"{overlapped.steps_per_s[-1]:,.0f} steps/s",
            flush=True,
        )

    agents_s, big_s = serial.agents_seconds / serial.updates, serial.big_seconds / serial.updates
    med = {v.name: float(np.median(v.steps_per_s)) for v in (serial, overlapped)}
    ratio = float(np.median(np.array(overlapped.steps_per_s) / np.array(serial.steps_per_s)))
    rows = [
        ["variant", "steps/s", "s per agent update", "vs serial", "rounds, steps/s"],
        [
            "serial (pqn_lake_live's loop)",
            f"{med['serial']:,.0f}",
            f"{steps_per_update / med['serial']:.3f}",
            "1.000",
            " ".join(f"{x:,.0f}" for x in serial.steps_per_s),
        ],
        [
            "overlapped (BigAgent in a worker thread)",
            f"{med['overlapped']:,.0f}",
            f"{steps_per_update / med['overlapped']:.3f}",
            f"{ratio:.3f}",
            " ".join(f"{x:,.0f}" for x in overlapped.steps_per_s),
        ],
        [
            "best possible: max(agents, BigAgent)",
            f"{steps_per_update / max(agents_s, big_s):,.0f}",
            f"{max(agents_s, big_s):.3f}",
            f"{(agents_s + big_s) / max(agents_s, big_s):.3f}",
            "(from serial's split)",
        ],
    ]
    print()
    print(table(rows))
    owed = owed_updates(args)
    print(
        f"\nserial's split per agent update: agents {agents_s:.3f}s ({args.num_agents} x rollout of "
        f"{args.num_envs} envs x "
        f"{args.num_steps} steps + {args.update_epochs} x {args.num_minibatches} minibatches), BigAgent {big_s:.3f}s "
        f"({owed} updates of {args.big_batch_size}: ratio {args.big_replay_ratio:g}); the BigAgent's share of the "
        f"loop {big_s / (agents_s + big_s):.1%}"
    )
    print(
        f"{bench.updates} timed agent updates per variant and round, {bench.rounds} rounds, after "
        f"{bench.warmup_updates} warm-up updates; steps/s counts the agents' env steps (frames = steps x {frame_skip})"
    )
    print(f"\nwall time {time.time() - start:.0f}s; load average {os.getloadavg()[0]:.2f} at the end")
