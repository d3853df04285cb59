"""Steps per second of pqn_lake.py's agents on MinAtar, and where the time goes (env stepping, inference, training,
Lake), for one PQN agent and for the mixture's four, at the PQN paper's MinAtar settings (pqn_lake's MinAtar
defaults: 128 envs x 32 steps an update, 2 epochs x 32 minibatches of 128).

    python benchmarks/minatar_bench.py                                  # Breakout, about 4 minutes on 2 cores
    python benchmarks/minatar_bench.py --env-id MinAtar/SpaceInvaders-v1 --rounds 9 --threads 2

Each variant builds pqn_lake's own agents, envs and Lake once (the script's functions: rollout, pqn_update,
drain_pond), runs --warmup untimed updates, then the variants take turns for --rounds windows of --updates timed
updates, in an order rotated every round, so that other processes' load falls on all of them alike; a figure is the
median over the rounds, a ratio the median of the per-round ratios. The split: "env" is the time inside the envs'
step, "inference" the rest of the rollout (forward passes, ε-greedy, Pond writes), "training" pqn_update, "Lake"
drain_pond + commit. The baseline is the same agent with torch's per-tensor RAdam (foreach=False, torch's CPU
default, which pqn_lake used before MinAtar).
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
    """timed updates per variant and round (one update: 128 envs x 32 steps per agent)"""
    rounds: int = 5
    """rounds: the variants take turns, so that the machine's drift falls on all of them alike"""
    warmup: int = 3
    """untimed updates first"""
    threads: tuple[int, ...] = (1, 2)
    """torch intra-op threads to measure with (this machine has 2 cores)"""


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


class Variant:
    """One variant's agents, envs (reset once, then stepped on) and Lake, kept across rounds."""

    def __init__(self, bench: Args, name: str, num_agents: int, foreach: bool, folder: Path):
        self.name, self.args, self.device = name, pqn_lake.Args(env_id=bench.env_id, num_agents=num_agents), torch.device("cpu")
        self.agents = [pqn_lake.make_agent(self.args, f"agent{k}", self.device) for k in range(num_agents)]
        for agent in self.agents:
            agent.envs = TimedEnvs(agent.envs)
            agent.optimizer = torch.optim.RAdam(agent.q_network.parameters(), lr=self.args.learning_rate, foreach=foreach)
            pqn_lake.reset_envs(agent, 1 + len(agent.name), self.device, False)
        self.lake = Lake(folder / name.replace(" ", "_"), frame_shape=pqn_lake.frame_shape(self.args),
                         stack_size=self.args.stack_size, env_id=self.args.env_id)

    def window(self, updates: int) -> dict:
        """`updates` updates of every agent: steps/s and the shares of env, inference, training and Lake."""
        for agent in self.agents:
            agent.envs.seconds = 0.0
        times = {"rollout": 0.0, "training": 0.0, "Lake": 0.0}
        start = time.perf_counter()
        for _ in range(updates):
            t0 = time.perf_counter()
            pqn_lake.rollout(self.agents, self.args.num_steps, 1, self.device)
            t1 = time.perf_counter()
            for agent in self.agents:
                pqn_lake.pqn_update(agent, self.args, self.device)
            t2 = time.perf_counter()
            for agent in self.agents:
                if agent.pond.pos == self.args.pond_steps:
                    pqn_lake.drain_pond(agent.pond, self.lake, agent.name)
            self.lake.commit(wait=True)  # inside the timing: no variant is billed for another's writes
            times["rollout"] += t1 - t0
            times["training"] += t2 - t1
            times["Lake"] += time.perf_counter() - t2
        seconds = time.perf_counter() - start
        times["env"] = sum(agent.envs.seconds for agent in self.agents)
        times["inference"] = times.pop("rollout") - times["env"]
        steps = updates * len(self.agents) * self.args.num_envs * self.args.num_steps
        return {"steps/s": steps / seconds, **{k: v / seconds for k, v in times.items()}}


def main(bench: Args) -> None:
    names = [("1 agent, per-tensor RAdam (baseline)", 1, False), ("1 agent", 1, True), ("4 agents (the mixture)", 4, True)]
    print("| threads | variant | env steps/s (median) | vs baseline (median of paired rounds) | env | inference | "
          "training | Lake |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads in bench.threads:
        torch.set_num_threads(threads)
        with tempfile.TemporaryDirectory() as folder:
            variants = [Variant(bench, name, k, foreach, Path(folder)) for name, k, foreach in names]
            for v in variants:
                v.window(bench.warmup)
            results = {v.name: [] for v in variants}
            for r in range(bench.rounds):  # the variants take turns, in an order rotated every round
                for v in variants[r % len(variants):] + variants[: r % len(variants)]:
                    results[v.name].append(v.window(bench.updates))
            for v in variants:
                v.lake.close()
        base = results[names[0][0]]
        for name, *_ in names:
            rounds = results[name]
            ratio = np.median([r["steps/s"] / b["steps/s"] for r, b in zip(rounds, base)])
            share = {k: np.median([r[k] for r in rounds]) for k in ("env", "inference", "training", "Lake")}
            print(f"| {threads} | {name} | {np.median([r['steps/s'] for r in rounds]):,.0f} | {ratio:.2f}x | "
                  + " | ".join(f"{share[k]:.0%}" for k in share) + " |", flush=True)
    print(f"\n{bench.env_id}: {bench.rounds} rounds of {bench.updates} timed updates per variant (after {bench.warmup} "
          f"untimed); torch {torch.__version__}")


if __name__ == "__main__":
    main(tyro.cli(Args))
