"""What limits the mixture (MinAtar, 4 games): one resumable part per question, finished runs skipped; every table and
figure from the committed records (studies/minatar_runs/).

    python studies/limits_study.py --part passive       # the passive BigAgent against the agent that wrote its Lake
    python studies/limits_study.py --part acting        # the BigAgent that acts (pqn_lake_live.py), clones or not
    python studies/limits_study.py --part horizon       # one agent and the mixture where one agent stops improving
    python studies/limits_study.py --table-only         # the tables and figures of the records made so far

The tables begin with the mixture's phases as the arms part recorded them (does a phase's clone improve on the level
it starts from, and does the next BigAgent keep what its agents reached?) and end with the agents' diversity in the
acting and horizon parts' runs (their greedy actions against each other on each phase's Lake probe states;
studies/limits_diversity.png).

passive: the Lake writers, one PQN agent at pqn_lake.py's defaults for --frames with its Lake kept (`lake-writer`;
the arms part's single PQN agent, made again for its Lake), then on each writer's Lake a BigAgent trained from scratch
by studies/passive_big_agent.py with the updates the loop's replay ratio gives for the Lake's transitions, and
with 4x as many (`passive-lake-writer-x1`, `-x4`). The mixture's own Lake (`mixture-writer`, the arms part's
mixture made again) and its passive BigAgent (`passive-mixture-writer-x1`) set the data the BigAgent actually gets
beside it. Last, the loop itself with the BigAgent's updates that x4 gives it (`mixture-rr8`: --big-replay-ratio 8
for the default 2).
acting: pqn_lake_live.py at its defaults with the BigAgent acting on --acting-envs envs (128 beside the 4 x 128
agents' envs: a fifth of the frames), cloning the agents every phase (`acting`) or never (`acting-noclone`).
horizon: the single PQN agent (`pqn-horizon`) and the mixture (`mixture-horizon`) at --horizon-frames, both at their
defaults (the rate annealed over the run).

Per question, per game the final evaluation return (mean ± 95% t over seeds), and across games the IQM of returns
normalised by random play (0) and the MinAtar paper's DQN (1) with stratified bootstrap intervals, and the probability
of improvement over the arm's reference (compare.py's rliable calls; a passive BigAgent's: its Lake's writer;
mixture-rr8's: the loop at its defaults; else the question's first arm); and what each arm's final return is worth in
its reference's frames (where the reference's curve first reaches it). Runs go --parallel at a time, one thread each,
in --runs-dir (Lakes and checkpoints: not committed); a finished run's metrics (gzipped) and config.json are copied into
--record-dir.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
import minatar_study  # noqa: E402  (its record helpers and the MinAtar paper's DQN scores)

# The last commit whose pqn_lake.py has the flags of the studies closed since (--agents-share-rollouts, --big-learner,
# --big-agent-reset, --eval-window, --decay-frames): their records name the commits that ran them; a driver asked to
# run such an arm again says to check this one out.
CLOSED_AT = "db95050"

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
    part: Literal["passive", "acting", "horizon"] = "passive"
    """which question to run (see above)"""
    runs_dir: str = "runs/limits"
    """where the runs go, with their Lakes and checkpoints"""
    record_dir: str = str(HERE / "minatar_runs")
    """where finished runs are recorded (committed)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    seeds: tuple[int, ...] = (1, 2, 3)
    frames: int = 5_000_000
    """frames of the passive and acting parts' runs (the arms part's)"""
    horizon_frames: int = 20_000_000
    """frames of the horizon part's runs"""
    acting_envs: int = 128
    """acting: the BigAgent's envs"""
    passive_scales: tuple[int, ...] = (1, 4)
    """passive: the passive BigAgent's updates, in multiples of the loop's replay ratio's (on the single agent's Lake;
    the mixture's Lake gets x1)"""
    arms: tuple[str, ...] = ()
    """only these of the part's arms (e.g. --arms acting: one arm on every game before the next); default: all"""
    parallel: int = 2
    """runs at once, one thread each"""
    table_only: bool = False
    """print the tables and draw the figures of the records without running anything"""


