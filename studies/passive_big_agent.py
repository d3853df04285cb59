"""The passive BigAgent: pqn_lake.py's BigAgent at its defaults, trained from scratch on the Lake of a finished run and
never acting (the "tandem" test of Ostrovski, Castro & Dabney 2021, "The Difficulty of Passive Learning in Deep RL").
How much does a learner that never acts lose against the agents that wrote its data, at equal data?

    python studies/passive_big_agent.py --sources runs/limits/MinAtar_Breakout-v1__Breakout__pqn-anneal__1__*
    python studies/passive_big_agent.py --sources <run folders> --update-scale 4      # 4x the updates

For each source run folder (its Lake and config.json), a fresh BigAgent (3-step Double DQN, Adam 2.5e-4, batches of
256, target every 250 updates, pqn_lake.py's own functions) makes the updates the loop's --big-replay-ratio gives for
every transition of the Lake (ratio x transitions / batch; x --update-scale), in rounds of --round-updates (6,400: a
MinAtar mixture phase's, 4 agents x 50 updates x 4,096 transitions x 2 / 256), each on a BigPond of --big-pond-size
drawn anew from the whole Lake (the loop draws one per phase) with the target synced as it starts. After each round it
is evaluated as the loop evaluates it: its network on --num-agents x --eval-episodes games of the source's protocol
(4 x 10 at ε 0.05 for MinAtar), the seed of each round its own.

The record (beside the study's, in --record-dir, named <env>__<game>__passive-<source arm>-x<scale>__<seed>__<seed>__
<time>) logs eval/return at global_frames = the source's frames x the share of the updates made: the BigAgent's curve
on the axis of the agents that wrote its Lake. A run checkpoints after every round in --runs-dir and resumes from it; a
recorded run is skipped. Runs go --parallel at a time, one thread each, each one's output in --runs-dir/<name>.log.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "studies"))


@dataclasses.dataclass
class Args:
    sources: tuple[str, ...] = ()
    """finished run folders of pqn_lake.py (each with its lake/ and config.json)"""
    update_scale: int = 1
    """the BigAgent's updates: this many times what the loop's replay ratio gives for the Lake's transitions"""
    round_updates: int = 6_400
    """updates per BigPond draw and evaluation (a MinAtar mixture phase's at pqn_lake.py's defaults)"""
    num_agents: int = 4
    """the evaluation's networks: the loop evaluates the BigAgent through its --num-agents clones"""
    seed: int = 1
    """the BigAgent's seed (its initialisation, batches, BigPond draws and evaluation games)"""
    runs_dir: str = "runs/passive"
    """where each run's checkpoint goes while it runs"""
    record_dir: str = str(Path(__file__).resolve().parent / "minatar_runs")
    """where each finished run's metrics.jsonl and config.json go (committed)"""
    parallel: int = 2
    """runs at once, one thread each"""
    one: str = ""
    """internal: run this one source folder in this process"""


def arm_of(source: Path, args: Args) -> str:
    """passive-<arm>-x<scale>, the arm read from the source folder's name <env>__<game>__<arm>__<seed>... (the
    Q(λ) and reset cells, ...-x<scale>-<learner>-<reset>, ran at the commit their records name)"""
    return f"passive-{source.name.split('__')[2]}-x{args.update_scale}"


def record_name(args: Args, source: Path) -> str:
    env, game = source.name.split("__")[:2]
    return f"{env}__{game}__{arm_of(source, args)}__{args.seed}__{args.seed}"


def recorded(args: Args, source: Path) -> bool:
    return any(Path(args.record_dir).glob(f"{record_name(args, source)}__*/metrics.jsonl*"))


