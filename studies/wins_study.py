"""Can the mixture win? (MinAtar, 4 games, 5M frames): consolidators that learn more from the Lake than its agents did.
Answered: every table and figure from the committed records (studies/minatar_runs/); the runs were made by this driver
at the commit limits_study.RAN_AT names (harness.closed).

    python studies/wins_study.py --table-only                                       # the tables and figures

passive: a BigAgent trained from scratch (studies/passive_big_agent.py at RAN_AT) on each game's single-PQN Lake (the
limits study's `lake-writer`), one run per cell, a cell being `<update scale>:<learner>:<reset>`: the BigAgent's
samples per transition are 2 x the scale (the loop's --big-replay-ratio 2), a reset happens at each of the loop's
phases. The bar is the writer's own return: a consolidator that cannot beat its writer passively cannot make the
mixture win. loop: pqn_lake.py's mixture with a remedy, 5M frames (`mixture-shared`, agents that learn from all four
agents' rollouts; `mixture-rr16`, the screen's x8 consolidator as the loop's BigAgent, --big-replay-ratio 16;
`mixture-shared-rr16`, both), against the records of one PQN agent (`pqn-anneal`), the loop at its defaults
(`mixture-anneal`) and with 4x the BigAgent's updates (`mixture-rr8`).

The table: per cell, per game the final evaluation return (mean ± 95% t over seeds), across games the IQM of returns
normalised by random play (0) and the MinAtar paper's DQN (1) with stratified bootstrap intervals, and P(cell > its
writer) (limits_study.py's question_table: compare.py's rliable calls); then the README's table, and how much the
in-loop arms' last evaluation step moved (the mixture's short seventh phase) against the step before it.
"""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import tyro

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402  (what the tables read)
import limits_study  # noqa: E402  (its question tables)
from harness import compare, cpu_minutes  # noqa: E402

WRITER = "lake-writer"  # the single PQN agent whose Lake the passive cells read (the limits study's)
LOOP_REFERENCES = ("pqn-anneal", "mixture-anneal", "mixture-rr8")  # recorded: one PQN agent (the P reference), the loop
limits_study.QUESTIONS["wins-loop"] = (
    *LOOP_REFERENCES,
    "mixture-shared",
    "mixture-rr16",
    "mixture-shared-rr16",
)  # the in-loop table's arms, P's reference first


@dataclasses.dataclass
class Args:
    cells: tuple[str, ...] = (
        "1:dqn:none",
        "4:dqn:none",
        "1:q-lambda:none",
        "4:q-lambda:none",
        "4:dqn:scratch",
        "4:dqn:shrink-perturb",
        "8:dqn:none",
        "8:dqn:shrink-perturb",
    )
    """the passive screen's cells: <update scale>:<learner>:<reset> (scale 1: the loop's 2 samples per transition)"""
    record_dir: str = str(HERE / "minatar_runs")
    """where the runs are recorded (committed)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    seeds: tuple[int, ...] = (1, 2, 3)
    frames: int = 5_000_000
    """the writers' frames"""
    table_only: bool = False
    """print the tables and draw the figures of the records (the only thing this driver does now)"""


def cell_arm(cell: str) -> str:
    """The arm of a cell: passive-lake-writer-x<scale>[-<learner>][-<reset>]."""
    scale, learner, reset = cell.split(":")
    rule = "".join(f"-{v}" for v, default in ((learner, "dqn"), (reset, "none")) if v != default)
    return f"passive-{WRITER}-x{scale}{rule}"


def limits_args(args: Args) -> limits_study.Args:
    return limits_study.Args(record_dir=args.record_dir, games=args.games, seeds=args.seeds, frames=args.frames)


def tables(args: Args) -> str:
    limits_study.QUESTIONS["wins-passive"] = (WRITER, *dict.fromkeys(cell_arm(c) for c in args.cells))
    parts = (
        ("passive screen: P(cell > its writer, lake-writer)", "wins-passive"),
        ("in the loop: P(arm > one PQN agent, pqn-anneal)", "wins-loop"),
    )
    return "\n\n".join(
        [
            *(
                title + "\n" + limits_study.question_table(limits_args(args), question).rsplit("\n", 1)[0]
                for title, question in parts
            ),
            "what wins (the README's table)\n" + what_wins(args),
            "the last evaluation step: its change and the one before it, normalised\n" + last_step_table(args),
        ]
    )


