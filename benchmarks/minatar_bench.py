"""Steps per second of pqn_lake.py's agents on MinAtar, and where the time goes (env stepping, inference, training,
Lake), for one PQN agent and for the mixture's four, at the PQN paper's MinAtar settings (pqn_lake's MinAtar
defaults: 128 envs x 32 steps an update, 2 epochs x 32 minibatches of 128).

    python benchmarks/minatar_bench.py                                  # Breakout, about 4 minutes on 2 cores
    python benchmarks/minatar_bench.py --env-id MinAtar/SpaceInvaders-v1 --rounds 9 --threads 2

Each variant builds pqn_lake's own agents, envs and Lake once (train_agents: each agent's rollout and PQN update in
a thread of its own), runs --warmup untimed updates, then the variants take turns for --rounds windows of --updates
timed updates, in an order rotated every round, so that other processes' load falls on all of them alike; a figure is
the median over the rounds, a ratio the median of the per-round ratios. The split, as shares of an agent's time (its
thread's): "env" is the time inside the envs' step, "inference" the rest of the rollout (forward passes, ε-greedy,
Pond writes), "training" pqn_update; "Lake" the drains' share of the wall. Each baseline is the same agents in the
serial loop of before (serial_update: agent after agent, the same random numbers, so the same results).
"""

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # pqn_lake.py and lake.py live at the root
import pqn_lake
from lake import Lake


@dataclass
class Args:
    env_id: str = "MinAtar/Breakout-v1"
    """a MinAtar id"""
    updates: int = 5
    """timed updates per variant and round (one update: --num-envs x 32 steps per agent)"""
    rounds: int = 5
    """rounds: the variants take turns, so that the machine's drift falls on all of them alike"""
    warmup: int = 3
    """untimed updates first"""
    threads: tuple[int, ...] = (1, 2)
    """torch intra-op threads to measure with (this machine has 2 cores)"""
    num_envs: int = 128
    """envs per agent (PQN's MinAtar setting; fewer for a quick check that it runs)"""


class TimedEnvs:
    """An agent's envs, with the seconds spent inside their step counted."""

    def __init__(self, envs):
        self.envs, self.seconds = envs, 0.0

    def __getattr__(self, name):
        return getattr(self.envs, name)

    def recv(self):
        start = time.perf_counter()
        out = self.envs.recv()
        self.seconds += time.perf_counter() - start
        return out


def serial_update(run: pqn_lake.Run) -> None:
    """The loop before the agents had threads (commit f3004fc's schedule, the same random numbers): step by step agent
    after agent (agent k's envs stepping while agent k+1 acts), then the updates one after another, then the drains."""
    agents, args, device = run.agents, run.args, run.device
    drawn = pqn_lake.draw_randoms(agents, args, device)
    for t in range(args.num_steps):
        for agent, (steps, _) in zip(agents, drawn):
            if t > 0:
                pqn_lake.receive(agent, args, device, t - 1)
            pqn_lake.act(agent, t, steps[t])
    for agent in agents:
        pqn_lake.receive(agent, args, device, args.num_steps - 1)
    for agent, (_, orders) in zip(agents, drawn):
        pqn_lake.pqn_update(agent, args, device, orders)
        if agent.pond.pos == args.pond_steps:
            pqn_lake.drain_pond(agent.pond, run.lake, agent.name)


def timed_updates(run: pqn_lake.Run, updates: int, update=None) -> dict:
    """`updates` of pqn_lake's phase steps 1-2 (`update`: pqn_lake.train_agents, each agent's rollout and PQN update in
    a thread of its own, full Ponds drained in agent order; or serial_update), the Lake's writes waited for at the end:
    steps/s, and the shares of an agent's time (its thread's; serial: the wall's) spent in its envs' step (env), the
    rest of its rollout (inference: forward passes, ε-greedy, Pond writes) and pqn_update (training), with the drains'
    share of the wall (Lake)."""
    seconds = {"thread": [], "training": [], "Lake": []}  # (list.append: safe from the agents' threads)
    originals = {name: getattr(pqn_lake, name) for name in ("agent_update", "pqn_update", "drain_pond")}

    def timed(name: str, key: str):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return originals[name](*a, **k)
            finally:
                seconds[key].append(time.perf_counter() - t0)

        return call

    for agent in run.agents:
        agent.envs.seconds = 0.0
    for name, key in (("agent_update", "thread"), ("pqn_update", "training"), ("drain_pond", "Lake")):
        setattr(pqn_lake, name, timed(name, key))
    try:
        start = time.perf_counter()
        for _ in range(updates):
            (update or pqn_lake.train_agents)(run)
        run.lake.commit(wait=True)  # inside the timing: no variant is billed for another's writes
        total = time.perf_counter() - start
    finally:
        for name, function in originals.items():
            setattr(pqn_lake, name, function)
    thread, env = sum(seconds["thread"]) or total, sum(agent.envs.seconds for agent in run.agents)
    shares = {"env": env / thread, "training": sum(seconds["training"]) / thread, "Lake": sum(seconds["Lake"]) / total}
    shares["inference"] = 1 - shares["env"] - shares["training"]
    steps = updates * len(run.agents) * run.args.num_envs * run.args.num_steps
    return {"steps/s": steps / total, "seconds": total, **shares}


class Variant:
    """One variant's agents, envs (reset once, then stepped on) and Lake, kept across rounds."""

    def __init__(self, bench: Args, name: str, num_agents: int, update, folder: Path):
        self.name, self.update, device = name, update, torch.device("cpu")
        args = pqn_lake.Args(env_id=bench.env_id, num_agents=num_agents, num_envs=bench.num_envs)
        agents = [pqn_lake.make_agent(args, f"agent{k}", device) for k in range(num_agents)]
        for agent in agents:
            agent.envs = TimedEnvs(agent.envs)
            pqn_lake.reset_envs(agent, 1 + len(agent.name), device)
        lake = Lake(
            folder / name.replace(" ", "_"),
            frame_shape=pqn_lake.frame_shape(args),
            stack_size=args.stack_size,
            env_id=args.env_id,
        )
        self.run = pqn_lake.Run(args, None, "", lake, agents, None, device, None)  # (what train_agents reads)

    def window(self, updates: int) -> dict:
        return timed_updates(self.run, updates, self.update)


def main(bench: Args) -> None:
    # (each pair: the serial loop, its baseline, then pqn_lake's agents in threads)
    names = [
        ("1 agent, serial (baseline)", 1, serial_update),
        ("1 agent (train_agents)", 1, None),
        ("4 agents, serial (baseline)", 4, serial_update),
        ("4 agents, a thread each (the mixture)", 4, None),
    ]
    print(
        "| threads | variant | env steps/s (median) | vs its baseline (median of paired rounds) | env | inference | "
        "training | Lake |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads in bench.threads:
        torch.set_num_threads(threads)
        with tempfile.TemporaryDirectory() as folder:
            variants = [Variant(bench, name, k, update, Path(folder)) for name, k, update in names]
            for v in variants:
                v.window(bench.warmup)
            results = {v.name: [] for v in variants}
            for r in range(bench.rounds):  # the variants take turns, in an order rotated every round
                for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                    results[v.name].append(v.window(bench.updates))
            for v in variants:
                v.run.lake.close()
        for i, (name, *_) in enumerate(names):
            rounds, base = results[name], results[names[i - i % 2][0]]
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
        f"variant (after {bench.warmup} untimed); torch {torch.__version__}"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
