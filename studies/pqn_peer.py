"""PQN's own MinAtar code run here as a peer: purejaxql's `pqn_minatar.py` (JAX, gymnax's MinAtar port) for a game, a
seed and a horizon, its greedy test-return curve written as a study record, so that `compare.py` and the parity table
(`minatar_study.py --part parity --table-only`) read both sides the same way.

    python -m venv peer && peer/bin/pip install "jax[cpu]" flax optax chex gymnax hydra-core six wandb
    git clone https://github.com/mttga/purejaxql && git -C purejaxql checkout 47af6d7
    peer/bin/python studies/pqn_peer.py --purejaxql purejaxql                      # 4 games x 3 seeds, as shipped
    peer/bin/python studies/pqn_peer.py --purejaxql purejaxql --games Breakout --decay-steps 5000000

Nothing of purejaxql is copied here: its module is imported from the checkout named by --purejaxql, its configuration
read from that checkout's YAML files (`config/config.yaml`, `config/alg/pqn_minatar.yaml`: 128 envs x 32 steps, 2
epochs x 32 minibatches, RAdam 5e-4 decayed linearly, λ 0.65, ε 1 -> 0.05 over a tenth of the decay horizon, greedy
tests of its 128 test envs every 5% of the updates), and only ENV_NAME, SEED, TOTAL_TIMESTEPS (--steps: the run's cut)
and TOTAL_TIMESTEPS_DECAY (--decay-steps; the YAML's 1e7 as shipped: a run cut at 5M keeps the decays of a 10M run)
set. The run is the YAML's `single_run` without its wandb and its saving: `make_train(config)` vmapped over
`jax.random.split(PRNGKey(SEED), NUM_SEEDS = 1)` and jitted.

Its test return (`test/returned_episode_returns`) is the mean return of the test games that ended within one window
of gymnax's step limit (128 greedy envs, 1,000 steps; Freeway 2,500), not a fixed number of games; each test is
logged at its env step as `eval/return` (MinAtar has no frame skip: steps are frames). A record goes to --record-dir as
MinAtar_<Game>-v1__<Game>__<arm>__<seed>__<seed>__<time>/ with config.json (script "purejaxql", the checkout's commit,
the configuration, the command) and metrics.jsonl.gz; a (game, arm, seed) already recorded is skipped.
Runs go --parallel at a time, one CPU thread each (XLA's and OpenMP's thread pools set to 1). Its check that gymnax's
port plays the minatar package's games (--check-env) is answered and left it: f76309b still runs it.
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

ONE_THREAD = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "JAX_PLATFORMS": "cpu",
}


@dataclasses.dataclass
class Args:
    purejaxql: str = "purejaxql"
    """a checkout of github.com/mttga/purejaxql (the folder that holds purejaxql/pqn_minatar.py)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    """MinAtar games (gymnax ids <Game>-MinAtar)"""
    seeds: tuple[int, ...] = (1, 2, 3)
    """purejaxql's SEED of each run"""
    steps: int = 5_000_000
    """TOTAL_TIMESTEPS: env steps of a run (the parity table's horizon)"""
    decay_steps: int = 0
    """TOTAL_TIMESTEPS_DECAY: the horizon of the ε and learning-rate decays (0: the YAML's, 1e7 as shipped)"""
    record_dir: str = str(HERE / "minatar_runs")
    """where each finished run's record goes (committed: the parity table's source)"""
    parallel: int = 2
    """runs at once, one thread each"""
    one: str = ""
    """internal: run one "<game>:<seed>" in this process and write its record"""


def arm(args: Args) -> str:
    """The record's arm name: purejaxql as shipped, or with its decays over --decay-steps."""
    return "purejaxql" if args.decay_steps == 0 else f"purejaxql-decay{args.decay_steps // 1_000_000}m"


def recorded(args: Args, game: str, seed: int) -> bool:
    return any(Path(args.record_dir).glob(f"MinAtar_{game}-v1__{game}__{arm(args)}__{seed}__{seed}__*/metrics.jsonl*"))


