"""Atari on this CPU (Breakout-v5): our PQN against CleanRL's own PQN run here, then the paper question.
Resumable parts, finished runs skipped; every table and figure from the committed records (studies/atari_runs/).

    python studies/atari_study.py --part parity     # ours at CleanRL pqn_atari_envpool.py's settings, by flags
    peer-cleanrl/bin/python studies/cleanrl_peer.py --cleanrl cleanrl --steps 1250000   # the peer (5M frames)
    python studies/atari_study.py --part mixture    # one PQN agent against the mixture, the project's defaults
    python studies/atari_study.py --table-only      # the tables and figures of the records made so far

parity: `pqn-cleanrl` is pqn_lake.py's single-PQN control (--num-agents 1 --big-agent-schedule none) at CleanRL's
settings: 8 envs x 128 steps, 4 epochs x 4 minibatches, ε 1 -> 0.01 over a tenth of the run (the rest, RAdam 2.5e-4
annealed to 0, grad-norm 10, γ 0.99, λ 0.65, LayerNorm, are the defaults). One yardstick for both sides: full-game
training returns (`charts/episodic_return`: the mean of the games each update ended, as our loop logs them; the peer's
games grouped so by its updates, of the same 4,096 frames), their mean over the run's last 2% ("final") and last 10% of
frames, ours / theirs with a percentile bootstrap interval over seeds; our greedy evaluation (10 full games at ε 0.05
every 50 updates) beside it. Where the environments differ: envpool's episodic_life makes a lost life the end of the
learner's episode and the peer's agent must press FIRE to serve again; ours makes a lost life a terminal for the learner
too, and presses FIRE after it (as CleanRL dqn_atari's FireResetEnv in effect).

mixture: one PQN agent (`pqn`) against the mixture (`mixture`: 4 agents x 2.5M frames), both at pqn_lake.py's Atari
defaults (128 envs x 32 steps, 2 epochs x 32 minibatches; 16,384 frames an agent update) but for the mixture's phases:
--agent-updates-per-phase 25 (1.64M frames, 6 whole phases and a part in 10M: six clones). The table: the final greedy
return (interpolated at 10M), the mean of the run's last 10% of evaluations, their human-normalised IQM [95% stratified
bootstrap CI] over seeds, and P(arm > pqn). `mixture-4x32-rr16`: the loss study's env-matched mixture with
--big-replay-ratio 16 (4 agents x 32 envs, 100 updates a phase: the same frames a phase and per agent update as one
128-env agent's), its best mixture on MinAtar.

Runs go --parallel at a time (one at a time is faster here: two Atari runs side by side at one thread each went ~160
steps/s apiece, one alone with both threads ~410), in --runs-dir with their Lakes and checkpoints (not committed); a
finished run's config.json and gzipped metrics are copied into --record-dir.
"""

import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402  (runs, records, the bootstrap ratio)
from harness import compare  # noqa: E402

SINGLE = ["--num-agents", "1", "--big-agent-schedule", "none"]
RR16 = ["--num-envs", "32", "--big-replay-ratio", "16"]  # the loss study's best; a phase: 4x --phase-updates
ARMS = {
    "parity": {
        "pqn-cleanrl": [
            *SINGLE,
            *("--num-envs", "8", "--num-steps", "128", "--update-epochs", "4", "--num-minibatches", "4"),
            *("--agent-epsilon-end", "0.01"),
        ]
    },
    "mixture": {"pqn": SINGLE, "mixture": [], "mixture-4x32-rr16": RR16},  # (the mixture's phases: --phase-updates)
}
PEER = "cleanrl-pqn"  # cleanrl_peer.py's records
UPDATE_FRAMES = 8 * 128 * 4  # an update of CleanRL's PQN, and of ours at its settings: 8 envs x 128 steps x frame skip
CLEANRL_40M = {"Breakout-v5": "384.85 ± 12.39"}  # CleanRL docs/rl-algorithms/pqn.md: 40M frames, last 100 episodes


