"""Where does the mixture's loss come from? (MinAtar, 4 games, 5M frames, 3 seeds.) Resumable, finished runs skipped,
every table and figure from the committed records (studies/minatar_runs/); --parallel runs at once, a thread each.

    python studies/loss_study.py --arms pqn-512-mb32 --games Breakout --seeds 1     # one run of an arm
    python studies/loss_study.py                                                     # every run still to make
    python studies/loss_study.py --table-only                                        # the table and the figure

Arms (pqn_lake.py's flags, LOSS_ARMS), against the records of one PQN agent (`pqn-anneal`, 128 envs), the loop at its
defaults (`mixture-anneal`, 4 agents x 128 envs) and the best consolidator so far (`mixture-rr16`):
- the perfect-merge control, `pqn-512-mb32`: one agent on the four agents' 4 x 128 envs, 32 minibatches of 512 a
  epoch: each mixture agent's number of sequential gradient steps, what a lossless data-parallel merge of the four
  would learn; `pqn-512-mb128`, 128 minibatches of 128: the 128-env agent's steps (the env count apart from the steps);
- the env-matched mixture, `mixture-4x32`: four agents x 32 envs (one agent's 128 in all; each agent as many updates
  as that agent), phases of 200 updates (the default mixture's 819,200 frames), the BigAgent at its defaults;
  `mixture-4x32-rr16` with --big-replay-ratio 16;
- merging by averaging weights, `mixture-average`: the BigAgent := the mean of the agents' weights (--merge average,
  the agents from one initialisation); `mixture-softmax-average`: weighted by a softmax of their last evaluation
  returns (--merge softmax-average, --merge-temperature 1).
"""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import tyro

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402  (runs, records, what the tables read)

ONE_AGENT = ["--num-agents", "1", "--big-agent-schedule", "none", "--num-envs", "512"]
LOSS_ARMS = {
    "pqn-512-mb32": [*ONE_AGENT, "--num-minibatches", "32"],
    "pqn-512-mb128": [*ONE_AGENT, "--num-minibatches", "128"],
    "mixture-4x32": ["--num-envs", "32", "--agent-updates-per-phase", "200"],
    "mixture-4x32-rr16": ["--num-envs", "32", "--agent-updates-per-phase", "200", "--big-replay-ratio", "16"],
    "mixture-average": ["--merge", "average"],
    "mixture-softmax-average": ["--merge", "softmax-average"],
}
LOSS_REFERENCES = ("pqn-anneal", "mixture-anneal", "mixture-rr16")  # recorded: one PQN agent, the loop, rr16


@dataclasses.dataclass
class Args:
    arms: tuple[str, ...] = tuple(LOSS_ARMS)
    """the arms of LOSS_ARMS to run"""
    runs_dir: str = "runs/loss"
    """where the runs go, with their Lakes and checkpoints"""
    record_dir: str = str(HERE / "minatar_runs")
    """where finished runs are recorded (committed)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    seeds: tuple[int, ...] = (1, 2, 3)
    frames: int = 5_000_000
    parallel: int = 2
    """runs at once, one thread each"""
    table_only: bool = False
    """print the table and draw the figure of the records without running anything"""


def to_run(args: Args) -> list:
    """(name, command) of the runs still to make, arm by arm, seed by seed, game by game (harness.still_to_run)."""
    planned = [
        harness.minatar_run(args.runs_dir, game, seed, arm, args.frames, LOSS_ARMS[arm])
        for arm in args.arms
        for seed in args.seeds
        for game in args.games
    ]
    return harness.still_to_run(planned, args.runs_dir, args.record_dir)


# GPU-hours of a 100M-frame Atari run, projected from the GPU node's measured rates (harness'): the agents' env
# steps at the rate measured for the same number of envs in all (128: one agent, 9,659 steps/s; 512: the mixture's
# four agents in their threads, 15,768), the BigAgent's updates at 2.24 ms each. A rough figure: the 512-env agent and
# the 4 x 32 mixture were not measured themselves.
GPU_STEPS_PER_S = {128: harness.GPU_AGENT_STEPS_PER_S, 512: harness.GPU_MIXTURE_STEPS_PER_S}


def gpu_hours(record: Path) -> float:
    config = json.loads((record / "config.json").read_text())
    transitions = harness.ATARI_FRAMES / harness.ATARI_FRAME_SKIP
    envs = config["num_agents"] * config["num_envs"]
    big = config["big_agent_schedule"] != "none" and config.get("merge", "big-agent") == "big-agent"
    updates = config["big_replay_ratio"] * transitions / config["big_batch_size"] if big else 0
    return (transitions / GPU_STEPS_PER_S[envs] + updates * harness.GPU_BIG_AGENT_UPDATE_S) / 3600


def normalised(args: Args, arm: str, random: dict) -> dict:
    """{seed: [normalised final return per game]} of the arm's seeds recorded on every game."""
    finals = harness.finals(args, arm, args.frames)
    seeds = [s for s in args.seeds if all(s in finals.get(g, {}) for g in args.games)]
    scale = {g: harness.PAPER_DQN[g] - random[g] for g in args.games}
    return {s: [(finals[g][s][0] - random[g]) / scale[g] for g in args.games] for s in seeds}