def run_one(args: Args, game: str, seed: int) -> None:
    """One purejaxql run in this process; its test curve written as a record."""
    import jax
    import numpy as np
    from omegaconf import OmegaConf

    checkout = Path(args.purejaxql).resolve()
    sys.path.insert(0, str(checkout))
    from purejaxql import pqn_minatar  # noqa: E402  (the checkout's module, imported, not copied)

    config = OmegaConf.to_container(OmegaConf.load(checkout / "purejaxql/config/config.yaml"))
    alg = OmegaConf.to_container(OmegaConf.load(checkout / "purejaxql/config/alg/pqn_minatar.yaml"))
    config = {
        **config,
        **alg,
        "ENV_NAME": f"{game}-MinAtar",
        "SEED": seed,
        "TOTAL_TIMESTEPS": args.steps,
        "WANDB_MODE": "disabled",
    }
    if args.decay_steps:
        config["TOTAL_TIMESTEPS_DECAY"] = args.decay_steps
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    start = time.time()
    train = jax.jit(jax.vmap(pqn_minatar.make_train(config)))
    outs = jax.block_until_ready(train(jax.random.split(jax.random.PRNGKey(seed), config["NUM_SEEDS"])))
    seconds = time.time() - start
    m = {k: np.asarray(v)[0] for k, v in outs["metrics"].items()}
    interval = int(config["NUM_UPDATES"] * config["TEST_INTERVAL"])
    # a test runs after the updates that are multiples of `interval` (and once before the first); its metrics are
    # carried through the updates in between
    rows = [{"global_frames": 0, "eval/return": float(m["test/returned_episode_returns"][0])}]
    rows += [
        {
            "global_frames": int(m["env_step"][i]),
            "eval/return": float(m["test/returned_episode_returns"][i]),
            "eval/length": float(m["test/returned_episode_lengths"][i]),
        }
        for i in range(len(m["update_steps"]))
        if m["update_steps"][i] % interval == 0
    ]
    name = f"MinAtar_{game}-v1__{game}__{arm(args)}__{seed}__{seed}__{int(time.time())}"
    record = Path(args.record_dir) / name
    record.mkdir(parents=True)
    compare.write_record_metrics(record, "".join(json.dumps(r) + "\n" for r in rows))
    (record / "config.json").write_text(
        json.dumps(
            {
                "script": "purejaxql",
                "env_id": f"MinAtar/{game}-v1",
                "seed": seed,
                "run_name": name,
                "exp_name": f"{game}__{arm(args)}__{seed}",
                "purejaxql_commit": commit,
                "purejaxql_config": config,
                "command": f"python studies/pqn_peer.py --games {game} --seeds {seed} --steps {args.steps}"
                + (f" --decay-steps {args.decay_steps}" if args.decay_steps else ""),
                "jax": jax.__version__,
                "seconds": seconds,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"{name}: final test return {rows[-1]['eval/return']:.2f} after {seconds / 60:.1f} min", flush=True)


def missing_packages() -> list:
    import importlib.util

    return [
        p
        for p in ("jax", "flax", "optax", "chex", "gymnax", "hydra", "omegaconf", "six", "wandb")
        if importlib.util.find_spec(p) is None
    ]


if __name__ == "__main__":
    args = tyro.cli(Args)
    missing = missing_packages()
    if missing:
        print(
            f"pqn_peer: skipped, purejaxql's packages are missing here ({', '.join(missing)}): install them in a "
            "separate environment, as this file's docstring says, and run this script with its python"
        )
        sys.exit(0)
    if not (Path(args.purejaxql) / "purejaxql" / "pqn_minatar.py").is_file():
        print(
            f"pqn_peer: --purejaxql {args.purejaxql}: no purejaxql/pqn_minatar.py in it (a checkout of "
            "github.com/mttga/purejaxql is needed)",
            file=sys.stderr,
        )
        sys.exit(2)
    if args.one:
        game, seed = args.one.split(":")
        run_one(args, game, int(seed))
        sys.exit(0)
    queue = [(g, s) for s in args.seeds for g in args.games if not recorded(args, g, s)]
    running, start = [], time.time()
    flags = [
        "--purejaxql",
        args.purejaxql,
        "--steps",
        str(args.steps),
        "--decay-steps",
        str(args.decay_steps),
        "--record-dir",
        args.record_dir,
    ]
    while queue or running:
        while queue and len(running) < args.parallel:
            game, seed = queue.pop(0)
            print(f"{time.strftime('%H:%M:%S')} start {game} seed {seed} ({arm(args)})", flush=True)
            running.append(
                subprocess.Popen(
                    [sys.executable, __file__, *flags, "--one", f"{game}:{seed}"], env={**os.environ, **ONE_THREAD}
                )
            )
        time.sleep(5)
        for proc in [p for p in running if p.poll() is not None]:
            running.remove(proc)
            if proc.returncode:
                print(f"a run exited with code {proc.returncode}", flush=True)
    print(f"all runs done in {(time.time() - start) / 60:.1f} min", flush=True)
