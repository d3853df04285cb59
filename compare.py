# Mixture (pqn_lake.py) vs single agent (dqn_single_baseline.py): one figure per env and one table.
# Usage: python compare.py runs/ [more dirs or run folders ...] --out runs/compare/
#
# A run is a folder holding metrics.jsonl (one JSON object per line, each with "global_frames").
# Runs are grouped by (env_id, script). Per env we write <out>/<env_id>.png (mean evaluation return
# over seeds against frames, with a Student-t confidence band, clone points of the mixture marked) and
# one results.md / results.json for all envs: final return and area under the curve at frame budgets.
import dataclasses
import json
import math
import os
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
    """frame budgets for the table, e.g. 25_000_000 100_000_000; none given: the largest budget every run of an env
    reached, and 25/50/75% of it"""
    confidence: float = 0.95
    """confidence level of the Student-t intervals over seeds"""
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


def find_run_folders(paths):
    """Every folder holding metrics.jsonl, under each path (or the path itself), in a stable order."""
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise SystemExit(f"compare.py: error: path(s) do not exist: {', '.join(missing)}")
    run_folders = set()
    for path in paths:
        for folder, _, files in os.walk(path):
            if "metrics.jsonl" in files:
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
    seed = config.get("seed", from_name.get("seed"))
    if env_id is None or script is None:
        return None
    return sanitise_env_id(env_id), str(script), seed, exp_name


def read_metrics(run_folder, metric):
    """The metric's curve (frames, values; sorted, last line wins per frame) and the clone frames of a run."""
    value_at_frames, phase_end, unreadable_lines = {}, {}, 0
    with open(os.path.join(run_folder, "metrics.jsonl")) as f:
        for line in f:
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
            if PHASE_KEY in row:  # the agents are cloned at the end of each phase: its last logged frame
                phase_end[row[PHASE_KEY]] = max(frames, phase_end.get(row[PHASE_KEY], frames))
    if unreadable_lines:
        warn(f"{run_folder}: skipped {unreadable_lines} unreadable line(s) of metrics.jsonl")
    frames = np.array(sorted(value_at_frames), dtype=np.float64)
    values = np.array([value_at_frames[int(x)] for x in frames], dtype=np.float64)
    return frames, values, sorted(set(phase_end.values()))


def load_runs(run_folders, metric):
    """Runs with the metric, as dicts; runs without it are skipped with a warning naming the folder."""
    runs = []
    for run_folder in run_folders:
        identity = read_run_identity(run_folder)
        if identity is None:
            warn(f"{run_folder}: no config.json with env_id/script and the folder name is not a CleanRL run_name; skipped")
            continue
        frames, values, clone_frames = read_metrics(run_folder, metric)
        if len(frames) == 0:
            warn(f"{run_folder}: no '{metric}' in metrics.jsonl; skipped")
            continue
        env_id, script, seed, exp_name = identity
        runs.append(dict(folder=run_folder, env_id=env_id, script=script, seed=seed, exp_name=exp_name,
                         frames=frames, values=values, clone_frames=clone_frames))
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
                warn(f"{env_id}/{script}: the same seed appears in several run folders (seeds {seeds}); "
                     "each folder counts as one sample")
            exp_names = sorted({str(run["exp_name"]) for run in group})
            if len(exp_names) > 1:
                warn(f"{env_id}/{script}: runs with different exp_names {exp_names} are averaged together")
    return groups


