"""CleanRL's own PQN for Atari run here as a peer: `cleanrl/pqn_atari_envpool.py` from a checkout of CleanRL at a named
commit, for a game, a seed and a budget, on the CPU; its full-game training returns written as a study record, so that
the Atari parity table reads both sides the same way.

    python -m venv peer-cleanrl && peer-cleanrl/bin/pip install envpool==0.8.4 gym==0.23.1 "numpy<2" tyro \\
        tensorboard torch==2.13.0
    git clone https://github.com/vwxyzjn/cleanrl && git -C cleanrl checkout fe8d8a03
    peer-cleanrl/bin/python studies/cleanrl_peer.py --cleanrl cleanrl               # Breakout, 3 seeds, 10M frames
    peer-cleanrl/bin/python studies/cleanrl_peer.py --cleanrl cleanrl --games MsPacman-v5 --seeds 1 \\
        --parallel 1 --threads 2                                                    # one run alone, both cores

The peer lives in its own environment (envpool 0.8.4 needs gym 0.23 and numpy < 2; envpool 1.2.5 fails on its
`num_envs` setter, gym 0.26 on its `reset()`): nothing of it is in requirements.txt, nothing of CleanRL is copied here.
The script runs as shipped (RAdam 2.5e-4 annealed to 0, 8 envs x 128 steps, 4 epochs x 4 minibatches, grad-norm 10, γ
0.99, λ 0.65, ε 1 -> 0.01 over a tenth of the run; envpool with episodic_life, reward_clip, no sticky actions), with
only --env-id, --seed, --total-timesteps (--steps; 2.5M steps = 10M frames) and --no-cuda set, in a folder of its own
under --runs-dir, with --threads CPU threads. Its full-game training returns (`charts/episodic_return` in its
TensorBoard events: the unclipped return of a game, logged when the last life is lost) become
`charts/episodic_return` at global_frames = 4 x its global_step. A record goes to --record-dir as
<env>__<game>__cleanrl-pqn__<seed>__<seed>__<time>/ with config.json (script "cleanrl_pqn", the checkout's commit, the
command) and metrics.jsonl.gz; a (game, seed) already recorded is skipped, and a run stopped before its end starts
again (CleanRL's script keeps no checkpoint). Without envpool it says so and exits 0.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import tyro

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import compare  # noqa: E402  (a record's metrics, compressed)

ARM, SCRIPT = "cleanrl-pqn", "cleanrl/pqn_atari_envpool.py"
FRAME_SKIP = 4  # envpool's Atari default, and the script's


@dataclasses.dataclass
class Args:
    cleanrl: str = "cleanrl"
    """a checkout of github.com/vwxyzjn/cleanrl (the folder that holds cleanrl/pqn_atari_envpool.py)"""
    games: tuple[str, ...] = ("Breakout-v5",)
    """envpool Atari ids"""
    seeds: tuple[int, ...] = (1, 2, 3)
    steps: int = 2_500_000
    """--total-timesteps: env steps of a run (x 4 frames: 10M frames)"""
    runs_dir: str = "runs/cleanrl_peer"
    """where the runs go (their TensorBoard events and logs; not committed)"""
    record_dir: str = str(HERE / "atari_runs")
    """where each finished run's record goes (committed)"""
    parallel: int = 2
    """runs at once"""
    threads: int = 1
    """torch threads of each run: one with two runs at once; a run alone on a 2-core machine is ~2.8x faster with 2
    (measured: 1 thread 150 steps/s, 2 threads ~427)"""


def record_name(game: str, seed: int) -> str:
    return f"{game}__{game.split('-')[0]}__{ARM}__{seed}__{seed}"


def recorded(args: Args, game: str, seed: int) -> bool:
    return any(Path(args.record_dir).glob(f"{record_name(game, seed)}__*/metrics.jsonl*"))


def rows_of(returns: list, lengths: list) -> list:
    """metrics.jsonl rows of the peer's full games: (global_step, value) pairs of its episodic return and length, in
    the order it logged them, at global_frames = 4 x global_step."""
    return [
        {
            "global_frames": FRAME_SKIP * int(step),
            "charts/episodic_return": float(value),
            "charts/episodic_length": float(length),
        }
        for (step, value), (_, length) in zip(returns, lengths)
    ]


def write_record(args: Args, game: str, seed: int, rows: list, commit: str, command: list) -> Path:
    record = Path(args.record_dir) / f"{record_name(game, seed)}__{int(time.time())}"
    record.mkdir(parents=True)
    compare.write_record_metrics(record, "".join(json.dumps(r) + "\n" for r in rows))
    (record / "config.json").write_text(
        json.dumps(
            {
                "script": "cleanrl_pqn",
                "env_id": game,
                "seed": seed,
                "run_name": record.name,
                "exp_name": f"{game.split('-')[0]}__{ARM}__{seed}",
                "total_frames": FRAME_SKIP * args.steps,
                "commit": commit,
                "cleanrl_script": SCRIPT,
                "command": " ".join(command),
            },
            indent=2,
        )
        + "\n"
    )
    return record


def read_events(folder: Path) -> tuple:
    """(returns, lengths) as (step, value) pairs from the TensorBoard events under `folder` (the peer's runs/)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = [p.parent for p in folder.glob("runs/*/events.out.tfevents.*")]
    reader = EventAccumulator(str(events), size_guidance={"scalars": 0})  # 0: every point, not a sample
    reader.Reload()
    return tuple(
        [(e.step, e.value) for e in reader.Scalars(f"charts/{k}")] for k in ("episodic_return", "episodic_length")
    )


def run_one(args: Args, game: str, seed: int, commit: str) -> subprocess.Popen:
    """The peer's script for one (game, seed) in a fresh folder of its own, its output in <folder>/log.txt."""
    folder = Path(args.runs_dir).resolve() / record_name(game, seed)
    if folder.exists():
        subprocess.run(["rm", "-rf", str(folder)], check=True)  # a stopped run starts again
    folder.mkdir(parents=True)
    command = [
        sys.executable,
        str(Path(args.cleanrl).resolve() / SCRIPT),
        "--env-id",
        game,
        "--seed",
        str(seed),
        "--total-timesteps",
        str(args.steps),
        "--no-cuda",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    print(f"{time.strftime('%H:%M:%S')} start {folder.name}: {' '.join(command)}", flush=True)
    log = open(folder / "log.txt", "w")
    proc = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.meta = (game, seed, folder, command)
    return proc


def main(args: Args) -> None:
    try:
        import envpool  # noqa: F401
    except ImportError:
        print(
            "cleanrl_peer.py: envpool is not installed in this Python: the peer is skipped (install its environment "
            "as the module's docstring says)"
        )
        return
    commit = subprocess.run(
        ["git", "-C", args.cleanrl, "rev-parse", "--short=8", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    queue = [(g, s) for s in args.seeds for g in args.games if not recorded(args, g, s)]
    running = []
    while queue or running:
        while queue and len(running) < args.parallel:
            running.append(run_one(args, *queue.pop(0), commit))
        time.sleep(5)
        for proc in [p for p in running if p.poll() is not None]:
            running.remove(proc)
            game, seed, folder, command = proc.meta
            if proc.returncode != 0:
                print(f"{folder.name}: exit code {proc.returncode} (see {folder / 'log.txt'})", flush=True)
                continue
            command = ["python", SCRIPT, *command[2:]]
            record = write_record(args, game, seed, rows_of(*read_events(folder)), commit, command)
            print(f"{time.strftime('%H:%M:%S')} {folder.name}: recorded in {record}", flush=True)


if __name__ == "__main__":
    main(tyro.cli(Args))
