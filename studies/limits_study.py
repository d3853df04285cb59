"""What limits the mixture (MinAtar, 4 games)? Answered: every table and figure from the committed records
(studies/minatar_runs/); its runs were made by this driver at the commit RAN_AT names (harness.closed).

    python studies/limits_study.py --table-only         # the tables and figures of the records

The tables begin with the mixture's phases as the arms part recorded them (does a phase's clone improve on the level
it starts from, and does the next BigAgent keep what its agents reached?) and end with the agents' diversity in the
acting and horizon parts' runs (their greedy actions against each other on each phase's Lake probe states;
studies/limits_diversity.png).

passive: the Lake writers, one PQN agent at pqn_lake.py's defaults with its Lake kept (`lake-writer`), then on each
writer's Lake a BigAgent trained from scratch (studies/passive_big_agent.py at RAN_AT) with the updates the loop's
replay ratio gives for the Lake's transitions, and with 4x as many (`passive-lake-writer-x1`, `-x4`). The mixture's
own Lake (`mixture-writer`) and its passive BigAgent (`passive-mixture-writer-x1`) set the data the BigAgent actually
gets beside it. Last, the loop itself with the BigAgent's updates that x4 gives it (`mixture-rr8`: --big-replay-ratio
8 for the default 2).
acting: pqn_lake_live.py at its defaults with the BigAgent acting on 128 envs (beside the 4 x 128 agents' envs: a
fifth of the frames), cloning the agents every phase (`acting`) or never (`acting-noclone`).
horizon: the single PQN agent (`pqn-horizon`) and the mixture (`mixture-horizon`) at 20M frames, both at their
defaults (the rate annealed over the run).

Per question, per game the final evaluation return (mean ± 95% t over seeds), and across games the IQM of returns
normalised by random play (0) and the MinAtar paper's DQN (1) with stratified bootstrap intervals, and the probability
of improvement over the arm's reference (compare.py's rliable calls; a passive BigAgent's: its Lake's writer;
mixture-rr8's: the loop at its defaults; else the question's first arm); and what each arm's final return is worth in
its reference's frames (where the reference's curve first reaches it).
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
from harness import compare, curves, finals, plot_per_game, random_play, run_folder  # noqa: E402

RAN_AT = "ba7c7d5"  # the last commit whose drivers ran the closed questions' arms (and passive_big_agent.py)

# per question: its arms, the first the reference the others are compared with (a passive BigAgent's: its writer;
# mixture-rr8's: the loop at its defaults)
QUESTIONS = {
    "passive": (
        "lake-writer",
        "passive-lake-writer-x1",
        "passive-lake-writer-x4",
        "mixture-writer",
        "passive-mixture-writer-x1",
        "mixture-rr8",
    ),
    "acting": ("pqn-anneal", "mixture-anneal", "acting", "acting-noclone"),
    "horizon": ("pqn-horizon", "mixture-horizon"),
}


def reference(question: str, arm: str) -> str:
    """The arm an arm is compared with: a passive BigAgent's writer (tandem: the same data, acting or not); the loop
    with 4x the BigAgent's updates: the loop at its defaults (do more updates help?); else the question's first arm."""
    if arm.startswith("passive-"):
        return arm.removeprefix("passive-").rsplit("-x", 1)[0]
    return "mixture-writer" if arm == "mixture-rr8" and question == "passive" else QUESTIONS[question][0]


@dataclasses.dataclass
class Args:
    record_dir: str = str(HERE / "minatar_runs")
    """where the runs are recorded (committed)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    seeds: tuple[int, ...] = (1, 2, 3)
    frames: int = 5_000_000
    """frames of the passive and acting parts' runs (the arms part's)"""
    horizon_frames: int = 20_000_000
    """frames of the horizon part's runs"""
    table_only: bool = False
    """print the tables and draw the figures of the records (the only thing this driver does now)"""


