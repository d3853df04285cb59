# The arms of the study (the mixture, pqn_lake.py; live transfer, pqn_lake_live.py, with clones or without
# (--clone-every-updates 0; runs made before it had its own script: pqn_lake.py --big-agent-schedule live); the single
# PQN agent, pqn_lake.py --big-agent-schedule none; the single DQN agent,
# dqn_single_baseline.py), each PQN arm split by the agents' learning rate (annealed, the default, or constant:
# --no-anneal-lr and runs made before the flag, keys suffixed _constant_lr): figures and tables, per game and across
# games.
# Usage: python compare.py runs/ [more dirs or run folders ...] --out runs/compare/
#
# A run is a folder holding metrics.jsonl (one JSON object per line, each with "global_frames").
# Runs are grouped by (env_id, arm). Per env: <out>/<env_id>.png (mean evaluation return over seeds against
# frames, markers at evaluations, Student-t band (scipy) where n >= 2, the mixture's clone points) and, for the
# mixture, <out>/<env_id>_recovery.png (the agents' evaluation against frames since each clone, one line per
# phase) and <out>/<env_id>_collapse.png; the final return and the area under the curve at frame budgets. Across
# two or more games of a family (Atari: human-normalised; MinAtar: by random play and the MinAtar paper's DQN):
# rliable's IQM, median and mean with stratified bootstrap intervals, the probability that the mixture improves
# on each other arm, and a performance profile per family. All in results.md and results.json.
import dataclasses
import gzip
import json
import math
import os
import re
import sys
from collections import defaultdict

import numpy as np
import tyro


@dataclasses.dataclass
class Args:
    paths: tyro.conf.Positional[tuple[str, ...]] = ("runs",)
    """run folders, or folders searched recursively for run folders (a run folder holds metrics.jsonl)"""
    out: str = "runs/compare"
    """output folder: <env_id>.png per env, results.md and results.json"""
    metric: str = "eval/return"
    """the metric to compare (both scripts log the evaluation return as eval/return; the mixture's is the BigAgent's)"""
    budgets: tuple[int, ...] = ()
    """frame budgets for the tables, e.g. 25_000_000 100_000_000; none given: per env, the evaluation frames of the
    run that ends first nearest to 25/50/75/100% of its end"""
    confidence: float = 0.95
    """confidence level of the Student-t intervals over seeds (per game) and the bootstrap intervals (across games)"""
    reps: int = 2000
    """bootstrap resamples of rliable's interval estimates (across games)"""
    bootstrap_seed: int = 0
    """seed of the bootstrap (the same numbers on every call)"""
    num_points: int = 500
    """points of the common frame grid the curves are interpolated onto for the figure"""
    decimals: int = 2
    """decimals of the returns in results.md (results.json keeps full precision)"""


PHASE_KEY = "charts/phase"  # logged by pqn_lake.py with every row of a phase; its last row is the clone point


def warn(message):
    print(f"compare.py: warning: {message}", file=sys.stderr)


def sanitise_env_id(env_id):
    # run_name uses the env id with ':' and '/' replaced, so "ALE/Breakout-v5" and "ALE_Breakout-v5" are one env
    return str(env_id).replace(":", "_").replace("/", "_")


METRICS = ("metrics.jsonl", "metrics.jsonl.gz")  # a run's, and a committed record's (gzip: what a clone carries)


def metrics_text(run_folder) -> str:
    """A run folder's metrics.jsonl, or a record's metrics.jsonl.gz, as text (FileNotFoundError if neither)."""
    path = os.path.join(run_folder, "metrics.jsonl")
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt") as f:
            return f.read()
    with open(path) as f:
        return f.read()


def has_metrics(run_folder) -> bool:
    return run_folder is not None and any(os.path.exists(os.path.join(run_folder, name)) for name in METRICS)


def write_record_metrics(record_folder, text: str) -> None:
    """A record's metrics, compressed (mtime 0: the same rows give the same bytes)."""
    with open(os.path.join(record_folder, "metrics.jsonl.gz"), "wb") as f:
        f.write(gzip.compress(text.encode(), mtime=0))


def find_run_folders(paths):
    """Every folder holding metrics.jsonl (a record: metrics.jsonl.gz), under each path (or the path itself), in a
    stable order."""
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise SystemExit(f"compare.py: error: path(s) do not exist: {', '.join(missing)}")
    run_folders = set()
    for path in paths:
        for folder, _, files in os.walk(path):
            if any(name in files for name in METRICS):
                run_folders.add(os.path.normpath(folder))
    return sorted(run_folders)


def parse_run_name(run_name):
    """CleanRL's run_name is f"{env_id}__{exp_name}__{seed}__{int(time.time())}"; exp_name may itself hold '__'."""
    parts = run_name.split("__")
    if len(parts) < 4 or not parts[-1].isdigit():
        return None
    seed = int(parts[-2]) if parts[-2].lstrip("-").isdigit() else parts[-2]
    return {"env_id": parts[0], "exp_name": "__".join(parts[1:-2]), "seed": seed}