def table(args: Args) -> str:
    """The README's table: per arm the IQM of normalised final returns [95% CI], P(> one PQN agent) and P(> the loop
    at its defaults) [95% CI] (compare.py's rliable calls, over the seeds both have), the worst seed's normalised
    return (the mean over games), its CPU minutes per run here (one thread, another run beside it) and its projected
    GPU-hours; then each game's final return (mean ± 95% t)."""
    from rliable import metrics as rly_metrics

    compare = harness.compare

    random = harness.random_play(args)
    arms = (*LOSS_REFERENCES, *LOSS_ARMS)
    scores = {arm: normalised(args, arm, random) for arm in arms}
    interval = lambda point, ci: f"{point:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"  # noqa: E731

    def improves(arm: str, versus: str) -> str:
        both = [s for s in scores[arm] if s in scores[versus]]
        if arm == versus or not both:
            return ""
        pair = {"p": (np.array([scores[arm][s] for s in both]), np.array([scores[versus][s] for s in both]))}
        point, ci = compare.bootstrap(pair, rly_metrics.probability_of_improvement, compare.Args())
        return interval(point["p"], ci["p"][:, 0])

    out = [
        "| arm | seeds | IQM, normalised [95% CI] | P(> one PQN agent) | P(> the mixture) | worst seed | CPU min | "
        "GPU-h, 100M Atari frames |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in arms:
        if not scores[arm]:
            continue
        matrix = np.array(list(scores[arm].values()))
        point, ci = compare.bootstrap({arm: matrix}, rly_metrics.aggregate_iqm, compare.Args())
        records = [harness.run_folder(args.record_dir, f"{g}__{arm}__{s}") for g in args.games for s in scores[arm]]
        minutes = np.mean([harness.cpu_minutes(r) for r in records])
        out.append(
            f"| {arm} | {len(matrix)} | {interval(point[arm], ci[arm][:, 0])} | {improves(arm, 'pqn-anneal')} | "
            f"{improves(arm, 'mixture-anneal')} | {matrix.mean(1).min():.2f} | {minutes:.0f} | "
            f"{gpu_hours(records[0]):.1f} |"
        )
    out += ["", f"| arm | {' | '.join(args.games)} |", "| --- |" + " ---: |" * len(args.games)]
    for arm in arms:
        finals = harness.finals(args, arm, args.frames)
        cells = []
        for game in args.games:
            values = np.array([v for v, _ in finals.get(game, {}).values()])
            half = f" ± {compare.t_half_width(values, 0.95):.1f}" if len(values) > 1 else ""
            cells.append(f"{values.mean():.1f}{half} ({len(values)})" if len(values) else "")
        if any(cells):
            out.append(f"| {arm} | {' | '.join(cells)} |")
    return "\n".join(out) + f"\nrandom play (the normaliser's zero): {random}"


def figure(args: Args) -> None:
    """loss_study.png: per game the evaluation curves of every arm, the mean over its recorded seeds."""
    harness.plot_per_game(
        args,
        (*LOSS_REFERENCES, *LOSS_ARMS),
        lambda arm, game: [(frames, values) for frames, values, _ in harness.curves(args, arm, game, 0).values()],
        HERE / "loss_study.png",
        "frames",
        "evaluation return (mean over seeds)",
    )


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not args.table_only:
        harness.run_queue(to_run(args), args.runs_dir, args.record_dir, args.parallel)
    print(table(args))
    figure(args)
