"""The MinAtar studies of this CPU, one part at a time; answered, so the driver keeps the tables of the committed
records (studies/minatar_runs/), its runs made at the commit RAN_AT names (harness.closed).

    python studies/minatar_study.py --part learning --table-only   # does each learner learn MinAtar?
    python studies/minatar_study.py --part learners --table-only   # which learner should the BigAgent have?
    python studies/minatar_study.py --part arms --table-only       # the paper question: mixture, single PQN, single DQN
    python studies/minatar_study.py --part questions --table-only  # the design's open questions: ε reset, phase length
    python studies/minatar_study.py --part parity --table-only     # one PQN agent at PQN's own setting

learning: one PQN agent (`pqn_lake.py --num-agents 1 --big-agent-schedule none` at its MinAtar defaults) and
`dqn_single_baseline.py` at its MinAtar defaults on four games: per game, each seed's final evaluation (10 games at
ε 0.05), their mean, random play under the same protocol and the MinAtar paper's DQN at 5M frames (Young & Tian 2019,
Figure 2). learners: the mixture with a one-step and a 3-step Double DQN BigAgent. arms: the mixture and one PQN
agent (rate annealed or constant), the DQN baseline and live transfer (pqn_lake_live.py) with and without clones,
through compare.py (curves, recovery, collapse, rliable aggregates). parity: one PQN agent at PQN's own MinAtar
setting (no sticky actions, gymnax's step limits, greedy evaluation over 128 games) beside PQN's own code's records
(studies/pqn_peer.py). questions: the clones' ε reset at 0.1 or 0.01, phases of 10 updates. Each part's commands and
flags are in its records' config.json and in the driver at RAN_AT.

A finished run's metrics (gzipped) and config.json are kept in --record-dir, committed with the repository: the
tables and figures need nothing else, so `--table-only` redraws them on a fresh clone.
"""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "studies"))
import harness  # noqa: E402  (the bootstrap ratio, the closed message)
from harness import PAPER_DQN, compare  # noqa: E402

RAN_AT = "ba7c7d5"  # the last commit whose driver ran this study's parts (all answered)

PHASE_UPDATES = 50  # pqn_lake.py's --agent-updates-per-phase on MinAtar, which the records were made with


# Where the parity table reads both sides' curves: 1M, 2.5M and 5M frames (the evaluation nearest each)
REFERENCE_FRAMES = (1_000_000, 2_500_000, 5_000_000)
# The parity part's arms: pqn_lake.py's single PQN agent with these flags, beside the per-game step limit
PARITY = {"reference": ["--no-anneal-lr"], "reference-anneal": ["--anneal-lr"]}
# Read from their records only (each record's config.json names its commit): the annealed arm also scored as PQN's own
# code scores its tests (eval/window_return; --eval-window) and with PQN's own decay horizon (--decay-frames 1e7 in a
# run cut at 5M), both flags gone after db95050; Breakout's one-flag diagnostics and all of PQN's own
# code's settings at once (--minatar-obs-scale, --step-limit-terminal, --minatar-init he, gone earlier), scored as ours
PARITY_RECORDS = (
    "reference-anneal-window",
    "reference-anneal-decay1e7",
    "reference-anneal-obs255",
    "reference-anneal-terminal",
    "reference-anneal-he",
    "reference-anneal-peer",
)
PARITY_ARMS_READ = (*PARITY, *PARITY_RECORDS)  # every arm the tables read
# PQN's own code run here (studies/pqn_peer.py): its configuration as shipped (decays over 1e7 steps, cut at 5M) and,
# on Breakout, with its decays over 5M as our annealed agent's
PEER_ARMS = ("purejaxql", "purejaxql-decay5m")


# The BigAgent's learners of the learners part (pqn_lake.py's --big-n-step 1 and 3; the study's distillation learners
# need pqn_lake.py at commit f3004fc). The questions part's mixtures differ from the arms part's in one flag each
# (--agent-epsilon-reset 0.1, 0.01; --agent-updates-per-phase 10); the runs made before --anneal-lr became the
# default (all but the arms part's annealed mixture and single PQN agent) ran with --no-anneal-lr
LEARNERS = ("dqn", "3-step")