def two_sided_t_probability(t, df):
    """P(|T| < t) for Student's t with integer df: the closed-form series (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:  # odd df: (2/pi) * (theta + sin * (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(df-2)))
        term, series = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):
            series += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        return 2 / math.pi * (theta + sin * series)
    term, series = 1.0, 0.0  # even df: sin * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
    for k in range(1, df // 2 + 1):
        series += term
        term *= cos2 * (2 * k - 1) / (2 * k)
    return sin * series


def t_critical_value(confidence, df):
    """t such that P(|T| < t) = confidence, by bisection on theta = atan(t / sqrt(df)) in (0, pi/2)."""
    low, high = 0.0, math.pi / 2
    for _ in range(100):  # halves the interval 100 times: far below float precision
        theta = (low + high) / 2
        if two_sided_t_probability(math.sqrt(df) * math.tan(theta), df) < confidence:
            low = theta
        else:
            high = theta
    return math.sqrt(df) * math.tan((low + high) / 2)


def mean_and_ci(samples, confidence):
    """Mean over seeds and the half-width of its Student-t interval (None where n < 2 leaves it undefined)."""
    samples = np.asarray(samples, dtype=np.float64)
    n = len(samples)
    if n == 0:
        return None, None
    if n == 1:
        return float(samples[0]), None
    half_width = t_critical_value(confidence, n - 1) * samples.std(ddof=1) / math.sqrt(n)
    return float(samples.mean()), float(half_width)


def mean_return_over_frames(run, start, budget):
    """Area under the run's linearly interpolated curve from start to budget, divided by (budget - start).
    The curve is piecewise linear between evaluations, so the trapezoid over its knots is exact."""
    inside = (run["frames"] > start) & (run["frames"] < budget)
    knots = np.concatenate([[start], run["frames"][inside], [budget]])
    values = np.interp(knots, run["frames"], run["values"])
    return float(np.trapezoid(values, knots) / (budget - start))


def choose_budgets(env_runs, requested_budgets, auc_start, env_id):
    """The requested budgets, or the largest budget every run reached and 25/50/75% of it; only those after
    the first frame at which every run has an evaluation (before it some curve would need extrapolating)."""
    if requested_budgets:
        budgets = sorted(set(requested_budgets))
    else:
        shortest = min(env_runs, key=lambda run: run["frames"][-1])
        largest = int(shortest["frames"][-1])
        budgets = sorted({int(round(largest * fraction)) for fraction in (0.25, 0.5, 0.75, 1.0)})
        # A crashed, running or smoke-test run sets every default budget: say which. Judged within its script, as
        # the scripts may end a little apart (pqn_lake.py finishes its last update past --total-frames).
        longest = int(max(run["frames"][-1] for run in env_runs if run["script"] == shortest["script"]))
        if largest < longest:
            warn(f"{env_id}: default budgets are 25/50/75/100% of {largest:,} frames, where run {shortest['folder']} "
                 f"ends (other {shortest['script']} runs reach {longest:,}); pass --budgets to compare at larger ones "
                 "(each counts the runs that reached it) or leave that run out")
    kept = [budget for budget in budgets if budget > auc_start]
    for budget in sorted(set(budgets) - set(kept)):
        warn(f"{env_id}: budget {budget:,} frames is not after {auc_start:,} frames, the first frame every run "
             "has an evaluation at; skipped")
    return kept


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
            rows.append(dict(env_id=env_id, script=script, budget_frames=budget, auc_start_frames=auc_start,
                             n=len(reached), n_runs=len(group), seeds=[run["seed"] for run in reached],
                             runs=[run["folder"] for run in reached],
                             final_return_mean=final_mean, final_return_ci=final_ci, final_return_per_run=final_returns,
                             auc_mean=auc_mean, auc_ci=auc_ci, auc_per_run=aucs))
    return rows


def plot_env(env_id, scripts, script_colors, args, png_path):
    """Mean curve and confidence band per script, each over the frames all of its runs cover (no extrapolation)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: clusters and CI have no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    last_frame = max(run["frames"][-1] for group in scripts.values() for run in group)
    grid = np.linspace(0.0, last_frame, args.num_points)
    fig, ax = plt.subplots(figsize=(8, 5))
    for script, group in sorted(scripts.items()):
        color = script_colors[script]
        start = max(run["frames"][0] for run in group)
        shortest = min(group, key=lambda run: run["frames"][-1])
        end = shortest["frames"][-1]
        if end < max(run["frames"][-1] for run in group):  # the mean needs every run: the shortest one ends it
            warn(f"{env_id}/{script}: the curve stops at {int(end):,} frames, where run {shortest['folder']} ends")
        if start > end:
            warn(f"{env_id}/{script}: its runs share no frame range with evaluations; not plotted")
            continue
        script_grid = np.unique(np.concatenate([[start], grid[(grid > start) & (grid < end)], [end]]))
        curves = np.stack([np.interp(script_grid, run["frames"], run["values"]) for run in group])
        mean = curves.mean(axis=0)
        ax.plot(script_grid, mean, color=color, marker="o" if len(script_grid) == 1 else None,
                label=f"{script} (n={len(group)} seeds)")
        if len(group) >= 2:
            half_width = t_critical_value(args.confidence, len(group) - 1) * curves.std(axis=0, ddof=1)
            half_width /= math.sqrt(len(group))
            ax.fill_between(script_grid, mean - half_width, mean + half_width, color=color, alpha=0.2, linewidth=0)
        clone_frames = sorted({frames for run in group for frames in run["clone_frames"]})
        for i, frames in enumerate(clone_frames):
            ax.axvline(frames, color=color, linestyle=":", linewidth=0.8, alpha=0.6,
                       label=f"{script} clone points" if i == 0 else None)
    ax.set_xlabel("environment frames")
    ax.set_ylabel(f"evaluation return ({args.metric})")
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_title(f"{env_id}: mean over seeds, {args.confidence:.0%} Student-t confidence band")
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