@dataclasses.dataclass
class Args:
    part: Literal["parity", "mixture"] = "parity"
    """which part to run (see above)"""
    runs_dir: str = "runs/atari"
    """where the runs go, with their Lakes and checkpoints"""
    record_dir: str = str(HERE / "atari_runs")
    """where finished runs are recorded (committed)"""
    games: tuple[str, ...] = ("Breakout-v5",)
    seeds: tuple[int, ...] = (1, 2, 3)
    parity_frames: int = 5_000_000
    """frames of the parity part's runs: CleanRL's script keeps no checkpoint, and 10M frames of it take ~3.6 h here
    (191 steps/s alone on both cores), more than a 3-hour session; 5M take ~1.8 h (cleanrl_peer.py --steps 1250000)"""
    frames: int = 10_000_000
    """frames of the mixture part's runs (the mixture's: all four agents')"""
    phase_updates: int = 25
    """the mixture's --agent-updates-per-phase (25: 1.64M frames, six clones in 10M)"""
    extra: str = ""
    """flags added to every run's command, one string (the smoke test's tiny sizes)"""
    figure: str = str(HERE / "atari_study.png")
    """where the figure goes"""
    arms: tuple[str, ...] = ()
    """only these of the part's arms; default: all"""
    parallel: int = 1
    """runs at once"""
    threads: int = 2
    """torch threads of each run (2 for one run alone on a 2-core machine, 1 for two at once)"""
    table_only: bool = False
    """print the tables and draw the figures of the records without running anything"""
    gpu_runs: str = ""
    """a GPU check's learning runs (benchmarks/gpu_runs/<node>/d_learning: the same seed and schedules on a GPU, cut
    short): their curves beside this CPU's seeds at the same frames (gpu_learning.png, and a table)"""


def run_name(game: str, arm: str, seed: int) -> str:
    return f"{game.split('-')[0]}__{arm}__{seed}"


def budget(args: Args, part: str) -> int:
    return args.parity_frames if part == "parity" else args.frames


def to_run(args: Args) -> list:
    """(name, command) of the part's runs still to make, seed by seed (harness.still_to_run)."""
    planned, frames = [], budget(args, args.part)
    for seed in args.seeds:
        for game in args.games:
            for arm, flags in ARMS[args.part].items():
                if args.arms and arm not in args.arms:
                    continue
                name = run_name(game, arm, seed)
                command = ["pqn_lake.py", "--env-id", game, "--seed", str(seed), "--total-frames", str(frames)]
                command += ["--runs-dir", args.runs_dir, "--exp-name", name, *flags, *shlex.split(args.extra)]
                if arm.startswith("mixture"):  # a phase: the same frames at 128 or 32 envs (4x the updates)
                    command += ["--agent-updates-per-phase", str(args.phase_updates * (4 if "4x32" in arm else 1))]
                planned.append((name, frames, command))
    return harness.still_to_run(planned, args.runs_dir, args.record_dir)


def rows(args: Args, game: str, arm: str, seed: int, frames: int) -> list:
    """The metrics of the arm's record for (game, seed) made with `frames` frames ([] if none: a record is written only
    for a run that reached its frames, on both sides)."""
    run_dir = harness.run_folder(args.record_dir, run_name(game, arm, seed))
    if not compare.has_metrics(run_dir) or json.loads((run_dir / "config.json").read_text())["total_frames"] != frames:
        return []
    return [json.loads(line) for line in compare.metrics_text(run_dir).splitlines() if line.strip()]


def curve(run_rows: list, key: str) -> tuple:
    """(frames, values) of every row that logs `key`, in the run's order (a peer's games may share a frame count)."""
    logged = [(r["global_frames"], r[key]) for r in run_rows if key in r]
    return np.array([f for f, _ in logged], dtype=float), np.array([v for _, v in logged], dtype=float)


def per_update(frames: np.ndarray, values: np.ndarray) -> tuple:
    """The peer's games as our loop logs its own: the mean of the games that ended in each update (its updates and
    ours at its settings are both UPDATE_FRAMES long), at the update's last frame."""
    update = (frames - 1) // UPDATE_FRAMES
    ends = np.unique(update)
    return (ends + 1) * UPDATE_FRAMES, np.array([values[update == u].mean() for u in ends])


def late_means(args: Args, game: str, arm: str, key: str) -> tuple:
    """Per recorded seed of the parity arm: the mean of `key` over the run's last 2% and last 10% of its frames (the
    peer's games grouped by update first, so both sides give the same statistic)."""
    final, late, frames = [], [], args.parity_frames
    for seed in args.seeds:
        logged, values = curve(rows(args, game, arm, seed, frames), key)
        if len(logged):
            logged, values = per_update(logged, values) if arm == PEER else (logged, values)
            final.append(values[logged >= frames * 0.98].mean())
            late.append(values[logged >= frames * 0.9].mean())
    return np.array(final), np.array(late)


def cell(x: np.ndarray) -> str:
    """mean ± 95% t half-width over seeds (the mean alone for one seed)."""
    return f"{x.mean():.1f}" + (f" ± {compare.t_half_width(x, 0.95):.1f}" if len(x) > 1 else "")