@dataclasses.dataclass
class Args:
    part: Literal["learning", "learners", "arms", "questions", "parity"] = "learning"
    """which study (see above)"""
    runs_dir: str = "runs/minatar"
    """where the runs of every part go, one folder each named <game>__<arm>__<seed> (a run two parts share, as the
    single agents of learning and arms, runs once)"""
    record_dir: str = str(Path(__file__).resolve().parent / "minatar_runs")
    """where each finished run's metrics.jsonl and config.json are kept (studies/minatar_runs, committed: a few
    hundred KB a run), the tables' source wherever --runs-dir lacks the run"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    """MinAtar games (MinAtar/<game>-v1, the minimal action sets)"""
    pqn_seeds: tuple[int, ...] = (1, 2)
    """seeds of the PQN agent"""
    dqn_seeds: tuple[int, ...] = (1,)
    """seeds of the DQN baseline"""
    pqn_frames: int = 5_000_000
    """frames of a PQN run (the MinAtar paper's budget)"""
    dqn_frames: int = 2_000_000
    """frames of a DQN run: 32 samples per transition cost ~1.7 ms a frame on one core here, so 5M frames would be
    ~2.5 hours a run; the MinAtar paper's DQN is near its plateau by 2M frames on these four games"""
    live_frames: int = 2_000_000
    """frames of a live-transfer run: its two arms (24 runs) at 5M would take ~10 hours of this 2-core machine; at 2M
    they are compared with the other arms at 2M (compare.py --budgets)"""
    learners: tuple[Literal["dqn", "3-step"], ...] = LEARNERS
    """learners: the BigAgent's learners to run"""
    learner_seeds: tuple[int, ...] = (1, 2)
    """learners: seeds of each mixture"""
    mixture_frames: int = 1_228_800
    """learners: frames of a mixture run (5 phases of 15 updates of 4 agents x 128 envs x 32 steps)"""
    phase_updates: int = 15
    """learners: agent updates per phase"""
    arm_seeds: tuple[int, ...] = (1, 2, 3)
    """arms: seeds of each arm"""
    question_games: tuple[str, ...] = ("Asterix", "Breakout")
    """questions: the games of the open questions"""
    question_seeds: tuple[int, ...] = (1, 2)
    """questions: their seeds"""
    parity_seeds: tuple[int, ...] = (1, 2, 3)
    """parity: seeds of each arm"""
    table_only: bool = False
    """print the table of the runs in --runs-dir without running anything"""


def run_folder(args: Args, name: str):
    """The run folder of a study run (the scripts name it <env>__<exp_name>__<seed>__<time>): the one in --runs-dir,
    else its record in --record-dir, else None."""
    for where in (args.runs_dir, args.record_dir):
        found = sorted(Path(where).glob(f"MinAtar_*__{name}__*"))
        if found:
            return found[-1]
    return None


def read_run(args: Args, name: str) -> tuple:
    """(run folder, its metrics.jsonl rows) of a study run; (None, []) if it has not started."""
    run_dir = run_folder(args, name)
    if not compare.has_metrics(run_dir):
        return None, []
    return run_dir, [json.loads(line) for line in compare.metrics_text(run_dir).splitlines() if line.strip()]


def mixture_table(args: Args, variants: dict, games: tuple, seeds: tuple, frames: int) -> str:
    """Per variant (label: (run name's variant, agent updates per phase)), over the runs of games and seeds that
    reached `frames` (a run still going would enter with its last clone as its final return): the share of clones
    from the second on after which the BigAgent scores >= 0.95x its agents' mean just before the clone, the share
    after which the agents regain that level within 10% of the next phase, their mean recovery frames, the
    BigAgent's agreement with its agents and its top action's share, per game the agents' ε-greedy training return in
    the first quarter phase after a clone (2+) over the last quarter before it, the BigAgent's final return per game
    and normalised (random play 0, the MinAtar paper's DQN at 5M frames 1; the mean over games of the per-game means);
    where every game has a run, rliable's stratified bootstrap interval of that mean and the probability that the
    variant improves on the first one (compare.py's bootstrap: the same numbers on every call)."""
    import compare
    from rliable import metrics as rly_metrics

    first = next(iter(variants))
    lines = [
        "| variant | runs | BigAgent >= 0.95x its agents (clones 2+) | agents regain within 10% of a phase | "
        "recovery frames (mean) | agreement | top action share | training return after a clone: "
        + ", ".join(games)
        + " | final BigAgent return: "
        + ", ".join(games)
        + " | normalised [95% CI] | P(> the first row) [95% CI] |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    scores = {}  # variant label: normalised final returns (runs, games), as many runs per game (rliable's shape)
    interval = lambda point, ci, f="{:.2f}": f"{f.format(point)} [{f.format(ci[0])}, {f.format(ci[1])}]"  # noqa: E731
    for label, (variant, phase_updates) in variants.items():
        phase_frames = 4 * 128 * 32 * phase_updates
        ratios, regained, recovery, agreement, top = [], [], [], [], []
        finals, normalised = {g: [] for g in games}, {g: [] for g in games}
        dips = {g: ([], []) for g in games}  # the agents' ε-greedy return a quarter phase before / after each clone
        runs = 0
        for game in games:
            for seed in seeds:
                run_dir, rows = read_run(args, f"{game}__{variant}__{seed}")
                clones = [r for r in rows if "distill/big_minus_agents" in r]
                if not clones or harness.evaluated(run_dir) < frames:
                    continue
                runs += 1
                for r in clones[1:]:  # from the second clone on: the BigAgent starts from a trained one
                    before = r["eval/return"] - r["distill/big_minus_agents"]
                    ratios.append(r["eval/return"] >= 0.95 * before)
                for r in rows:
                    if "recovery/frames" in r:
                        recovery.append(r["recovery/frames"])
                        regained.append(r["recovery/frames"] <= 0.1 * phase_frames)
                trained = [
                    (r["global_frames"], r["charts/episodic_return"]) for r in rows if "charts/episodic_return" in r
                ]
                quarter = max(1, phase_updates // 4)  # rows: one an update
                for r in clones[1:]:
                    after = [ret for f, ret in trained if f > r["global_frames"]][:quarter]
                    if len(after) == quarter:  # (the run's last clone may end it)
                        dips[game][0].extend([ret for f, ret in trained if f <= r["global_frames"]][-quarter:])
                        dips[game][1].extend(after)
                agreement += [r["distill/agreement"] for r in clones if "distill/agreement" in r]
                top += [r["distill/top_action_share"] for r in clones if "distill/top_action_share" in r]
                finals[game].append(clones[-1]["eval/return"])
                random = [r["eval/random_return"] for r in rows if "eval/random_return" in r][-1]
                normalised[game].append((finals[game][-1] - random) / (PAPER_DQN[game] - random))
        if not runs:
            continue
        mean = lambda xs, f="{:.2f}": f.format(np.mean(xs)) if xs else "n/a"  # noqa: E731
        normalised_mean, improves = mean([np.mean(normalised[g]) for g in games if normalised[g]]), "n/a"
        n = min(len(normalised[g]) for g in games)
        if n:
            scores[label] = np.array([normalised[g][:n] for g in games]).T
            point, ci = compare.bootstrap({label: scores[label]}, rly_metrics.aggregate_mean, compare.Args())
            normalised_mean = interval(point[label], ci[label][:, 0])
            if label != first and first in scores:
                pair = f"{label},{first}"
                point, ci = compare.bootstrap(
                    {pair: (scores[label], scores[first])}, rly_metrics.probability_of_improvement, compare.Args()
                )
                improves = interval(point[pair], ci[pair][:, 0])
        lines.append(
            f"| {label} | {runs} | {mean(ratios, '{:.0%}')} ({len(ratios)}) | {mean(regained, '{:.0%}')} "
            f"({len(regained)}) | {mean(recovery, '{:,.0f}')} | {mean(agreement)} | {mean(top)} | "
            + ", ".join(f"{np.mean(dips[g][1]) / np.mean(dips[g][0]):.2f}x" if dips[g][0] else "n/a" for g in games)
            + " | "
            + ", ".join(mean(finals[g], "{:.1f}") for g in games)
            + f" | {normalised_mean} | {improves} |"
        )
    return "\n".join(lines)


def figure(columns: int, width: float) -> tuple:
    """A figure of two rows of `columns` axes, each `width` inches wide (matplotlib without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(2, columns, figsize=(width * columns, 7), squeeze=False)


def save(fig, axes, ylabel: str, png_path: Path) -> None:
    """Grids, the first row's label and legend, then the PNG."""
    import matplotlib.pyplot as plt

    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(ylabel)
    axes[0, 0].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    print(f"figure: {png_path}")


def plot_questions(args: Args, variants: dict, png_path: Path) -> None:
    """Per game (columns), per variant (colours), mean over seeds against frames: the agents' evaluation (their mean;
    at each clone a jump from their level to the clones', the BigAgent's) and their training return (ε-greedy: what
    an ε reset costs while they act)."""
    games = args.question_games
    fig, axes = figure(len(games), 5)
    for col, game in enumerate(games):
        for i, (label, (variant, _)) in enumerate(variants.items()):
            runs = [rows for seed in args.question_seeds if (rows := read_run(args, f"{game}__{variant}__{seed}")[1])]
            for row, key in enumerate(("eval/agents_mean", "charts/episodic_return")):
                # in log order: at a clone the agents' evaluation before it and the clones' (the BigAgent's level)
                # share a frame count, a jump at one x
                curves = [[(r["global_frames"], r[key]) for r in rows if key in r] for rows in runs]
                n = min(map(len, curves), default=0)
                if n < 2:
                    continue
                frames = np.array([f for f, _ in curves[0][:n]])
                mean = np.array([[v for _, v in c[:n]] for c in curves]).mean(0)
                if row == 0:
                    axes[0, col].plot(frames, mean, color=f"C{i}", marker="o", ms=2, label=f"{label} (n={len(curves)})")
                else:
                    axes[1, col].plot(
                        frames[2:-2], np.convolve(mean, np.ones(5) / 5, mode="valid"), color=f"C{i}", lw=0.8
                    )
        axes[0, col].set_title(f"{game}: agents' evaluation (a clone: a jump at one frame count)", fontsize="small")
        axes[1, col].set_title(f"{game}: agents' training return (ε-greedy, 5-point mean)", fontsize="small")
        axes[1, col].set_xlabel("frames")
    save(fig, axes, "return (mean over seeds)", png_path)


def plot_learners(args: Args, png_path: Path) -> None:
    """Per game (columns), per learner (colours), mean over seeds at each clone: the BigAgent's evaluation (solid)
    against its agents' just before the clone (dashed), and the BigAgent's top action's share (collapse)."""
    fig, axes = figure(len(args.games), 4)
    for col, game in enumerate(args.games):
        for i, learner in enumerate(args.learners):
            per_seed = []
            for seed in args.learner_seeds:
                clones = [
                    r
                    for r in read_run(args, f"{game}__learner-{learner}__{seed}")[1]
                    if "distill/big_minus_agents" in r
                ]
                per_seed.append(
                    {
                        r["charts/phase"]: (
                            r["eval/return"],
                            r["eval/return"] - r["distill/big_minus_agents"],
                            r["distill/top_action_share"],
                        )
                        for r in clones
                    }
                )
            per_seed = [p for p in per_seed if p]  # (a seed not yet run)
            phases = sorted(set.intersection(*(set(p) for p in per_seed))) if per_seed else []
            if not phases:
                continue
            big, agents, top = (
                np.array([[p[phase][k] for phase in phases] for p in per_seed]).mean(0) for k in range(3)
            )
            axes[0, col].plot(phases, big, marker="o", color=f"C{i}", label=f"{learner} (n={len(per_seed)})")
            axes[0, col].plot(phases, agents, linestyle="--", color=f"C{i}", alpha=0.6)
            axes[1, col].plot(phases, top, marker="o", color=f"C{i}")
        axes[0, col].set_title(f"{game}: BigAgent (solid), agents before the clone (dashed)", fontsize="x-small")
        axes[1, col].set_title(f"{game}: BigAgent's top greedy action's share", fontsize="x-small")
        axes[1, col].set_ylim(0, 1.02)
        axes[1, col].set_xlabel("phase (a clone at its end)")
    save(fig, axes, "evaluation return (mean over seeds)", png_path)


def parity_table(args: Args) -> str:
    """Per game, PQN's own code as shipped (its records, purejaxql) and each of our arms: the greedy return at 1M, 2.5M
    and 5M frames (the evaluation nearest each), mean ± 95% t half-width over seeds, and the final one over PQN's own
    code's (the ratio of the means; parity_yardstick gives its interval)."""
    from compare import t_half_width

    head = " / ".join(f"{f / 1e6:g}M" for f in REFERENCE_FRAMES)
    lines = [f"| game | arm | seeds | {head} | final / PQN's own |", "| --- | --- | ---: | --- | ---: |"]
    for game in args.games:
        theirs = None
        for arm in (PEER_ARMS[0], *PARITY_ARMS_READ):
            runs = yardstick_runs(args, game, arm)
            if not runs:
                continue
            at = np.array(
                [
                    [values[int(np.abs(frames - target).argmin())] for target in REFERENCE_FRAMES]
                    for frames, values in runs
                ]
            )
            cells = [f"{x.mean():.1f}" + (f" ± {t_half_width(x, 0.95):.1f}" if len(x) > 1 else "") for x in at.T]
            theirs = at[:, -1].mean() if arm == PEER_ARMS[0] else theirs
            ratio = "" if theirs is None or arm == PEER_ARMS[0] else f"{at[:, -1].mean() / theirs:.2f}"
            lines.append(f"| {game} | {arm} | {len(runs)} | {' / '.join(cells)} | {ratio} |")

    # the annealed rate against the constant one, seed by seed (the same seed: the same games and initial network)
    def final(game: str, arm: str, seed: int):
        evaluations = [r for r in read_run(args, f"{game}__pqn-{arm}__{seed}")[1] if "eval/return" in r]
        done = evaluations and evaluations[-1]["global_frames"] >= args.pqn_frames
        return evaluations[-1]["eval/return"] if done else None

    pairs = [
        (c, a)
        for game in args.games
        for seed in args.parity_seeds
        if None not in (c := final(game, "reference", seed), a := final(game, "reference-anneal", seed))
    ]
    if pairs:
        lines.append(
            f"\nfinal return, annealed against constant, seed by seed: ahead in {sum(a > c for c, a in pairs)}, "
            f"level in {sum(a == c for c, a in pairs)}, behind in {sum(a < c for c, a in pairs)} of {len(pairs)}"
        )
    return "\n".join(lines)


def yardstick_runs(args: Args, game: str, arm: str, key: str = "eval/return") -> list:
    """The finished seeds' curves [(frames, returns)] of an arm of either side, `key` its evaluations' metric: ours by
    its run name (pqn-<arm>), the peer's records by theirs (a peer run ends at its last whole update, under 5M)."""
    runs = []
    for seed in args.parity_seeds:
        rows = read_run(args, f"{game}__{arm if arm in PEER_ARMS else 'pqn-' + arm}__{seed}")[1]
        curve = [(r["global_frames"], r[key]) for r in rows if key in r]
        if curve and curve[-1][0] >= args.pqn_frames - 4096:
            runs.append((np.array([f for f, _ in curve]), np.array([v for _, v in curve])))
    return runs


def yardstick(runs: list) -> tuple:
    """Per seed: the final greedy return and the mean of the evaluations in the run's last 10% of frames."""
    final = np.array([values[-1] for _, values in runs])
    late = np.array([values[frames >= 0.9 * frames[-1]].mean() for frames, values in runs])
    return final, late


def parity_yardstick(args: Args) -> str:
    """Both sides from their records, one yardstick: per game and arm, over its seeds, the final greedy return and the
    mean over the last 10% of the run's evaluations (mean ± 95% t), and each of ours over PQN's own code's as shipped
    (ratio [bootstrap 95% CI]). Protocols: ours, 128 greedy games each played to its end (at most the step limit);
    PQN's own, the games that ended within one step-limit window of its 128 greedy test envs; an arm of ours with
    --eval-window also on PQN's own protocol ("window" rows). Where PQN's own code also ran with its decays over 5M
    (purejaxql-decay5m, as our annealed agent decays), the final return over that too: the like-for-like ratio."""
    from compare import t_half_width

    cell = lambda x: f"{x.mean():.1f}" + (f" ± {t_half_width(x, 0.95):.1f}" if len(x) > 1 else "")  # noqa: E731
    lines = [
        "| game | arm | seeds | final | last 10% | final / PQN's own | last 10% / PQN's own | "
        "final / PQN's own, decays over 5M |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for game in args.games:
        shipped, decay5m = (yardstick(runs) if (runs := yardstick_runs(args, game, arm)) else None for arm in PEER_ARMS)
        for arm, key in [(arm, "eval/return") for arm in (*PEER_ARMS, *PARITY_ARMS_READ)] + [
            (arm, "eval/window_return") for arm in PARITY_ARMS_READ
        ]:
            runs = yardstick_runs(args, game, arm, key)
            if not runs:
                continue
            final, late = yardstick(runs)
            ratios = (
                ["", ""]
                if shipped is None or arm == PEER_ARMS[0]
                else [harness.ratio_interval(final, shipped[0]), harness.ratio_interval(late, shipped[1])]
            )
            ratios.append("" if decay5m is None or arm in PEER_ARMS else harness.ratio_interval(final, decay5m[0]))
            label = arm + (" (window)" if key == "eval/window_return" else "")
            lines.append(f"| {game} | {label} | {len(runs)} | {cell(final)} | {cell(late)} | {' | '.join(ratios)} |")
    return "\n".join(lines)


def plot_parity(args: Args, png_path: Path) -> None:
    """Per game, each runnable arm's greedy return against frames (mean over seeds, 95% t band for the two references)
    and PQN's own code's, as shipped and with its decays over 5M (mean over seeds, 95% t band)."""
    from compare import t_half_width

    fig, axes = figure(len(args.games), 4)
    fig.set_size_inches(4 * len(args.games), 3.8)
    for col, game in enumerate(args.games):
        ax = axes[0, col]
        axes[1, col].remove()
        ax.set_position([0.05 + col * 0.95 / len(args.games), 0.14, 0.95 / len(args.games) - 0.05, 0.74])
        for i, arm in enumerate((*PARITY, *PEER_ARMS)):  # (the diagnostics that are records only: in the tables)
            runs = yardstick_runs(args, game, arm)
            if not runs:
                continue
            n = min(len(f) for f, _ in runs)  # cut to the shortest (a peer run ends at its last whole update)
            frames, returns = runs[0][0][:n], np.array([v[:n] for _, v in runs])
            peer, diagnostic = arm in PEER_ARMS, arm not in ("reference", "reference-anneal", *PEER_ARMS)
            style = (
                dict(color="k", ls="-" if arm == PEER_ARMS[0] else ":")
                if peer
                else dict(color=f"C{i}", lw=0.8 if diagnostic else 1.5)
            )
            ax.plot(frames, returns.mean(0), label=f"{arm} (n={len(runs)})", **style)
            if len(runs) > 1 and not diagnostic:  # (the one-flag arms' bands would hide the others')
                band = t_half_width(returns, 0.95)
                ax.fill_between(
                    frames,
                    returns.mean(0) - band,
                    returns.mean(0) + band,
                    color=style["color"],
                    alpha=0.1 if peer else 0.2,
                )
        ax.set_title(f"{game}: greedy return, 128 games", fontsize="small")
        ax.set_xlabel("frames")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    axes[0, 0].set_ylabel("greedy return (mean over seeds)")
    fig.savefig(png_path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"figure: {png_path}")


def table(args: Args) -> str:
    from lake import Lake

    lines = [
        "| game | script | seeds | final eval/return per seed | mean | random play | MinAtar paper's DQN at 5M | "
        "frames | SPS (mean) | Lake, B/transition |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for game in args.games:
        for script in ("pqn_lake.py", "dqn_single_baseline.py"):
            finals, randoms, frames, sps, lake_bytes = [], [], [], [], []
            for seed in args.pqn_seeds if script == "pqn_lake.py" else args.dqn_seeds:
                run_dir, rows = read_run(args, f"{game}__{Path(script).stem}__{seed}")
                evals = [r for r in rows if "eval/return" in r]
                if not evals:
                    continue
                finals.append(evals[-1]["eval/return"])
                frames.append(evals[-1]["global_frames"])
                randoms += [r["eval/random_return"] for r in rows if "eval/random_return" in r]
                sps += [r["charts/SPS"] for r in rows if "charts/SPS" in r][-1:]
                if (run_dir / "lake").is_dir():  # the PQN agent pours every transition into its Lake
                    with Lake(run_dir / "lake", mode="r") as lake:
                        stats = lake.stats()
                    lake_bytes.append(stats["disk_bytes"] / max(1, stats["transitions"]))
            if not finals:
                continue
            lines.append(
                f"| {game} | {Path(script).stem} | {len(finals)} | {', '.join(f'{f:.1f}' for f in finals)} | "
                f"{np.mean(finals):.1f} | {np.mean(randoms):.2f} | {PAPER_DQN[game]} | "
                f"{', '.join(f'{f:,}' for f in frames)} | {np.mean(sps):,.0f} | "
                + (f"{np.mean(lake_bytes):.0f} |" if lake_bytes else "(no Lake) |")
            )
    return "\n".join(lines)


# The arms part's arms and the names their runs were recorded under
ARM_RUNS = {
    "mixture": "mixture-anneal",
    "single-pqn": "pqn-anneal",
    "mixture-constant-lr": "mixture",
    "single-pqn-constant-lr": "pqn_lake",
    "single-dqn": "dqn_single_baseline",
    "live": "live",
    "live-noclone": "live-noclone",
}


def arm_folders(args: Args) -> list:
    """The run folders of the arms part already made: every arm at the default seeds and --arm-seeds."""
    seeds = sorted(set(Args.__dataclass_fields__["arm_seeds"].default) | set(args.arm_seeds))
    names = [f"{game}__{ARM_RUNS[arm]}__{seed}" for seed in seeds for game in args.games for arm in ARM_RUNS]
    return [folder for name in names if (folder := run_folder(args, name)) is not None]


def main(args: Args) -> None:
    args.runs_dir = str(Path(args.runs_dir).resolve())  # the runs start in the repository's root
    args.record_dir = str(Path(args.record_dir).resolve())
    if not args.table_only:
        harness.closed("studies/minatar_study.py", RAN_AT)
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    if args.part == "learners":
        print(
            mixture_table(
                args,
                {learner: (f"learner-{learner}", args.phase_updates) for learner in args.learners},
                args.games,
                args.learner_seeds,
                args.mixture_frames,
            )
        )
        plot_learners(args, Path(args.runs_dir) / "learners.png")
    elif args.part == "questions":
        default = PHASE_UPDATES
        variants = {
            "ε reset 1.0, 50 updates a phase (the arms' mixture)": ("mixture", default),
            "ε reset 0.1": ("eps-reset-0.1", default),
            "ε reset 0.01": ("eps-reset-0.01", default),
            "10 updates a phase": ("phase-10", 10),
        }
        print(mixture_table(args, variants, args.question_games, args.question_seeds, args.pqn_frames))
        plot_questions(args, variants, Path(args.runs_dir) / "questions.png")
    elif args.part == "parity":
        print(parity_table(args))
        print(f"\nboth sides from their records (studies/pqn_peer.py for PQN's own code):\n{parity_yardstick(args)}")
        plot_parity(args, Path(args.runs_dir) / "parity.png")
    elif args.part == "arms":  # compare.py on this part's runs: per-game curves and the aggregates across games
        default = PHASE_UPDATES
        # the mixtures' clones: how often the BigAgent matches its agents, how fast the clones regain their level
        mixtures = {"mixture": ("mixture-anneal", default), "mixture, constant rate": ("mixture", default)}
        print(mixture_table(args, mixtures, args.games, args.arm_seeds, args.pqn_frames))
        folders = [str(folder) for folder in arm_folders(args)]
        if folders:  # (compare.py with no folder would read runs/)
            # each arm where its runs end, every arm at all of them
            budgets = sorted({args.dqn_frames, args.live_frames, args.pqn_frames})
            subprocess.run(
                [
                    sys.executable,
                    "compare.py",
                    *folders,
                    "--out",
                    str(Path(args.runs_dir) / "compare_arms"),
                    "--budgets",
                    *map(str, budgets),
                ],
                cwd=ROOT,
                check=True,
            )
        else:
            print(f"no run of the arms part in {args.runs_dir} yet")
    else:
        print(table(args))


if __name__ == "__main__":
    main(tyro.cli(Args))