def markdown_table(rows_by_env, starts, args):
    lines = [f"# {args.metric}: mixture vs single agent", "",
             f"Mean over seeds ± half-width of the {args.confidence:.0%} Student-t confidence interval (n - 1 df).",
             "**final**: the return at the budget, linearly interpolated between evaluations. "
             "**AUC**: the area under that curve from `start` to the budget divided by (budget - start), "
             "i.e. the mean return over frames; `start` is the first frame at which every run of the env has "
             "an evaluation (0 when all runs evaluate at frame 0). "
             "n: runs that reached the budget (of all runs of that script).", ""]
    for env_id, rows in rows_by_env.items():
        lines += [f"## {env_id}", "", f"![{env_id}]({env_id}.png)", "", f"start = {starts[env_id]:,} frames", ""]
        if not rows:
            lines += ["No budget after start (see compare.py's warnings).", ""]
            continue
        lines += ["| budget (frames) | script | n | final return | AUC (mean return over frames) |",
                  "|---:|---|---:|---:|---:|"]
        for row in rows:
            lines.append(f"| {row['budget_frames']:,} | {row['script']} | {row['n']} of {row['n_runs']} | "
                         f"{format_mean_ci(row['final_return_mean'], row['final_return_ci'], args.decimals)} | "
                         f"{format_mean_ci(row['auc_mean'], row['auc_ci'], args.decimals)} |")
        lines.append("")
    return "\n".join(lines)


def main(args):
    if not 0 < args.confidence < 1:
        raise SystemExit(f"compare.py: error: --confidence must be in (0, 1), got {args.confidence}")
    run_folders = find_run_folders(args.paths)
    if not run_folders:
        raise SystemExit(f"compare.py: error: no runs found under {', '.join(args.paths)} "
                         "(a run is a folder holding metrics.jsonl)")
    runs = load_runs(run_folders, args.metric)
    if not runs:
        raise SystemExit(f"compare.py: error: none of the {len(run_folders)} run(s) under {', '.join(args.paths)} "
                         f"logged '{args.metric}'")
    groups = group_runs(runs)
    all_scripts = sorted({run["script"] for run in runs})
    script_colors = {script: f"C{i % 10}" for i, script in enumerate(all_scripts)}  # same color in every figure
    os.makedirs(args.out, exist_ok=True)

    rows_by_env, starts, figures = {}, {}, {}
    for env_id in sorted(groups):
        scripts = groups[env_id]
        env_runs = [run for group in scripts.values() for run in group]
        # AUCs of all runs of an env span the same frames, so they compare even if one script evaluates later
        auc_start = starts[env_id] = int(max(run["frames"][0] for run in env_runs))
        budgets = choose_budgets(env_runs, args.budgets, auc_start, env_id)
        rows_by_env[env_id] = table_rows(env_id, scripts, budgets, auc_start, args.confidence)
        figures[env_id] = os.path.join(args.out, f"{env_id}.png")
        plot_env(env_id, scripts, script_colors, args, figures[env_id])

    markdown = markdown_table(rows_by_env, starts, args)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown)
    results = dict(metric=args.metric, confidence=args.confidence, figures=figures,
                   rows=[row for rows in rows_by_env.values() for row in rows])
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(markdown)
    print(f"wrote {', '.join(list(figures.values()) + [os.path.join(args.out, 'results.md'), os.path.join(args.out, 'results.json')])}")


if __name__ == "__main__":
    main(tyro.cli(Args))