def run_one(args: Args, source: Path) -> None:
    import numpy as np
    import torch

    import compare
    import lifecycle
    import pqn_lake
    from lake import Lake

    config = json.loads((source / "config.json").read_text())
    loop = pqn_lake.Args(**lifecycle.known_flags(pqn_lake.Args, config))
    loop = dataclasses.replace(loop, seed=args.seed, cuda_graphs=False)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lake_path = Path(loop.lake_path) if loop.lake_path and os.path.isabs(loop.lake_path) else source / "lake"
    lake = Lake(lake_path, mode="r")
    transitions, source_frames = lake.num_transitions, config["total_frames"]
    total = int(np.ceil(args.update_scale * loop.big_replay_ratio * transitions / loop.big_batch_size))
    name = record_name(args, source)
    work = Path(args.runs_dir) / name
    work.mkdir(parents=True, exist_ok=True)
    eval_envs = pqn_lake.make_envs(loop, args.num_agents * loop.eval_episodes)
    n_actions = eval_envs.single_action_space.n
    torch.manual_seed(args.seed)
    big_agent = pqn_lake.make_big_agent(loop, n_actions, device)
    state_path, rows, done = work / "state.pt", [], 0
    if state_path.exists():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        pqn_lake.load_agent_state(big_agent, state["big_agent"])
        torch.set_rng_state(state["torch_rng"])
        rows, done = state["rows"], state["updates"]
        print(f"{name}: resuming at update {done:,} of {total:,}", flush=True)
    start = time.time()
    while done < total:
        round_index = done // args.round_updates + 1
        rng = np.random.default_rng(pqn_lake.derive_seed(loop, pqn_lake.BIG_POND_DRAW, round_index))
        big_pond = pqn_lake.fill_big_pond(lake, loop, rng, device)
        big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
        updates = min(args.round_updates, total - done)
        td_loss = torch.zeros((), device=device)
        for i in range(1, updates + 1):
            td_loss += pqn_lake.big_agent_update(big_agent, big_pond, loop)[0]
            if i % loop.big_target_network_frequency == 0:
                big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
        del big_pond
        done += updates
        returns, lengths, _ = pqn_lake.evaluate(
            [big_agent.q_network] * args.num_agents,
            loop,
            eval_envs,
            pqn_lake.derive_seed(loop, pqn_lake.EVALUATION, round_index, 0),
            device,
        )
        rows.append(
            {
                "global_frames": int(round(source_frames * done / total)),
                "eval/return": float(returns.mean()),
                "eval/length": float(lengths.mean()),
                "big_agent/losses/td_loss": (td_loss / updates).item(),
                "big_agent/charts/updates": done,
                "charts/phase": round_index,
            }
        )
        print(
            f"{name}: {done:,}/{total:,} updates, eval/return {returns.mean():.2f} "
            f"({(time.time() - start) / 60:.1f} min)",
            flush=True,
        )
        torch.save(
            {
                "big_agent": pqn_lake.agent_state(big_agent),
                "torch_rng": torch.get_rng_state(),
                "rows": rows,
                "updates": done,
            },
            work / "state.pt.tmp",
        )
        os.replace(work / "state.pt.tmp", state_path)
    lake.close()
    eval_envs.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    record = Path(args.record_dir) / f"{name}__{int(time.time())}"
    record.mkdir(parents=True)
    compare.write_record_metrics(record, "".join(json.dumps(r) + "\n" for r in rows))
    (record / "config.json").write_text(
        json.dumps(
            {
                "script": "passive_big_agent",
                "env_id": loop.env_id,
                "seed": args.seed,
                "run_name": record.name,
                "exp_name": "__".join(name.split("__")[1:4]),
                "source": source.name,
                "source_transitions": transitions,
                "update_scale": args.update_scale,
                "updates": total,
                "round_updates": args.round_updates,
                "num_agents": args.num_agents,
                "commit": commit.strip(),
                "command": f"python studies/passive_big_agent.py --sources <runs>/{source.name} --update-scale "
                f"{args.update_scale} --seed {args.seed}",
                **{
                    k: v
                    for k, v in vars(loop).items()
                    if k.startswith("big_") or k in ("gamma", "eval_episodes", "eval_epsilon", "eval_max_frames")
                },
            },
            indent=2,
        )
        + "\n"
    )
    print(f"{name}: recorded in {record}", flush=True)


if __name__ == "__main__":
    args = tyro.cli(Args)
    if args.one:
        run_one(args, Path(args.one))
        sys.exit(0)
    queue = [Path(s) for s in args.sources if not recorded(args, Path(s))]
    for source in queue:
        if not (source / "config.json").exists() or not (source / "lake").is_dir():
            sys.exit(f"passive_big_agent.py: --sources {source}: not a run folder with config.json and lake/")
    import minatar_study  # (its way to start runs side by side and collect them)

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    running, start = [], time.time()
    while queue or running:
        while queue and len(running) < args.parallel:
            source = queue.pop(0)
            command = [
                "studies/passive_big_agent.py",
                "--one",
                str(source.resolve()),
                "--update-scale",
                str(args.update_scale),
                "--round-updates",
                str(args.round_updates),
                "--num-agents",
                str(args.num_agents),
                "--seed",
                str(args.seed),
                "--runs-dir",
                str(Path(args.runs_dir).resolve()),
                "--record-dir",
                str(Path(args.record_dir).resolve()),
            ]
            running.append(minatar_study.launch(args.runs_dir, record_name(args, source), command, env))
        minatar_study.ended(running)
    print(f"all runs done in {(time.time() - start) / 60:.1f} min", flush=True)