def parity_table(args: Args) -> str:
    lines = [
        "| game | side | seeds | training return, final | last 10% | final, ours / theirs | last 10%, ours / theirs "
        "| greedy eval, final | last 10% | CleanRL's published, 40M frames |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for game in args.games:
        theirs = late_means(args, game, PEER, "charts/episodic_return")
        for arm in (PEER, "pqn-cleanrl"):
            final, late = late_means(args, game, arm, "charts/episodic_return")
            if len(final) == 0:
                continue
            ratios = ["", ""]
            if arm != PEER and len(theirs[0]):
                ratios = [harness.ratio_interval(final, theirs[0]), harness.ratio_interval(late, theirs[1])]
            greedy = ["", ""]
            if arm != PEER:
                greedy = [cell(x) for x in late_means(args, game, arm, "eval/return")]
            published = CLEANRL_40M.get(game, "") if arm == PEER else ""
            side = "CleanRL's PQN, run here" if arm == PEER else f"ours ({arm})"
            lines.append(
                f"| {game} | {side} | {len(final)} | {cell(final)} | {cell(late)} | {' | '.join(ratios)} "
                f"| {' | '.join(greedy)} | {published} |"
            )
    return "\n".join(lines)


def mixture_table(args: Args) -> str:
    """Per arm: the final return (eval/return at --frames, interpolated, as compare.py reads it: the mixture's is its
    BigAgent's, evaluated at each phase's end) and the agents' last evaluation before a clone, mean ± 95% t over seeds;
    the final return's human-normalised IQM [95% CI] over seeds, and P(mixture > pqn) over the seeds both have."""
    from rliable import metrics as rly_metrics

    interval = lambda point, ci: f"{point:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"  # noqa: E731
    lines = [
        "| game | arm | seeds | final return | agents' last evaluation | IQM, human-normalised [95% CI] "
        "| P(> pqn) [95% CI] |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for game in args.games:
        random, human = compare.ATARI_RANDOM_HUMAN[compare.atari_game(game)]
        finals = {}  # {arm: {seed: (final return, the agents' last evaluation)}}
        for arm in ARMS["mixture"]:
            for seed in args.seeds:
                run_rows = rows(args, game, arm, seed, args.frames)
                frames, values = curve(run_rows, "eval/return")
                if len(frames):  # the agents' level before the last clone (the clones' evaluation is the BigAgent's)
                    since = curve(run_rows, "eval/frames_since_clone")[1]
                    agents = curve(run_rows, "eval/agents_mean")[1][since > 0][-1]
                    finals.setdefault(arm, {})[seed] = (float(np.interp(args.frames, frames, values)), agents)

        normalised = {arm: {s: (v - random) / (human - random) for s, (v, _) in f.items()} for arm, f in finals.items()}
        for arm, seeds in finals.items():
            final, agents = (np.array([s[i] for s in seeds.values()]) for i in (0, 1))
            point, ci = compare.bootstrap(
                {arm: np.array([[normalised[arm][s]] for s in seeds])}, rly_metrics.aggregate_iqm, compare.Args()
            )
            improves, both = "", [s for s in seeds if s in finals.get("pqn", {})]
            if arm != "pqn" and both:
                pair = f"{arm},pqn"
                p, pci = compare.bootstrap(
                    {pair: tuple(np.array([[normalised[a][s]] for s in both]) for a in (arm, "pqn"))},
                    rly_metrics.probability_of_improvement,
                    compare.Args(),
                )
                improves = interval(p[pair], pci[pair][:, 0])
            lines.append(
                f"| {game} | {arm} | {len(seeds)} | {cell(final)} | {cell(agents)} | "
                f"{interval(point[arm], ci[arm][:, 0])} | {improves} |"
            )
    return "\n".join(lines)


def binned(frames: np.ndarray, values: np.ndarray, width: float) -> tuple:
    """The mean of the values in each `width` frames (the training returns are one point a game or an update)."""
    bins = (frames // width).astype(int)
    keep = np.unique(bins)
    return (keep + 0.5) * width, np.array([values[bins == b].mean() for b in keep])


def plot(args: Args, png_path: Path) -> None:
    """Per game: the parity part's training returns of both sides (binned per 1% of the run, mean over seeds) and our
    greedy evaluations; the mixture part's greedy evaluations of both arms, the mixture's clones marked."""
    plt = compare.pyplot()
    fig, axes = plt.subplots(len(args.games), 2, figsize=(11, 3.8 * len(args.games)), squeeze=False)
    for row, game in enumerate(args.games):
        ax = axes[row, 0]
        for i, (arm, key, label) in enumerate(
            [
                (PEER, "charts/episodic_return", "CleanRL's PQN run here: training return"),
                ("pqn-cleanrl", "charts/episodic_return", "ours at CleanRL's settings: training return"),
                ("pqn-cleanrl", "eval/return", "ours at CleanRL's settings: greedy eval"),
            ]
        ):
            runs = [curve(rows(args, game, arm, s, args.parity_frames), key) for s in args.seeds]
            runs = [binned(f, v, args.parity_frames / 100) for f, v in runs if len(f)]
            if runs:
                n = min(len(f) for f, _ in runs)
                ax.plot(runs[0][0][:n], np.mean([v[:n] for _, v in runs], 0), f"C{i}", label=f"{label} (n={len(runs)})")
        ax.set_title(f"{game}: parity", fontsize="small")
        ax = axes[row, 1]
        for i, arm in enumerate(ARMS["mixture"]):
            recorded = [r for r in (rows(args, game, arm, s, args.frames) for s in args.seeds) if r]
            for k, run_rows in enumerate(recorded):  # the arm named once, and only with a curve to name
                ax.plot(*curve(run_rows, "eval/agents_mean"), f"C{i}", lw=1, label=f"{arm}: agents" if k == 0 else None)
                if arm == "mixture":  # its BigAgent, evaluated at each phase's end (the clones' start)
                    ax.plot(
                        *curve(run_rows, "big_agent/eval/return"), f"C{i}o", ms=3, label="BigAgent" if k == 0 else None
                    )
        ax.set_title(f"{game}: one PQN agent against the mixture (greedy eval)", fontsize="small")
        for ax in axes[row]:
            ax.set_xlabel("frames")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="x-small")
            else:
                ax.text(0.5, 0.5, "no runs recorded yet", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    print(f"figure: {png_path}")


def gpu_table(args: Args) -> str:
    """Per GPU run (its arm from its name): at each of its evaluations, its greedy return against this CPU's seeds of
    the arm at the same frames (interpolated between theirs), and random play on both."""
    out = ["| arm | frames | GPU | CPU seeds | CPU min-max |", "| --- | ---: | ---: | ---: | ---: |"]
    for run_dir in sorted(Path(args.gpu_runs).iterdir()):
        arm, game = run_dir.name.split("__")[2], run_dir.name.split("__")[0]
        gpu_rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        cpu = [r for r in (rows(args, game, arm, s, args.frames) for s in args.seeds) if r]
        for frames, value in zip(*curve(gpu_rows, "eval/return")):
            seeds = [np.interp(frames, *curve(r, "eval/return")) for r in cpu]
            spread = f"{min(seeds):.1f}-{max(seeds):.1f}" if seeds else ""
            out.append(f"| {arm} | {frames:,.0f} | {value:.1f} | {len(seeds)} | {spread} |")
        randoms = [curve(r, "eval/random_return")[1] for r in [gpu_rows, *cpu]]
        out.append(
            f"| {arm}: random play | | {randoms[0].mean():.1f} | | {np.mean([x.mean() for x in randoms[1:]]):.1f} |"
        )
    return "\n".join(out)


def plot_gpu(args: Args, png_path: Path) -> None:
    """gpu_learning.png: per arm the GPU run's greedy evaluations over this CPU's seeds' (thin), to the GPU's frames."""
    plt = compare.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, run_dir in enumerate(sorted(Path(args.gpu_runs).iterdir())):
        arm, game = run_dir.name.split("__")[2], run_dir.name.split("__")[0]
        gpu_rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        frames, values = curve(gpu_rows, "eval/return")
        for k, cpu in enumerate(r for r in (rows(args, game, arm, s, args.frames) for s in args.seeds) if r):
            f, v = curve(cpu, "eval/return")
            keep = f <= frames.max() * 1.05
            ax.plot(f[keep], v[keep], f"C{i}", lw=0.8, alpha=0.5, label=f"{arm}: CPU seeds" if k == 0 else None)
        ax.plot(frames, values, f"C{i}o-", lw=2, ms=4, label=f"{arm}: GPU")
    ax.set_xlabel("frames")
    ax.set_ylabel("greedy evaluation return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    print(f"figure: {png_path}")


def main(args: Args) -> None:
    if not args.table_only:
        harness.run_queue(to_run(args), args.runs_dir, args.record_dir, args.parallel, args.threads)
    print(parity_table(args), end="\n\n")
    print(mixture_table(args))
    plot(args, Path(args.figure))
    if args.gpu_runs:
        print("\nthe GPU's learning runs against this CPU's seeds at the same frames\n" + gpu_table(args))
        plot_gpu(args, Path(args.figure).with_name("gpu_learning.png"))


if __name__ == "__main__":
    main(tyro.cli(Args))