def read_run_identity(run_folder):
    """(env_id, script, seed, exp_name) from config.json, falling back to the run folder's name."""
    config = {}
    config_path = os.path.join(run_folder, "config.json")
    if os.path.exists(config_path):
        try:
            with open(config_path) as f:
                config = json.load(f)
        except (OSError, json.JSONDecodeError) as error:
            warn(f"{config_path} is unreadable ({error}); using the run folder's name instead")
    from_name = parse_run_name(os.path.basename(run_folder)) or {}
    env_id = config.get("env_id", from_name.get("env_id"))
    exp_name = config.get("exp_name", from_name.get("exp_name"))
    # CleanRL's exp_name defaults to the script's file stem, so it names the script when config.json does not
    script = config.get("script", exp_name)
    if script == MIXTURE and config.get("big_agent_schedule") == "none":
        script = PQN_SINGLE
    elif script == "pqn_lake_live" or script == MIXTURE and config.get("big_agent_schedule") == "live":
        script = LIVE_NO_CLONE if config.get("clone_every_updates") == 0 else LIVE
    if script in PQN_ARMS and config and not config.get("anneal_lr", False):  # (runs made before the flag: constant)
        script += CONSTANT_LR
    seed = config.get("seed", from_name.get("seed"))
    if env_id is None or script is None:
        return None
    return sanitise_env_id(env_id), str(script), seed, exp_name