def question_table(args: Args, question: str) -> str:
    """Per arm: per game the final return (mean ± 95% t, seeds), its IQM normalised [95% CI] where every game has a
    run, and P(arm > its reference) [95% CI] over the seeds both have."""
    from rliable import metrics as rly_metrics

    arms = QUESTIONS[question]
    budget = args.horizon_frames if question == "horizon" else args.frames
    all_finals = {arm: finals(args, arm, budget) for arm in arms}
    random = random_play(args)

    def scores(arm: str, seeds: list):
        if not all(game in random and all(s in all_finals[arm].get(game, {}) for s in seeds) for game in args.games):
            return None
        return np.array(
            [
                [(all_finals[arm][g][s][0] - random[g]) / (harness.PAPER_DQN[g] - random[g]) for g in args.games]
                for s in seeds
            ]
        )

    interval = lambda point, ci: f"{point:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"  # noqa: E731
    lines = [
        f"| arm | {' | '.join(args.games)} | IQM, normalised [95% CI] | P(> reference) [95% CI] |",
        "| --- |" + " ---: |" * (len(args.games) + 2),
    ]
    for arm in arms:
        cells = []
        for game in args.games:
            values = np.array([v for v, _ in all_finals[arm].get(game, {}).values()])
            cells.append(
                ""
                if len(values) == 0
                else f"{values.mean():.1f}"
                + (f" ± {compare.t_half_width(values, 0.95):.1f} ({len(values)})" if len(values) > 1 else " (1)")
            )
        seeds = [s for s in args.seeds if all(s in all_finals[arm].get(g, {}) for g in args.games)]
        iqm = improves = "n/a"
        if seeds and scores(arm, seeds) is not None:
            point, ci = compare.bootstrap({arm: scores(arm, seeds)}, rly_metrics.aggregate_iqm, compare.Args())
            iqm = interval(point[arm], ci[arm][:, 0])
            versus = reference(question, arm)
            both = [s for s in seeds if all(s in all_finals[versus].get(g, {}) for g in args.games)]
            if arm != versus and both:
                pair = f"{arm},{versus}"
                point, ci = compare.bootstrap(
                    {pair: (scores(arm, both), scores(versus, both))},
                    rly_metrics.probability_of_improvement,
                    compare.Args(),
                )
                improves = interval(point[pair], ci[pair][:, 0])
        if any(cells):
            lines.append(f"| {arm} | {' | '.join(cells)} | {iqm} | {improves} |")
    return "\n".join(lines) + f"\nreference: a passive BigAgent's writer, mixture-rr8's mixture-writer, else {arms[0]}"


