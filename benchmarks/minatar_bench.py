"""Steps per second of pqn_lake.py's agents on MinAtar, and where the time goes (env stepping, inference, training,
Lake), for one PQN agent and for the mixture's four, at the PQN paper's MinAtar settings (pqn_lake's MinAtar
defaults: 128 envs x 32 steps an update, 2 epochs x 32 minibatches of 128).

    python benchmarks/minatar_bench.py                                  # Breakout, about 4 minutes on 2 cores
    python benchmarks/minatar_bench.py --env-id MinAtar/SpaceInvaders-v1 --rounds 9 --threads 2

Each variant builds pqn_lake's own agents, envs and Lake once (its loop's update: each agent's rollout and PQN update
in a thread of its own), runs --warmup untimed updates, then the variants take turns for --rounds windows of --updates
timed updates, in an order rotated every round, so that other processes' load falls on all of them alike; a figure is
the median over the rounds, a ratio the median of the per-round ratios. The split, as shares of an agent's time (its
thread's): "env" is the time inside the envs' step, "inference" the rest of the rollout (forward passes, ε-greedy,
Pond writes), "training" the rest of pqn_update; "Lake" the drains' share of the wall. Each baseline is the same
agents in the serial loop of before (serial_update: agent after agent, the same random numbers, so the same results).
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
import speed
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


def threaded_update(agents: list, args, lake: Lake, device: torch.device) -> None:
    """pqn_lake.py's steps 1-2 of one update as its loop makes them: each agent's rollout and PQN update in a thread of
    its own (pqn_update), on random numbers drawn before in the serial order; then full Ponds drained, agent order."""
    K, A = len(agents), agents[0].envs.single_action_space.n
    drawn = speed.draw_in_serial_order(K, args.num_steps, args.num_envs, A, args.update_epochs, device)
    speed.in_agent_threads(pqn_lake.pqn_update, agents, drawn, [args] * K, [device] * K)
    for agent in agents:
        if agent.pond.pos == args.pond_steps:
            pqn_lake.drain_pond(agent.pond, lake, agent.name)


def serial_update(agents: list, args, lake: Lake, device: torch.device) -> None:
    """The loop before the agents had threads (commit f3004fc's schedule, the same random numbers): step by step agent
    after agent (agent k's envs stepping while agent k+1 acts), then the updates one after another, then the drains."""
    K, A = len(agents), agents[0].envs.single_action_space.n
    drawn = speed.draw_in_serial_order(K, args.num_steps, args.num_envs, A, args.update_epochs, device)
    for t in range(args.num_steps):
        for agent, (steps, _) in zip(agents, drawn):
            if t > 0:
                pqn_lake.receive(agent, args, device, t - 1)
            pqn_lake.act(agent, t, steps[t])
    for agent in agents:
        pqn_lake.receive(agent, args, device, args.num_steps - 1)
    rollout, pqn_lake.rollout = pqn_lake.rollout, lambda *_: None  # (made above, step by step)
    try:
        for agent, its_draws in zip(agents, drawn):
            pqn_lake.pqn_update(agent, its_draws, args, device)
            if agent.pond.pos == args.pond_steps:
                pqn_lake.drain_pond(agent.pond, lake, agent.name)
    finally:
        pqn_lake.rollout = rollout


def timed_updates(agents: list, args, lake: Lake, device: torch.device, updates: int, serial: bool = False) -> dict:
    """`updates` of pqn_lake's phase steps 1-2 (threaded_update, or serial_update), the Lake's writes waited for at the
    end: steps/s, and the shares of an agent's time (its thread's: pqn_update's; serial: the wall's) spent in its
    envs' step (env), the rest of its rollout (inference: forward passes, ε-greedy, Pond writes) and its learning
    (training: pqn_update but its rollout), with the drains' share of the wall (Lake)."""
    seconds = {"update": [], "rollout": [], "Lake": []}  # (list.append: safe from the agents' threads)
    originals = {name: getattr(pqn_lake, name) for name in ("pqn_update", "rollout", "drain_pond")}

    def timed(name: str, key: str):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return originals[name](*a, **k)
            finally:
                seconds[key].append(time.perf_counter() - t0)

        return call

    for agent in agents:
        agent.envs.seconds = 0.0
    for name, key in (("pqn_update", "update"), ("rollout", "rollout"), ("drain_pond", "Lake")):
        setattr(pqn_lake, name, timed(name, key))
    try:
        start = time.perf_counter()
        for _ in range(updates):
            (serial_update if serial else threaded_update)(agents, args, lake, device)
        lake.commit(wait=True)  # inside the timing: no variant is billed for another's writes
        total = time.perf_counter() - start
    finally:
        for name, function in originals.items():
            setattr(pqn_lake, name, function)
    thread, env = total if serial else sum(seconds["update"]), sum(agent.envs.seconds for agent in agents)
    training = sum(seconds["update"]) - sum(seconds["rollout"])
    shares = {"env": env / thread, "training": training / thread, "Lake": sum(seconds["Lake"]) / total}
    shares["inference"] = 1 - shares["env"] - shares["training"]
    steps = updates * len(agents) * args.num_envs * args.num_steps
    return {"steps/s": steps / total, "seconds": total, **shares}


class Variant:
    """One variant's agents, envs (reset once, then stepped on) and Lake, kept across rounds."""

    def __init__(self, bench: Args, name: str, num_agents: int, serial: bool, folder: Path):
        self.name, self.serial, self.device = name, serial, torch.device("cpu")
        self.args = pqn_lake.Args(env_id=bench.env_id, num_agents=num_agents, num_envs=bench.num_envs)
        self.agents = [pqn_lake.make_agent(self.args, f"agent{k}", self.device) for k in range(num_agents)]
        for agent in self.agents:
            agent.envs = TimedEnvs(agent.envs)
            pqn_lake.reset_envs(agent, 1 + len(agent.name), self.device)
        self.lake = Lake(
            folder / name.replace(" ", "_"),
            frame_shape=pqn_lake.frame_shape(self.args),
            stack_size=self.args.stack_size,
            env_id=self.args.env_id,
        )

    def window(self, updates: int) -> dict:
        return timed_updates(self.agents, self.args, self.lake, self.device, updates, self.serial)


def main(bench: Args) -> None:
    # (each pair: the serial loop, its baseline, then pqn_lake's agents in threads)
    names = [
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
        torch.set_num_threads(threads)
        with tempfile.TemporaryDirectory() as folder:
            variants = [Variant(bench, name, k, serial, Path(folder)) for name, k, serial in names]
            for v in variants:
                v.window(bench.warmup)
            results = {v.name: [] for v in variants}
            for r in range(bench.rounds):  # the variants take turns, in an order rotated every round
                for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                    results[v.name].append(v.window(bench.updates))
            for v in variants:
                v.lake.close()
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