def script_run(args: Args, game: str, seed: int, arm: str) -> tuple:
    """(name, frames, command) of a pqn_lake.py or pqn_lake_live.py run of the arm."""
    frames = args.horizon_frames if arm.endswith("horizon") else args.frames
    single = ["--num-agents", "1", "--big-agent-schedule", "none"]
    script, flags = {
        "lake-writer": ("pqn_lake.py", single),
        "mixture-writer": ("pqn_lake.py", []),
        "mixture-rr8": ("pqn_lake.py", ["--big-replay-ratio", "8"]),
        "pqn-horizon": ("pqn_lake.py", single),
        "mixture-horizon": ("pqn_lake.py", []),
        "acting": ("pqn_lake_live.py", ["--big-agent-num-envs", str(args.acting_envs)]),
        "acting-noclone": (
            "pqn_lake_live.py",
            ["--big-agent-num-envs", str(args.acting_envs), "--clone-every-updates", "0"],
        ),
    }[arm]
    return minatar_study.mixture(args, game, seed, arm, frames, flags, script)


def run_folder(where: str, name: str):
    found = sorted(Path(where).glob(f"MinAtar_*__{name}__*"))
    return found[-1] if found else None


def keep_record(args: Args, run_dir: Path) -> None:
    """metrics.jsonl and config.json of a finished run into --record-dir (its paths made relative to --runs-dir)."""
    record = Path(args.record_dir) / run_dir.name
    if record.is_dir():
        return
    record.mkdir(parents=True)
    minatar_study.compare.write_record_metrics(record, minatar_study.compare.metrics_text(run_dir))
    config = json.loads((run_dir / "config.json").read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout

    def relative(path: str) -> str:  # a path of this machine, written relative to --runs-dir
        inside = os.path.relpath(path, os.path.abspath(args.runs_dir))
        return "<runs-dir>" if inside == "." else f"<runs-dir>/{inside}"

    config = {k: relative(v) if isinstance(v, str) and os.path.isabs(v) else v for k, v in config.items()}
    (record / "config.json").write_text(json.dumps({**config, "commit": commit.strip()}, indent=2) + "\n")
    print(f"{run_dir.name}: recorded", flush=True)


def to_run(args: Args) -> list:
    """(name, command) of the part's runs still to make, seed by seed; a passive run as ("passive", its writer, its
    scale), its command made once its writer has finished. The passive part's order: each game's single-agent Lake
    and its passive BigAgent x1 first, then the x4 ones, then the mixtures' Lakes and theirs (Lakes freed early)."""
    stages = {
        "passive": [
            (("lake-writer",), (1,)),
            ((), tuple(s for s in args.passive_scales if s != 1)),
            (("mixture-writer",), (1,)),
            (("mixture-rr8",), ()),
        ],
        "acting": [(("acting", "acting-noclone"), ())],
        "horizon": [(("pqn-horizon", "mixture-horizon"), ())],
    }
    queue = []
    for seed in args.seeds:
        for arms, scales in stages[args.part]:
            for game in args.games:
                for arm in arms:
                    if args.arms and arm not in args.arms:
                        continue
                    name, frames, command = script_run(args, game, seed, arm)
                    run_dir = run_folder(args.runs_dir, name)
                    recorded = run_folder(args.record_dir, name)
                    if recorded is None and minatar_study.evaluated(run_dir) >= frames:
                        keep_record(args, run_dir)  # (finished by an earlier call that was stopped before recording)
                    if max(minatar_study.evaluated(run_dir), minatar_study.evaluated(recorded)) < frames:
                        if minatar_study.progress(run_dir) > 0:  # resumed from its last checkpoint
                            command = [command[0], "--resume", str(run_dir), "--total-frames", str(frames)]
                        elif run_dir is not None:
                            shutil.rmtree(run_dir)
                        queue.append((name, command))
                writer = arms[0] if arms else "lake-writer"
                for scale in scales if args.part == "passive" else ():
                    name = f"{game}__passive-{writer}-x{scale}__{seed}"
                    if args.arms and f"passive-{writer}-x{scale}" not in args.arms:
                        continue
                    queue.append((name, ("passive", f"{game}__{writer}__{seed}", scale)))
    return queue


def passive_command(args: Args, writer: str, scale: int):
    """passive_big_agent.py on the writer's Lake, or None while the writer is unfinished or the run recorded."""
    run_dir = run_folder(args.runs_dir, writer)
    if run_dir is None or minatar_study.evaluated(run_dir) < args.frames:
        return None
    return [
        "studies/passive_big_agent.py",
        "--one",
        str(run_dir),
        "--update-scale",
        str(scale),
        "--seed",
        writer.rsplit("__", 1)[1],
        "--runs-dir",
        str(Path(args.runs_dir) / "passive"),
        "--record-dir",
        args.record_dir,
    ]


def run_all(args: Args) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    queue, running, start = to_run(args), [], time.time()
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    while queue or running:
        for item in list(queue):
            if len(running) >= args.parallel:
                break
            name, command = item
            if command[0] == "passive":
                if run_folder(args.record_dir, name) is not None:
                    queue.remove(item)
                    continue
                command = passive_command(args, command[1], command[2])
                if command is None:
                    continue  # its writer is still running
            queue.remove(item)
            running.append(minatar_study.launch(args.runs_dir, name, command, env))
        for name, proc in minatar_study.ended(running):
            run_dir = run_folder(args.runs_dir, name)
            # a run stopped by SIGTERM also exits 0, with its checkpoint: record only a run that reached its frames
            if (
                run_dir is not None
                and proc.returncode == 0
                and minatar_study.evaluated(run_dir)
                >= json.loads((run_dir / "config.json").read_text())["total_frames"]
            ):
                keep_record(args, run_dir)
    print(f"all runs done in {(time.time() - start) / 60:.1f} min", flush=True)


def finals(args: Args, arm: str, budget: int) -> dict:
    """{game: {seed: (eval/return at `budget` frames, random play's return or None)}} of the arm's recorded runs that
    reached it: compare.py's final return (interpolated between the evaluations around the budget)."""
    out = {}
    for game in args.games:
        for seed, (frames, values, random) in curves(args, arm, game, budget).items():
            out.setdefault(game, {})[seed] = (float(np.interp(budget, frames, values)), random)
    return out


def curves(args: Args, arm: str, game: str, budget: int) -> dict:
    """{seed: (frames, eval/return, random play's return or None)} of the arm's recorded runs that reached `budget`."""
    import compare

    out = {}
    for seed in args.seeds:
        run_dir = run_folder(args.record_dir, f"{game}__{arm}__{seed}")
        if run_dir is not None:
            frames, values, _, random = compare.read_metrics(run_dir, "eval/return")
            if len(frames) and frames[-1] >= budget:
                out[seed] = (frames, values, random)
    return out


# The zero of every normalised score, per game: random play (eval/random_return, ε = 1) pooled over the records of the
# arms study's one PQN agent and loop at its defaults, seeds 1-3, so that adding an arm to a table moves no other row
NORMALISER_ARMS, NORMALISER_SEEDS = ("pqn-anneal", "mixture-anneal"), (1, 2, 3)


def random_play(args: Args) -> dict:
    """{game: random play's return}, the normaliser's zero (NORMALISER_ARMS)."""
    fixed = dataclasses.replace(args, seeds=NORMALISER_SEEDS)
    randoms = {
        game: [random for arm in NORMALISER_ARMS for _, _, random in curves(fixed, arm, game, 0).values()]
        for game in args.games
    }
    return {game: float(np.mean(r)) for game, r in randoms.items() if r}


def question_table(args: Args, question: str) -> str:
    """Per arm: per game the final return (mean ± 95% t, seeds), its IQM normalised [95% CI] where every game has a
    run, and P(arm > its reference) [95% CI] over the seeds both have."""
    import compare
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
                [(all_finals[arm][g][s][0] - random[g]) / (minatar_study.PAPER_DQN[g] - random[g]) for g in args.games]
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
            rows = [json.loads(line) for line in minatar_study.compare.metrics_text(run_dir).splitlines()]
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
    import compare

    out = []
    for seed in args.seeds:
        run_dir = run_folder(args.record_dir, f"{game}__{arm}__{seed}")
        if run_dir is not None:
            by_frames = {}
            for line in minatar_study.compare.metrics_text(run_dir).splitlines():
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


def plot_per_game(args: Args, arms, series, png_path: Path, xlabel: str, ylabel: str, ylim=None) -> None:
    """Per game a panel, per arm the mean over its recorded seeds of series(arm, game) = [(frames, values) a seed],
    over the points every seed reached."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.games), figsize=(4 * len(args.games), 3.6), squeeze=False)
    for ax, game in zip(axes[0], args.games):
        for i, arm in enumerate(arms):
            runs = series(arm, game)
            if runs:
                n = min(len(values) for _, values in runs)
                ax.plot(
                    np.asarray(runs[0][0][:n]),
                    np.mean([np.asarray(values[:n]) for _, values in runs], axis=0),
                    color=f"C{i}",
                    marker="o",
                    ms=2,
                    label=f"{arm} (n={len(runs)})",
                )
        ax.set_title(game, fontsize="small")
        ax.set_xlabel(xlabel)
        ax.set_ylim(ylim)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small")
    axes[0, 0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    print(f"figure: {png_path}")


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not args.table_only:
        run_all(args)
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