def ratchet_table(args: Args, arm: str = "mixture-anneal") -> str:
    """The mixture's phases, from the arms part's records: per game over every phase from the second, the clones'
    first evaluation (the BigAgent's eval/return at a clone), the agents' level at the next clone, and the BigAgent
    made then over that level (distill/big_over_agents: median; mean ratios)."""
    lines = [
        "| game | clones | clones at a clone | agents at the next clone | ratio | next BigAgent / agents (median) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for game in args.games:
        starts, ends, over = [], [], []
        for seed in args.seeds:
            run_dir = run_folder(args.record_dir, f"{game}__{arm}__{seed}")
            if run_dir is None:
                continue
            rows = [json.loads(line) for line in compare.metrics_text(run_dir).splitlines()]
            clones = [r for r in rows if "distill/big_minus_agents" in r]
            for a, b in zip(clones, clones[1:]):
                starts.append(a["eval/return"])
                ends.append(b["eval/return"] - b["distill/big_minus_agents"])
                if ends[-1] > 0:
                    over.append(b["eval/return"] / ends[-1])
        if starts:
            lines.append(
                f"| {game} | {len(starts)} | {np.mean(starts):.1f} | {np.mean(ends):.1f} | "
                f"{np.mean(ends) / np.mean(starts):.2f}x | {np.median(over):.2f} |"
            )
    return "\n".join(lines)


def flattening_table(args: Args, arms=("pqn-horizon", "mixture-horizon")) -> str:
    """Has an arm stopped improving by --horizon-frames? Per game, over its recorded seeds' curves: its level (the
    mean evaluation return over the tenth of the run before it; interpolated where a tenth holds none) at 80% of the
    run and at its end, and the last fifth's gain as a share of the end's level; under 5% counts as flat (the horizon
    the question asks for: flat on >= 3 of 4 games)."""
    T = args.horizon_frames
    lines = [
        "| arm | game | seeds | level at 80% | level at 100% | last fifth's gain | flat |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for arm in arms:
        for game in args.games:
            levels = []
            for frames, values, _ in curves(args, arm, game, T).values():
                # a mixture evaluates at its clones only: a tenth may hold none
                def level(x, frames=frames, values=values):
                    inside = (frames > x - 0.1 * T) & (frames <= x)
                    return values[inside].mean() if inside.any() else float(np.interp(x, frames, values))

                levels.append((level(0.8 * T), level(frames[-1])))
            if levels:
                at80, at100 = np.mean(levels, axis=0)
                gain = (at100 - at80) / abs(at100) if at100 else float("nan")
                lines.append(
                    f"| {arm} | {game} | {len(levels)} | {at80:.1f} | {at100:.1f} | {gain:+.1%} | "
                    f"{'yes' if gain < 0.05 else 'no'} |"
                )
    return "\n".join(lines)


def equivalent_frames_table(args: Args, question: str) -> str:
    """What an arm's frames are worth in its reference arm's frames: per game, the first frames at which the
    reference's level (its mean curve over seeds on 200 steps of the budget, averaged over the trailing tenth) reaches
    the arm's final return (mean over seeds), and that as a share of the budget (> 1x: never within it)."""
    arms = QUESTIONS[question]
    budget = args.horizon_frames if question == "horizon" else args.frames
    grid = np.linspace(0, budget, 201)
    lines = [f"| arm | {' | '.join(args.games)} |", "| --- |" + " ---: |" * len(args.games)]
    for arm in arms[1:]:
        cells = []
        for game in args.games:
            versus, own = curves(args, reference(question, arm), game, budget), curves(args, arm, game, budget)
            if not versus or not own:
                cells.append("")
                continue
            mean = np.mean([np.interp(grid, frames, values) for frames, values, _ in versus.values()], axis=0)
            tenth = (len(grid) - 1) // 10
            level = np.array([mean[max(0, i - tenth) : i + 1].mean() for i in range(len(grid))])
            reached = np.nonzero(level >= np.mean([np.interp(budget, f, v) for f, v, _ in own.values()]))[0]
            cells.append(
                f"{grid[reached[0]] / 1e6:.2f}M ({grid[reached[0]] / budget:.2f}x)" if len(reached) else "> 1x"
            )
        if any(cells):
            lines.append(f"| {arm} | {' | '.join(cells)} |")
    return "\n".join(lines)


# the runs of questions 2 and 3 with several agents: their diversity (table and studies/limits_diversity.png)
DIVERSE_ARMS = ("acting", "acting-noclone", "mixture-horizon")


def diversity(args: Args, arm: str, game: str) -> list:
    """Per recorded seed, (frames, the agents' diversity/disagreement) at each phase's end (the share of the phase's
    Lake probe states where two agents' greedy actions differ, mean over pairs), in phase order (a resumed phase: its
    last line)."""

    out = []
    for seed in args.seeds:
        run_dir = run_folder(args.record_dir, f"{game}__{arm}__{seed}")
        if run_dir is not None:
            by_frames = {}
            for line in compare.metrics_text(run_dir).splitlines():
                row = json.loads(line)
                if compare.DIVERSITY_KEY in row:
                    by_frames[row["global_frames"]] = row[compare.DIVERSITY_KEY]
            if by_frames:
                out.append((sorted(by_frames), [by_frames[f] for f in sorted(by_frames)]))
    return out


def diversity_table(args: Args, arms=DIVERSE_ARMS) -> str:
    """Per arm and game, the agents' disagreement at the first phase's end, at the middle phase's and at the last
    phase's (mean over seeds, over the phases every seed reached): do the clones keep the agents apart?"""
    lines = [
        "| arm | game | seeds | phases | first phase | middle phase | last phase |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm in arms:
        for game in args.games:
            runs = [values for _, values in diversity(args, arm, game)]
            if runs:
                n = min(map(len, runs))
                mean = np.mean([run[:n] for run in runs], axis=0)
                lines.append(
                    f"| {arm} | {game} | {len(runs)} | {n} | {mean[0]:.2f} | {mean[(n - 1) // 2]:.2f} | "
                    f"{mean[-1]:.2f} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not args.table_only:
        harness.closed("studies/limits_study.py", RAN_AT)
    print(f"the mixture's phases (mixture-anneal, 5M frames):\n{ratchet_table(args)}")
    for question, arms in QUESTIONS.items():  # a question with a record of its own runs: its table and figure
        own = [arm for arm in arms if arm not in ("pqn-anneal", "mixture-anneal")]  # (those: the arms part's)
        if any(
            run_folder(args.record_dir, f"{game}__{arm}__{seed}")
            for arm in own
            for game in args.games
            for seed in args.seeds
        ):
            print(f"\n{question}:\n{question_table(args, question)}")
            print(f"\nthe arms' final returns in their reference's frames:\n{equivalent_frames_table(args, question)}")
            if question == "horizon":
                print(f"\nhas it stopped improving by {args.horizon_frames:,} frames?\n{flattening_table(args)}")
            # (a passive BigAgent's evaluations on its writer's frame axis: the share of its updates made)
            plot_per_game(
                args,
                QUESTIONS[question],
                lambda arm, game: [(frames, values) for frames, values, _ in curves(args, arm, game, 0).values()],
                HERE / f"limits_{question}.png",
                "frames (a passive BigAgent: its writer's)" if question == "passive" else "frames",
                "evaluation return (mean over seeds)",
            )
    if any(diversity(args, arm, game) for arm in DIVERSE_ARMS for game in args.games):
        print(f"\nthe agents' disagreement at phase ends (diversity/disagreement):\n{diversity_table(args)}")
        plot_per_game(
            args,
            DIVERSE_ARMS,
            lambda arm, game: diversity(args, arm, game),
            HERE / "limits_diversity.png",
            "frames (at each phase's end)",
            "agents' disagreement (mean over pairs)",
            ylim=(0, 1),
        )