def read_metrics(run_folder, metric):
    """The metric's curve (frames, values; sorted, last line wins per frame), the clone frames of a run and its
    random play's return (eval/random_return; None if not logged)."""
    value_at_frames, phase_end, unreadable_lines, random_return = {}, {}, 0, None
    for line in metrics_text(run_folder).splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            frames = int(row["global_frames"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            unreadable_lines += 1  # e.g. a line cut short by a kill mid-write
            continue
        value = row.get(metric)
        if isinstance(value, (int, float)) and math.isfinite(value):
            value_at_frames[frames] = float(value)  # a resume may log a frame count again: keep the last
        if isinstance(row.get("eval/random_return"), (int, float)):
            random_return = float(row["eval/random_return"])
        if PHASE_KEY in row:  # the agents are cloned at the end of each phase: its last logged frame
            phase_end[row[PHASE_KEY]] = max(frames, phase_end.get(row[PHASE_KEY], frames))
    if unreadable_lines:
        warn(f"{run_folder}: skipped {unreadable_lines} unreadable line(s) of metrics.jsonl")
    frames = np.array(sorted(value_at_frames), dtype=np.float64)
    values = np.array([value_at_frames[int(x)] for x in frames], dtype=np.float64)
    return frames, values, sorted(set(phase_end.values())), random_return


def load_runs(run_folders, metric):
    """Runs with the metric, as dicts; runs without it are skipped with a warning naming the folder."""
    runs = []
    for run_folder in run_folders:
        identity = read_run_identity(run_folder)
        if identity is None:
            warn(
                f"{run_folder}: no config.json with env_id/script and the folder name is not a CleanRL run_name; "
                "skipped"
            )
            continue
        frames, values, clone_frames, random_return = read_metrics(run_folder, metric)
        if len(frames) == 0:
            warn(f"{run_folder}: no '{metric}' in metrics.jsonl; skipped")
            continue
        env_id, script, seed, exp_name = identity
        runs.append(
            dict(
                folder=run_folder,
                env_id=env_id,
                script=script,
                seed=seed,
                exp_name=exp_name,
                frames=frames,
                values=values,
                clone_frames=clone_frames,
                random_return=random_return,
            )
        )
    return runs


def group_runs(runs):
    """{env_id: {script: [runs]}}, warning about groupings that would distort the statistics."""
    groups = defaultdict(lambda: defaultdict(list))
    for run in runs:
        groups[run["env_id"]][run["script"]].append(run)
    for env_id, scripts in groups.items():
        for script, group in scripts.items():
            seeds = [run["seed"] for run in group]
            if len(set(map(str, seeds))) < len(seeds):
                warn(
                    f"{env_id}/{script}: the same seed appears in several run folders (seeds {seeds}); "
                    "each folder counts as one sample"
                )
            # a trailing "__<seed>" (minatar_study.py's names) is the seed, which differs by design
            exp_names = sorted(
                {re.sub(rf"__{re.escape(str(run['seed']))}$", "", str(run["exp_name"])) for run in group}
            )
            if len(exp_names) > 1:
                warn(f"{env_id}/{script}: runs with different exp_names {exp_names} are averaged together")
    return groups


def mean_and_ci(samples, confidence):
    """Mean over seeds and the half-width of its Student-t interval (scipy; None where n < 2 leaves it undefined)."""
    samples = np.asarray(samples, dtype=np.float64)
    n = len(samples)
    if n == 0:
        return None, None
    if n == 1:
        return float(samples[0]), None
    return float(samples.mean()), float(t_half_width(samples, confidence))


def t_half_width(samples, confidence, axis=0):
    """Half-width of the Student-t confidence interval of the mean of samples along axis (n - 1 df)."""
    from scipy import stats

    samples = np.asarray(samples, dtype=np.float64)
    n = samples.shape[axis]
    return stats.t.ppf((1 + confidence) / 2, n - 1) * stats.sem(samples, axis=axis)


def mean_return_over_frames(run, start, budget):
    """Area under the run's linearly interpolated curve from start to budget, divided by (budget - start).
    The curve is piecewise linear between evaluations, so the trapezoid over its knots is exact."""
    inside = (run["frames"] > start) & (run["frames"] < budget)
    knots = np.concatenate([[start], run["frames"][inside], [budget]])
    values = np.interp(knots, run["frames"], run["values"])
    return float(np.trapezoid(values, knots) / (budget - start))


def choose_budgets(env_runs, requested_budgets, auc_start, env_id):
    """The requested budgets (only those after auc_start, the first frame at which every run has an evaluation:
    before it some curve would need extrapolating), or by default the evaluation frames of the run that ends
    first that lie nearest to 25/50/75/100% of its last one, after auc_start: budgets that exist in the runs."""
    if requested_budgets:
        budgets = sorted(set(requested_budgets))
        kept = [budget for budget in budgets if budget > auc_start]
        for budget in sorted(set(budgets) - set(kept)):
            warn(
                f"{env_id}: budget {budget:,} frames is not after {auc_start:,} frames, the first frame every run "
                "has an evaluation at; skipped"
            )
        return kept
    shortest = min(env_runs, key=lambda run: (run["frames"][-1], run["script"], str(run["seed"])))
    largest = int(shortest["frames"][-1])
    # A crashed, running or smoke-test run sets every default budget: say which. Judged within its script, as
    # the scripts may end a little apart (pqn_lake.py finishes its last update past --total-frames).
    longest = int(max(run["frames"][-1] for run in env_runs if run["script"] == shortest["script"]))
    if largest < longest:
        warn(
            f"{env_id}: default budgets end at {largest:,} frames, where run {shortest['folder']} ends (other "
            f"{shortest['script']} runs reach {longest:,}); pass --budgets to compare at larger ones (each counts "
            "the runs that reached it) or leave that run out"
        )
    candidates = shortest["frames"][shortest["frames"] > auc_start]
    if len(candidates) == 0:
        warn(
            f"{env_id}: no evaluation after {auc_start:,} frames, the first frame every run has an evaluation at: "
            "no budget to compare at"
        )
        return []
    return sorted({int(candidates[np.abs(candidates - largest * f).argmin()]) for f in (0.25, 0.5, 0.75, 1.0)})


def table_rows(env_id, scripts, budgets, auc_start, confidence):
    """One row per (budget, script): runs that reached the budget, their final return and mean return over frames."""
    rows = []
    for budget in budgets:
        for script, group in sorted(scripts.items()):
            reached = [run for run in group if run["frames"][-1] >= budget]
            final_returns = [float(np.interp(budget, run["frames"], run["values"])) for run in reached]
            aucs = [mean_return_over_frames(run, auc_start, budget) for run in reached]
            final_mean, final_ci = mean_and_ci(final_returns, confidence)
            auc_mean, auc_ci = mean_and_ci(aucs, confidence)
            rows.append(
                dict(
                    env_id=env_id,
                    script=script,
                    budget_frames=budget,
                    auc_start_frames=auc_start,
                    n=len(reached),
                    n_runs=len(group),
                    seeds=[run["seed"] for run in reached],
                    runs=[run["folder"] for run in reached],
                    final_return_mean=final_mean,
                    final_return_ci=final_ci,
                    final_return_per_run=final_returns,
                    auc_mean=auc_mean,
                    auc_ci=auc_ci,
                    auc_per_run=aucs,
                )
            )
    return rows


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # headless: clusters and CI have no display
    import matplotlib.pyplot as plt

    return plt


MARKERS = "os^Dv<>"  # one shape per script, so identical curves stay visible


def plot_env(env_id, scripts, script_style, args, png_path):
    """Mean curve per script, over the frames all of its runs cover (no extrapolation), with markers at the frames
    its runs evaluated at and a Student-t band where n >= 2; the mixture's clone points as dotted lines. Returns
    what it drew per script: label, marker and evaluation frames."""
    from matplotlib.ticker import EngFormatter

    plt = pyplot()
    last_frame = max(run["frames"][-1] for group in scripts.values() for run in group)
    grid = np.linspace(0.0, last_frame, args.num_points)
    fig, ax, drawn = *plt.subplots(figsize=(8, 5)), {}
    for script, group in sorted(scripts.items()):
        color, marker = script_style[script]
        start = max(run["frames"][0] for run in group)
        shortest = min(group, key=lambda run: run["frames"][-1])
        end = shortest["frames"][-1]
        if end < max(run["frames"][-1] for run in group):  # the mean needs every run: the shortest one ends it
            warn(f"{env_id}/{script}: the curve stops at {int(end):,} frames, where run {shortest['folder']} ends")
        if start > end:
            warn(f"{env_id}/{script}: its runs share no frame range with evaluations; not plotted")
            continue
        evaluated = np.unique(np.concatenate([run["frames"] for run in group]))
        evaluated = evaluated[(evaluated >= start) & (evaluated <= end)]
        script_grid = np.unique(np.concatenate([grid[(grid > start) & (grid < end)], evaluated]))
        curves = np.stack([np.interp(script_grid, run["frames"], run["values"]) for run in group])
        mean = curves.mean(axis=0)
        band = f"{args.confidence:.0%} band" if len(group) >= 2 else "n = 1: no band"
        drawn[script] = dict(
            label=f"{ARM_NAMES.get(script, script)} (n={len(group)} seeds, {band})",
            marker=marker,
            evaluations=evaluated.tolist(),
        )
        ax.plot(script_grid, mean, color=color, label=drawn[script]["label"])
        ax.plot(
            evaluated,
            np.interp(evaluated, script_grid, mean),
            color=color,
            marker=marker,
            linestyle="none",
            markersize=4,
            fillstyle="none",
        )
        if len(group) >= 2:
            half_width = t_half_width(curves, args.confidence)
            ax.fill_between(script_grid, mean - half_width, mean + half_width, color=color, alpha=0.2, linewidth=0)
        # phase ends are clone points only where the arm clones (the single PQN agent's phases are checkpoints)
        clone_frames = sorted(
            {
                frames
                for run in group
                for frames in run["clone_frames"]
                if script.removesuffix(CONSTANT_LR) not in (PQN_SINGLE, LIVE_NO_CLONE)
            }
        )
        for i, frames in enumerate(clone_frames):
            ax.axvline(
                frames,
                color=color,
                linestyle=":",
                linewidth=0.8,
                alpha=0.6,
                label=f"{ARM_NAMES.get(script, script)}: clones" if i == 0 else None,
            )
    ax.set_xlabel("environment frames")
    ax.set_ylabel(f"evaluation return ({args.metric})")
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_title(f"{env_id}: mean over seeds (markers: evaluations),\nStudent-t band where n >= 2", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return drawn


RECOVERY_KEYS = ("eval/agents_mean", "eval/frames_since_clone", PHASE_KEY)  # pqn_lake.py's evaluations of the agents


COLLAPSE_KEYS = ("distill/agreement", "distill/top_action_share")  # pqn_lake.py's BigAgent, once per phase
DIVERSITY_KEY = "diversity/disagreement"  # its agents against each other on the same states (runs since 2e3d8ac)


def read_mixture(run_folder):
    """A pqn_lake run's per-phase curves, in one read: the recovery, {phase: (frames since the phase's clone, the
    agents' mean evaluation return)}, phase 1 from scratch (frames since the start); and the collapse, {phase:
    (agreement of the BigAgent's greedy actions with its agents', its top action's share, the agents' disagreement
    with each other or nan)}. The last line wins (a resume)."""
    points, collapse = defaultdict(dict), {}
    for line in metrics_text(run_folder).splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if all(key in row for key in RECOVERY_KEYS):
            points[int(row[PHASE_KEY])][int(row["eval/frames_since_clone"])] = float(row["eval/agents_mean"])
        if all(key in row for key in COLLAPSE_KEYS):
            collapse[int(row[PHASE_KEY])] = (
                *(float(row[key]) for key in COLLAPSE_KEYS),
                float(row.get(DIVERSITY_KEY, np.nan)),
            )
    recovery = {
        phase: (np.array(sorted(p), dtype=np.float64), np.array([p[x] for x in sorted(p)]))
        for phase, p in sorted(points.items())
    }
    return recovery, dict(sorted(collapse.items()))


def plot_collapse(env_id, runs, png_path):
    """Per phase, each mixture run's BigAgent: how often its greedy action is its agents' (distill/agreement) and
    the share of its most frequent greedy action (distill/top_action_share; near 1: a BigAgent that ignores the
    screen), on 2,000 Lake states drawn each phase; where the runs log it, the agents' diversity at the phase's end
    (diversity/disagreement: the share of those states where two agents' greedy actions differ, mean over pairs)."""
    plt = pyplot()
    diverse = any(not np.isnan(values[2]) for _, collapse in runs for values in collapse.values())
    fig, axes = plt.subplots(1, 2 + diverse, figsize=(5 * (2 + diverse), 4), sharex=True)
    for i, (seed, collapse) in enumerate(sorted(runs, key=lambda run: str(run[0]))):
        phases = list(collapse)
        for ax, values in zip(axes, zip(*collapse.values())):
            ax.plot(phases, values, marker="o", color=f"C{i % 10}", label=f"seed {seed}")
    titles = (
        "BigAgent: agreement with its agents' greedy actions",
        "BigAgent: share of its most frequent greedy action",
        "agents: share of states where two disagree",
    )
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("phase")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(f"{env_id}: the BigAgent{' and its agents' if diverse else ''} at each clone (n={len(runs)})")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def plot_recovery(env_id, curves, args, png_path):
    """The agents' evaluation return against frames since the clone, one line per phase (mean over seeds at the
    frames every seed evaluated at, Student-t band where n >= 2): how fast the clones regain their level."""
    from matplotlib.ticker import EngFormatter

    plt = pyplot()
    phases = sorted({phase for c in curves for phase in c})
    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap("viridis")
    for i, phase in enumerate(phases):
        seeds = [c[phase] for c in curves if phase in c]
        common = sorted(set.intersection(*(set(x.tolist()) for x, _ in seeds)))
        if not common:
            continue
        values = np.stack([np.interp(common, x, y) for x, y in seeds])
        mean = values.mean(axis=0)
        label = f"phase {phase}" + (" (from scratch)" if phase == 1 else " (after clone)") + f", n={len(seeds)}"
        color = cmap(i / max(1, len(phases) - 1))
        ax.plot(common, mean, color=color, marker="o", markersize=3, label=label, linestyle="--" if phase == 1 else "-")
        if len(seeds) >= 2:
            half_width = t_half_width(values, args.confidence)
            ax.fill_between(common, mean - half_width, mean + half_width, color=color, alpha=0.15, linewidth=0)
    ax.set_xlabel("environment frames since the clone (all agents)")
    ax.set_ylabel("agents' mean evaluation return (eval/agents_mean)")
    ax.xaxis.set_major_formatter(EngFormatter())
    n = len(curves)
    ax.set_title(
        f"{env_id}: recovery after each clone (n={n}" + (f", {args.confidence:.0%} band)" if n >= 2 else ": no band)")
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def format_mean_ci(mean, ci, decimals):
    if mean is None:
        return "—"
    if ci is None:
        return f"{mean:.{decimals}f} (no CI, n=1)"
    return f"{mean:.{decimals}f} ± {ci:.{decimals}f}"


# Random and human scores of the 57 Atari games (game: ale-py ROM name), the reference of human-normalised scores:
# (score - random) / (human - random). Source: Mnih et al. 2015 (Nature DQN) and van Hasselt et al. 2016 (Double
# DQN), as tabulated in DeepMind's DQN Zoo (dqn_zoo/atari_data.py) and used by Rainbow, Agarwal et al. 2021 and PQN.
ATARI_RANDOM_HUMAN = {
    game: (float(random), float(human))
    for game, random, human in (
        entry.split()
        for entry in """
    alien 227.8 7127.7 | amidar 5.8 1719.5 | assault 222.4 742.0 | asterix 210.0 8503.3
    asteroids 719.1 47388.7 | atlantis 12850.0 29028.1 | bank_heist 14.2 753.1 | battle_zone 2360.0 37187.5
    beam_rider 363.9 16926.5 | berzerk 123.7 2630.4 | bowling 23.1 160.7 | boxing 0.1 12.1
    breakout 1.7 30.5 | centipede 2090.9 12017.0 | chopper_command 811.0 7387.8 | crazy_climber 10780.5 35829.4
    defender 2874.5 18688.9 | demon_attack 152.1 1971.0 | double_dunk -18.6 -16.4 | enduro 0.0 860.5
    fishing_derby -91.7 -38.7 | freeway 0.0 29.6 | frostbite 65.2 4334.7 | gopher 257.6 2412.5
    gravitar 173.0 3351.4 | hero 1027.0 30826.4 | ice_hockey -11.2 0.9 | jamesbond 29.0 302.8
    kangaroo 52.0 3035.0 | krull 1598.0 2665.5 | kung_fu_master 258.5 22736.3 | montezuma_revenge 0.0 4753.3
    ms_pacman 307.3 6951.6 | name_this_game 2292.3 8049.0 | phoenix 761.4 7242.6 | pitfall -229.4 6463.7
    pong -20.7 14.6 | private_eye 24.9 69571.3 | qbert 163.9 13455.0 | riverraid 1338.5 17118.0
    road_runner 11.5 7845.0 | robotank 2.2 11.9 | seaquest 68.4 42054.7 | skiing -17098.1 -4336.9
    solaris 1236.3 12326.7 | space_invaders 148.0 1668.7 | star_gunner 664.0 10250.0 | surround -10.0 6.5
    tennis -23.8 -8.3 | time_pilot 3568.0 5229.2 | tutankham 11.4 167.6 | up_n_down 533.4 11693.2
    venture 0.0 1187.5 | video_pinball 16256.9 17667.9 | wizard_of_wor 563.5 4756.5 | yars_revenge 3092.9 54576.9
    zaxxon 32.5 9173.3
""".replace("\n", "|").split("|")
        if entry.strip()
    )
}
MIXTURE, SINGLE = "pqn_lake", "dqn_single_baseline"
# The single-PQN arm: pqn_lake.py with --big-agent-schedule none (its config.json says so), the mixture's PQN agent
# alone on all the frames; an arm of its own beside the mixture and the DQN baseline.
PQN_SINGLE = "pqn_single"
# Live transfer (the design's second variant): the BigAgent learns while the agents act; eval/return is the BigAgent's.
# With clones (every phase by default) and without (--clone-every-updates 0: the BigAgent is the product).
LIVE, LIVE_NO_CLONE = "pqn_live", "pqn_live_noclone"
# The agents' learning rate annealed to 0 (--anneal-lr, the default) or constant (--no-anneal-lr, and every run made
# before the flag): arms of their own, the constant one's key suffixed
PQN_ARMS, CONSTANT_LR = (MIXTURE, PQN_SINGLE, LIVE, LIVE_NO_CLONE), "_constant_lr"
# What the figures' legends call each arm (the tables keep the keys above)
ARM_NAMES = {
    MIXTURE: "mixture",
    SINGLE: "single DQN",
    PQN_SINGLE: "single PQN",
    LIVE: "live transfer",
    LIVE_NO_CLONE: "live transfer, no clones",
}
ARM_NAMES.update({arm + CONSTANT_LR: ARM_NAMES[arm] + ", constant lr" for arm in PQN_ARMS})
# MinAtar has no human scores: each game is normalised by random play (the runs' own eval/random_return, ε = 1 under
# the same evaluation protocol, mean over the game's runs) and the MinAtar paper's DQN at 5M frames, read from its
# learning curves (Young & Tian 2019, Figure 2): 0 is random play, 1 that DQN.
MINATAR_DQN = {"asterix": 17.0, "breakout": 10.0, "freeway": 50.0, "seaquest": 20.0, "space_invaders": 43.0}
FAMILIES = {
    "atari": "human-normalised (random 0, human 1)",
    "minatar": "normalised by random play (0) and the MinAtar paper's DQN at 5M frames (1)",
}


def minatar_game(env_id):
    """'MinAtar_SpaceInvaders-v1' (a run's sanitised env id) -> 'space_invaders'; None if not MinAtar."""
    match = re.fullmatch(r"MinAtar_([A-Za-z]+)-v[01]", env_id)
    game = match and re.sub(r"(?<!^)(?=[A-Z])", "_", match[1]).lower()
    return game if game in MINATAR_DQN else None


def reference_scores(env_id, runs):
    """(family, the score normalised to 0, the score normalised to 1) of a game, or None without references."""
    if atari_game(env_id) is not None:
        return ("atari", *ATARI_RANDOM_HUMAN[atari_game(env_id)])
    randoms = [run["random_return"] for run in runs if run["random_return"] is not None]
    if minatar_game(env_id) is not None and randoms:
        return "minatar", float(np.mean(randoms)), MINATAR_DQN[minatar_game(env_id)]
    return None


def atari_game(env_id):
    """'Breakout-v5' or 'ALE_MsPacman-v5' -> 'breakout' / 'ms_pacman' (ale-py ROM names); None if not Atari."""
    match = re.fullmatch(r"(?:ALE_)?([A-Z][A-Za-z0-9]*)-v\d+", env_id)
    game = match and re.sub(r"(?<!^)(?=[A-Z])", "_", match[1]).lower()
    return game if game in ATARI_RANDOM_HUMAN else None


def bootstrap(score_dict, func, args):
    """rliable's stratified bootstrap point estimates and intervals, the same on every call: arch 7 (rliable's
    bootstrap) draws part of its resamples from NumPy's global generator whatever random_state says, so both are set."""
    from rliable import library as rly

    np.random.seed(args.bootstrap_seed)
    return rly.get_interval_estimates(
        score_dict,
        func,
        reps=args.reps,
        confidence_interval_size=args.confidence,
        random_state=np.random.RandomState(args.bootstrap_seed),
    )


def aggregate_across_games(groups, budgets_by_env, args):
    """rliable (Agarwal et al. 2021) over the games of each family with two or more games (Atari: human-normalised;
    MinAtar: normalised by random play and the MinAtar paper's DQN), at each budget every game of the family has:
    the final return at the budget normalised, IQM / median / mean with stratified bootstrap confidence intervals per
    arm, and the probability that the mixture improves on each other arm."""
    from rliable import metrics as rly_metrics

    references = {
        env_id: reference_scores(env_id, [run for runs in groups[env_id].values() for run in runs]) for env_id in groups
    }
    for env_id in sorted(env for env, ref in references.items() if ref is None):
        warn(
            f"{env_id}: no reference scores (neither one of the 57 Atari games nor a MinAtar game with random play "
            "logged); left out of the aggregates"
        )

    def aggregate(x):
        return np.array(
            [
                rly_metrics.aggregate_iqm(x),
                rly_metrics.aggregate_median(x),
                rly_metrics.aggregate_mean(x),
            ]
        )

    results = []
    for family in FAMILIES:
        envs = sorted(env for env, ref in references.items() if ref is not None and ref[0] == family)
        scripts = sorted({script for env in envs for script in groups[env]})
        budgets = sorted(set.intersection(*(set(budgets_by_env[env]) for env in envs))) if envs else []
        if len(envs) < 2 or not budgets:
            if len(envs) >= 2:
                warn(
                    f"the {dict(atari='Atari', minatar='MinAtar')[family]} games share no budget: pass --budgets for "
                    "aggregates across games"
                )
            continue
        for budget in budgets:
            scores = {}
            for script in scripts:
                per_game = []
                for env in envs:
                    runs = sorted(
                        (r for r in groups[env].get(script, []) if r["frames"][-1] >= budget),
                        key=lambda r: str(r["seed"]),
                    )
                    _, low, high = references[env]
                    per_game.append(
                        [(float(np.interp(budget, r["frames"], r["values"])) - low) / (high - low) for r in runs]
                    )
                n = min(len(g) for g in per_game)
                if n == 0:
                    warn(
                        f"{script}: no run reached {budget:,} frames in every {family} game; left out of the "
                        "aggregates there"
                    )
                    continue
                if any(len(g) > n for g in per_game):
                    warn(
                        f"{script} at {budget:,} frames: games have {[len(g) for g in per_game]} runs; the aggregates "
                        f"use the first {n} seeds of each (rliable needs as many runs per game)"
                    )
                scores[script] = np.array([g[:n] for g in per_game]).T  # (runs, games)
            if not scores:
                continue
            point, interval = {}, {}
            for script in scores:  # a bootstrap stream of its own: a script's interval does not depend on the others
                p, i = bootstrap({script: scores[script]}, aggregate, args)
                point[script], interval[script] = p[script], i[script]
            row = {
                "family": family,
                "budget_frames": budget,
                "games": envs,
                "references": {env: references[env][1:] for env in envs},
                "normalised_scores": {k: v.tolist() for k, v in scores.items()},
                "aggregates": {
                    script: {
                        name: {"point": float(point[script][i]), "ci": interval[script][:, i].tolist()}
                        for i, name in enumerate(("IQM", "median", "mean"))
                    }
                    for script in scores
                },
                "probability_of_improvement": {},
            }
            for other in (s for s in scores if s != MIXTURE and MIXTURE in scores):
                pair = f"{MIXTURE},{other}"
                p_point, p_interval = bootstrap(
                    {pair: (scores[MIXTURE], scores[other])}, rly_metrics.probability_of_improvement, args
                )
                row["probability_of_improvement"][other] = {
                    "point": float(p_point[pair]),
                    "ci": p_interval[pair][:, 0].tolist(),
                }
            results.append(row)
    return results


PROFILE_PNG = {"atari": "performance_profile.png", "minatar": "performance_profile_minatar.png"}


def plot_performance_profile(rows, script_style, args, png_path):
    """Fraction of runs with a normalised score above τ, per arm, with bootstrap bands (rliable), at the largest
    budget every game of the family has (`rows`: that family's aggregates)."""
    from rliable import library as rly
    from rliable import plot_utils

    plt = pyplot()
    last = rows[-1]
    scores = {k: np.asarray(v) for k, v in last["normalised_scores"].items()}
    top = max(1.0, max(float(v.max()) for v in scores.values()))
    taus = np.linspace(min(0.0, min(float(v.min()) for v in scores.values())), top, 101)
    np.random.seed(args.bootstrap_seed)  # as bootstrap()
    profiles, profile_cis = rly.create_performance_profile(scores, taus, reps=args.reps)
    fig, ax = plt.subplots(figsize=(7, 5))
    plot_utils.plot_performance_profiles(
        profiles,
        taus,
        performance_profile_cis=profile_cis,
        colors={k: script_style[k][0] for k in scores},
        ax=ax,
        xlabel=r"normalised score $\tau$",
    )
    ax.set_title(
        f"{last['family']}: performance profile at {last['budget_frames']:,} frames ({len(last['games'])} games)"
    )
    ax.legend(
        [plt.Line2D([0], [0], color=script_style[k][0]) for k in scores],
        [ARM_NAMES.get(k, k) for k in scores],
        loc="upper right",
    )
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def fmt_interval(point, ci, decimals):
    return f"{point:.{decimals}f} [{ci[0]:.{decimals}f}, {ci[1]:.{decimals}f}]"


def markdown_aggregates(aggregates, args):
    lines = [
        "## Across games (rliable)",
        "",
        f"Final returns at each budget, normalised per family; point estimate [{args.confidence:.0%} stratified "
        f"bootstrap interval, {args.reps} resamples]. IQM: interquartile mean over all runs of all games.",
    ]
    for family, how in FAMILIES.items():
        rows = [row for row in aggregates if row["family"] == family]
        if not rows:
            continue
        lines += [
            "",
            f"### {family}: {how}",
            "",
            f"![performance profile]({PROFILE_PNG[family]})",
            "",
            "| budget (frames) | arm | runs x games | IQM | median | mean |",
            "|---:|---|---|---:|---:|---:|",
        ]
        for row in rows:
            for script, values in row["aggregates"].items():
                shape = np.asarray(row["normalised_scores"][script]).shape
                lines.append(
                    f"| {row['budget_frames']:,} | {script} | {shape[0]} x {shape[1]} | "
                    + " | ".join(
                        fmt_interval(values[k]["point"], values[k]["ci"], args.decimals)
                        for k in ("IQM", "median", "mean")
                    )
                    + " |"
                )
        lines.append("")
        for row in rows:
            for other, p in row["probability_of_improvement"].items():
                low, high = p["ci"]
                verdict = (
                    f"the mixture beats {other}"
                    if low > 0.5
                    else f"{other} beats the mixture"
                    if high < 0.5
                    else "neither is shown better (the interval holds 0.5)"
                )
                lines.append(
                    f"- At {row['budget_frames']:,} frames, P(mixture > {other}) = "
                    f"{fmt_interval(p['point'], p['ci'], args.decimals)} over {len(row['games'])} {family} games: "
                    f"{verdict}."
                )
    return "\n".join(lines + [""])


def markdown_table(rows_by_env, starts, args):
    lines = [
        f"# {args.metric}: mixture vs single agent",
        "",
        f"Mean over seeds ± half-width of the {args.confidence:.0%} Student-t confidence interval (n - 1 df).",
        "**final**: the return at the budget, linearly interpolated between evaluations. "
        "**AUC**: the area under that curve from `start` to the budget divided by (budget - start), "
        "i.e. the mean return over frames; `start` is the first frame at which every run of the env has "
        "an evaluation (0 when all runs evaluate at frame 0). "
        "n: runs that reached the budget (of all runs of that script).",
        "",
    ]
    for env_id, rows in rows_by_env.items():
        lines += [f"## {env_id}", "", f"![{env_id}]({env_id}.png)", "", f"start = {starts[env_id]:,} frames", ""]
        if not rows:
            lines += ["No budget after start (see compare.py's warnings).", ""]
            continue
        lines += [
            "| budget (frames) | script | n | final return | AUC (mean return over frames) |",
            "|---:|---|---:|---:|---:|",
        ]
        for row in rows:
            lines.append(
                f"| {row['budget_frames']:,} | {row['script']} | {row['n']} of {row['n_runs']} | "
                f"{format_mean_ci(row['final_return_mean'], row['final_return_ci'], args.decimals)} | "
                f"{format_mean_ci(row['auc_mean'], row['auc_ci'], args.decimals)} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(args):
    if not 0 < args.confidence < 1:
        raise SystemExit(f"compare.py: error: --confidence must be in (0, 1), got {args.confidence}")
    run_folders = find_run_folders(args.paths)
    if not run_folders:
        raise SystemExit(
            f"compare.py: error: no runs found under {', '.join(args.paths)} (a run is a folder holding metrics.jsonl)"
        )
    runs = load_runs(run_folders, args.metric)
    if not runs:
        raise SystemExit(
            f"compare.py: error: none of the {len(run_folders)} run(s) under {', '.join(args.paths)} "
            f"logged '{args.metric}'"
        )
    groups = group_runs(runs)
    all_scripts = sorted({run["script"] for run in runs})
    script_style = {script: (f"C{i % 10}", MARKERS[i % len(MARKERS)]) for i, script in enumerate(all_scripts)}
    os.makedirs(args.out, exist_ok=True)

    rows_by_env, starts, budgets_by_env, figures = {}, {}, {}, {}
    for env_id in sorted(groups):
        scripts = groups[env_id]
        env_runs = [run for group in scripts.values() for run in group]
        # AUCs of all runs of an env span the same frames, so they compare even if one script evaluates later
        auc_start = starts[env_id] = int(max(run["frames"][0] for run in env_runs))
        budgets_by_env[env_id] = choose_budgets(env_runs, args.budgets, auc_start, env_id)
        rows_by_env[env_id] = table_rows(env_id, scripts, budgets_by_env[env_id], auc_start, args.confidence)
        figures[env_id] = os.path.join(args.out, f"{env_id}.png")
        plot_env(env_id, scripts, script_style, args, figures[env_id])
        mixtures = [(run["seed"], *read_mixture(run["folder"])) for run in scripts.get(MIXTURE, [])]  # one read each
        recovery_curves = [recovery for _, recovery, _ in mixtures if recovery]
        if recovery_curves:
            figures[f"{env_id} recovery"] = os.path.join(args.out, f"{env_id}_recovery.png")
            plot_recovery(env_id, recovery_curves, args, figures[f"{env_id} recovery"])
        collapses = [(seed, collapse) for seed, _, collapse in mixtures if collapse]
        if collapses:
            figures[f"{env_id} collapse"] = os.path.join(args.out, f"{env_id}_collapse.png")
            plot_collapse(env_id, collapses, figures[f"{env_id} collapse"])
    aggregates = aggregate_across_games(groups, budgets_by_env, args)
    for family in FAMILIES:
        rows = [row for row in aggregates if row["family"] == family]
        if rows:
            figures[f"{family} performance profile"] = os.path.join(args.out, PROFILE_PNG[family])
            plot_performance_profile(rows, script_style, args, figures[f"{family} performance profile"])

    markdown = markdown_table(rows_by_env, starts, args) + (
        "\n" + markdown_aggregates(aggregates, args) if aggregates else ""
    )
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown)
    results = dict(
        metric=args.metric,
        confidence=args.confidence,
        figures=figures,
        rows=[row for rows in rows_by_env.values() for row in rows],
        aggregates=aggregates or [],
    )
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(markdown)
    written = [*figures.values(), os.path.join(args.out, "results.md"), os.path.join(args.out, "results.json")]
    print(f"wrote {', '.join(written)}")


if __name__ == "__main__":
    main(tyro.cli(Args))
