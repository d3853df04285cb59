"""Steps per second of pqn_lake.py's agents on MinAtar, and where the time goes (env stepping, inference, training,
Lake), for one PQN agent and for the mixture's four, at the PQN paper's MinAtar settings (pqn_lake's MinAtar
defaults: 128 envs x 32 steps an update, 2 epochs x 32 minibatches of 128).

    python benchmarks/minatar_bench.py                                  # Breakout, about 3 minutes on 2 cores
    python benchmarks/minatar_bench.py --env-id MinAtar/SpaceInvaders-v1 --updates 50 --threads 2

Each variant builds pqn_lake's own agents, envs and Lake (the script's functions: rollout, pqn_update, drain_pond)
and runs --warmup untimed then --updates timed updates. The split: "env" is the time inside the envs' step, "inference"
the rest of the rollout (forward passes, ε-greedy, Pond writes), "training" pqn_update, "Lake" drain_pond. The
baseline is the same agent with torch's per-tensor RAdam (foreach=False, torch's CPU default, which pqn_lake used
before MinAtar): the ratio is measured in the same run.
"""

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # pqn_lake.py and lake.py live at the root
import pqn_lake
from lake import Lake


@dataclass
class Args:
    env_id: str = "MinAtar/Breakout-v1"
    """a MinAtar id"""
    updates: int = 20
    """timed updates per variant (one update: 128 envs x 32 steps per agent)"""
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


def measure(bench: Args, num_agents: int, foreach: bool, threads: int) -> dict:
    torch.set_num_threads(threads)
    args = pqn_lake.Args(env_id=bench.env_id, num_agents=num_agents)
    device = torch.device("cpu")
    agents = [pqn_lake.make_agent(args, f"agent{k}", device) for k in range(num_agents)]
    for agent in agents:
        agent.envs = TimedEnvs(agent.envs)
        agent.optimizer = torch.optim.RAdam(agent.q_network.parameters(), lr=args.learning_rate, foreach=foreach)
        pqn_lake.reset_envs(agent, 1 + len(agent.name), device, False)
    times = {"env": 0.0, "rollout": 0.0, "training": 0.0, "Lake": 0.0}
    with tempfile.TemporaryDirectory() as folder, Lake(Path(folder) / "lake", frame_shape=pqn_lake.frame_shape(args),
                                                       stack_size=args.stack_size, env_id=args.env_id) as lake:
        for update in range(bench.warmup + bench.updates):
            if update == bench.warmup:
                for agent in agents:
                    agent.envs.seconds = 0.0
                times = dict.fromkeys(times, 0.0)
                start = time.perf_counter()
            t0 = time.perf_counter()
            pqn_lake.rollout(agents, args.num_steps, 1, device)
            t1 = time.perf_counter()
            for agent in agents:
                pqn_lake.pqn_update(agent, args, device)
            t2 = time.perf_counter()
            for agent in agents:
                if agent.pond.pos == args.pond_steps:
                    pqn_lake.drain_pond(agent.pond, lake, agent.name)
            lake.commit(wait=True)
            t3 = time.perf_counter()
            times["rollout"] += t1 - t0
            times["training"] += t2 - t1
            times["Lake"] += t3 - t2
        seconds = time.perf_counter() - start
    times["env"] = sum(agent.envs.seconds for agent in agents)
    times["inference"] = times.pop("rollout") - times["env"]
    steps = bench.updates * num_agents * args.num_envs * args.num_steps
    return {"steps/s": steps / seconds, "seconds": seconds, **{k: v / seconds for k, v in times.items()}}


def main(bench: Args) -> None:
    variants = [("1 agent, per-tensor RAdam (baseline)", 1, False), ("1 agent", 1, True), ("4 agents (the mixture)", 4, True)]
    rows = []
    for threads in bench.threads:
        for name, num_agents, foreach in variants:
            result = measure(bench, num_agents, foreach, threads)
            rows.append((threads, name, result))
            print(f"{threads} thread(s), {name}: {result['steps/s']:,.0f} env steps/s", flush=True)
    print(f"\n{bench.env_id}, {bench.updates} timed updates per variant (after {bench.warmup}); torch {torch.__version__}\n")
    print("| threads | variant | env steps/s | vs baseline | env | inference | training | Lake |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads, name, r in rows:
        base = next(b for t, n, b in rows if t == threads and n.endswith("(baseline)"))
        print(f"| {threads} | {name} | {r['steps/s']:,.0f} | {r['steps/s'] / base['steps/s']:.2f}x | {r['env']:.0%} | "
              f"{r['inference']:.0%} | {r['training']:.0%} | {r['Lake']:.0%} |")


if __name__ == "__main__":
    main(tyro.cli(Args))