def last_step_table(args: Args) -> str:
    """Per in-loop arm: the change of eval/return over a run's last evaluation step (for the mixture arms the short
    seventh phase, 98,304 frames, as 5M frames is not a whole number of phases) and over the step before it, normalised
    as the IQM is (the MinAtar paper's DQN minus random play), mean ± 95% t over runs, and the runs it rose in. The
    finals are read at 5M frames, between the last two evaluations."""
    largs, out = limits_args(args), []
    out += ["| arm | runs | frames of the last step | last step | rose | the step before | rose |"]
    out += ["| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm in limits_study.QUESTIONS["wins-loop"]:
        last, before, frames = [], [], []
        for game in args.games:
            for values_frames, values, random in harness.curves(largs, arm, game, 0).values():
                scale = harness.PAPER_DQN[game] - (random or 0.0)
                last.append((values[-1] - values[-2]) / scale)
                before.append((values[-2] - values[-3]) / scale)
                frames.append(int(values_frames[-1] - values_frames[-2]))
        if last:
            cells = [
                f"{np.mean(c):+.3f} ± {compare.t_half_width(c, 0.95):.3f} | {sum(np.array(c) > 0)}/{len(c)}"
                for c in (last, before)
            ]
            out.append(f"| {arm} | {len(last)} | {min(frames):,}-{max(frames):,} | {' | '.join(cells)} |")
    return "\n".join(out)


def gpu_hours(record: Path) -> float:
    """The projected GPU-hours of a 100M-frame Atari run with the record's flags: its agents' env steps at the measured
    rate (one agent's, or the mixture's agents' in their threads), its BigAgent's updates (--big-replay-ratio samples
    per transition, --big-batch-size each) at theirs."""
    config = json.loads((record / "config.json").read_text())
    transitions = harness.ATARI_FRAMES / harness.ATARI_FRAME_SKIP
    steps_per_s = harness.GPU_AGENT_STEPS_PER_S if config["num_agents"] == 1 else harness.GPU_MIXTURE_STEPS_PER_S
    updates = 0 if config["big_agent_schedule"] == "none" else config["big_replay_ratio"] * transitions
    return (transitions / steps_per_s + updates / config["big_batch_size"] * harness.GPU_BIG_AGENT_UPDATE_S) / 3600


def what_wins(args: Args) -> str:
    """The README's table: per in-loop arm its IQM and P(> one PQN agent) (question_table's), its mean minutes per
    run here, and the projected GPU-hours of a 100M-frame Atari run."""
    lines = limits_study.question_table(limits_args(args), "wins-loop").splitlines()[2:-1]
    out = [
        "| arm | IQM, normalised [95% CI] | P(> one PQN agent) [95% CI] | CPU min per run | GPU-h, 100M Atari frames |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for line in lines:
        arm, *_, iqm, improves = (cell.strip() for cell in line.strip("|").split("|"))
        records = [harness.run_folder(args.record_dir, f"{g}__{arm}__{s}") for g in args.games for s in args.seeds]
        records = [r for r in records if r is not None]
        minutes = sum(map(cpu_minutes, records)) / len(records)
        out.append(
            f"| {arm} | {iqm} | {improves} | {minutes:.0f} ({len(records)} runs) | {gpu_hours(records[0]):.1f} |"
        )
    return "\n".join(out)


def figures(args: Args) -> None:
    """wins_passive.png, wins_loop.png: per game the evaluation curves, mean over the recorded seeds (a passive
    BigAgent's on its writer's frame axis: the share of its updates made)."""
    largs = limits_args(args)
    for question, png, axis in (
        ("wins-passive", "wins_passive.png", "frames (a passive BigAgent: its writer's)"),
        ("wins-loop", "wins_loop.png", "frames"),
    ):
        harness.plot_per_game(
            largs,
            limits_study.QUESTIONS[question],
            lambda arm, game: [(frames, values) for frames, values, _ in harness.curves(largs, arm, game, 0).values()],
            HERE / png,
            axis,
            "eval/return",
        )


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not args.table_only:
        harness.closed("studies/wins_study.py", limits_study.RAN_AT)
    print(tables(args))
    figures(args)
