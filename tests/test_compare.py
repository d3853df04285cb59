"""compare.py on synthetic run folders: figures exist, and every number it writes is recomputed here from the
metrics.jsonl files with this file's own parsing, interpolation and integration, scipy's Student-t interval and
rliable's aggregates called directly (compare.py is imported only to read the clone points and draw one figure)."""

import json
import math
import os
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

import compare
import script_runs

REPO_ROOT = Path(__file__).resolve().parent.parent
MIXTURE, BASELINE = "pqn_lake", "dqn_single_baseline"


def compare_run(*flags: str):
    """`python compare.py flags...`, forked from the tests' run server (its imports preloaded): exit code and output."""
    return script_runs.run_any("compare.py", *flags, timeout=120)


# ---------------------------------------------------------------- synthetic runs
def eval_curve(env_index, script, seed, frames):
    """A different, known, non-linear learning curve per (env, script, seed)."""
    slope = 0.4 + 0.1 * seed + (0.25 if script == MIXTURE else 0.0) + env_index
    return slope * frames / 1000 + (2 + seed) * math.sin(frames / 7000 + seed) - 3 * env_index


def write_run(
    root,
    env_id,
    script,
    seed,
    eval_frames,
    clone_frames=(),
    timestamp=1700000000,
    write_config=True,
    duplicate_at=None,
    truncated_tail=False,
    metric="eval/return",
):
    """A run folder as pqn_lake.py / dqn_single_baseline.py write it; returns the folder."""
    env_index = 0 if "Breakout" in env_id else 1
    run_name = f"{env_id.replace(':', '_').replace('/', '_')}__{script}__{seed}__{timestamp}"
    folder = Path(root) / run_name
    folder.mkdir(parents=True)
    if write_config:
        config = {
            "script": script,
            "env_id": env_id,
            "seed": seed,
            "exp_name": script,
            "total_frames": 40000,
            "anneal_lr": True,
        }
        (folder / "config.json").write_text(json.dumps(config))
    lines = []
    for frames in sorted(set(eval_frames) | set(clone_frames)):
        if frames in clone_frames:  # the mixture logs its phase at the clone point
            lines.append({"global_frames": frames, "charts/phase": clone_frames.index(frames) + 1})
        if frames in eval_frames:
            value = eval_curve(env_index, script, seed, frames)
            lines.append({"global_frames": frames, metric: value, "charts/SPS": 1234})
        lines.append({"global_frames": frames + 7, "charts/episodic_return": -1.0})  # other metrics in between
    if duplicate_at is not None:  # a resume logs this frame count again: the later line must win
        stale = {"global_frames": duplicate_at, metric: 999.0}
        index = next(i for i, line in enumerate(lines) if line["global_frames"] == duplicate_at)
        lines.insert(index, stale)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if truncated_tail:  # killed mid-write
        text += '{"global_frames": 99000, "eval/re'
    (folder / "metrics.jsonl").write_text(text)
    return folder


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """Two envs x two scripts x 3-4 seeds, in nested folders, with the quirks compare.py must handle."""
    root = tmp_path_factory.mktemp("runs")
    breakout_phases = list(range(4000, 40001, 4000))
    pong_phases = list(range(5000, 45001, 5000))
    for seed in (1, 2, 3):
        # mixture on Breakout: evaluates after each phase (not at frame 0); seed 3 was stopped early
        phases = breakout_phases if seed != 3 else breakout_phases[:8]
        write_run(
            root / "mixture",
            "Breakout-v5",
            MIXTURE,
            seed,
            phases,
            clone_frames=phases,
            duplicate_at=20000 if seed == 1 else None,
            truncated_tail=seed == 2,
        )
        write_run(root / "mixture", "ALE/Pong-v5", MIXTURE, seed, pong_phases, clone_frames=pong_phases)
        # baseline on Pong: irregular evaluation frames from 0
        pong_frames = sorted({0, 45000} | {int(3000 * k + 137 * seed) for k in range(1, 15)})
        write_run(root / "baseline" / "pong", "ALE/Pong-v5", BASELINE, seed, pong_frames)
    for seed in (1, 2, 3, 4):
        # baseline on Breakout: 4 seeds from frame 0; seed 4 has no config.json (name parsing fallback)
        write_run(
            root / "baseline",
            "Breakout-v5",
            BASELINE,
            seed,
            list(range(0, 40001, 2500)),
            write_config=seed != 4,
            duplicate_at=10000 if seed == 2 else None,
        )
    # a run without the evaluation metric: warned about and skipped
    write_run(root / "broken", "Breakout-v5", BASELINE, 9, [0, 1000], metric="charts/not_eval")
    return root


def expected_runs(root):
    """(env_id, script, seed) of every run folder that has the metric, from the folder layout this file wrote."""
    runs = {}
    for metrics_path in Path(root).rglob("metrics.jsonl"):
        env_id, script, seed, _ = metrics_path.parent.name.split("__")
        if "broken" not in metrics_path.parts:
            runs[metrics_path.parent] = (env_id, script, int(seed))
    return runs


# ---------------------------------------------------------------- independent recomputation
def read_curve(metrics_path, metric="eval/return"):
    """Frames and values of the metric; the later of two lines with the same frame count wins."""
    points = {}
    for line in Path(metrics_path).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if metric in row:
            points[row["global_frames"]] = row[metric]
    frames = sorted(points)
    return frames, [points[f] for f in frames]


def interpolate(frames, values, x):
    for (x0, y0), (x1, y1) in zip(zip(frames, values), zip(frames[1:], values[1:])):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if x == frames[0]:
        return values[0]
    raise AssertionError(f"{x} outside {frames[0]}..{frames[-1]}")


def integral(frames, values, start, end):
    """Exact integral of the piecewise-linear curve over [start, end], segment by segment."""
    total = 0.0
    for x0, x1 in zip(frames, frames[1:]):
        a, b = max(x0, start), min(x1, end)
        if a < b:
            total += (b - a) * (interpolate(frames, values, a) + interpolate(frames, values, b)) / 2
    return total


def mean_ci(samples, confidence=0.95):
    from scipy import stats

    if not samples:
        return None, None
    if len(samples) == 1:
        return samples[0], None
    if len(set(samples)) == 1:  # every seed alike: a zero-width interval (scipy's t.interval gives nan at scale 0)
        return samples[0], 0.0
    low, high = stats.t.interval(confidence, len(samples) - 1, loc=np.mean(samples), scale=stats.sem(samples))
    return statistics.mean(samples), (high - low) / 2


def recompute_rows(root, budgets_by_env, confidence=0.95):
    """{(env_id, script, budget): numbers} from the metrics.jsonl files alone."""
    curves = {folder: read_curve(folder / "metrics.jsonl") for folder in expected_runs(root)}
    identities = expected_runs(root)
    expected = {}
    for env_id, budgets in budgets_by_env.items():
        env_folders = [f for f, (env, _, _) in identities.items() if env == env_id]
        start = max(curves[f][0][0] for f in env_folders)
        for budget in budgets:
            for script in (MIXTURE, BASELINE):
                group = [f for f in env_folders if identities[f][1] == script]
                reached = [f for f in group if curves[f][0][-1] >= budget]
                finals = [interpolate(*curves[f], budget) for f in reached]
                aucs = [integral(*curves[f], start, budget) / (budget - start) for f in reached]
                expected[env_id, script, budget] = dict(
                    n=len(reached),
                    n_runs=len(group),
                    start=start,
                    seeds=sorted(identities[f][2] for f in reached),
                    runs=sorted(str(f) for f in reached),
                    final=mean_ci(finals, confidence),
                    auc=mean_ci(aucs, confidence),
                )
    return expected


def assert_close(actual, expected, tolerance):
    if expected is None:
        assert actual is None
    else:
        assert actual is not None and abs(actual - expected) <= tolerance, (actual, expected)


def parse_markdown(text):
    """{(env_id, script, budget): (n, n_runs, final cell, auc cell)} from results.md's tables."""
    parsed, env_id = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            env_id = line[3:].strip()
        match = re.match(r"\| ([\d,]+) \| (\S+) \| (\d+) of (\d+) \| (.+) \| (.+) \|$", line)
        if match:
            budget, script, n, n_runs, final, auc = match.groups()
            parsed[env_id, script, int(budget.replace(",", ""))] = (int(n), int(n_runs), final, auc)
    return parsed


def parse_cell(cell):
    if cell == "—":
        return None, None
    if "±" in cell:
        mean, ci = cell.split("±")
        return float(mean), float(ci)
    return float(cell.split()[0]), None


def assert_png(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 400 and height >= 300 and len(data) > 10_000, (width, height, len(data))


# ---------------------------------------------------------------- tests
ENVS = ["Breakout-v5", "ALE_Pong-v5"]


@pytest.mark.parametrize(
    "budgets, decimals",
    [
        ((2000, 10000, 30000, 40000, 50000), 8),  # explicit: 2000 is before the mixture's first eval, 50000 beyond all
        ((), 2),  # default: largest budget every run reached and 25/50/75% of it; readable decimals
    ],
)
def test_compare_numbers_recomputed_from_metrics(runs_root, tmp_path, budgets, decimals):
    out = tmp_path / "compare"
    command = [
        str(runs_root),
        "--out",
        str(out),
        "--decimals",
        str(decimals),
        "--reps",
        "100",
    ]  # the aggregates' bootstrap: checked against rliable in the tests below
    if budgets:
        command += ["--budgets", *map(str, budgets)]
    result = compare_run(*command)
    assert result.returncode == 0, result.stderr

    # written files, and warnings naming what was skipped; both games are Atari games with reference scores: with
    # budgets common to both, the aggregates across games and their performance profile
    profile = ["performance_profile.png"] if budgets else []
    assert sorted(os.listdir(out)) == sorted([f"{env}.png" for env in ENVS] + ["results.json", "results.md"] + profile)
    for env in ENVS:
        assert_png(out / f"{env}.png")
    broken_run = next((runs_root / "broken").iterdir())
    assert f"{broken_run}: no 'eval/return'" in result.stderr
    assert "skipped 1 unreadable line" in result.stderr
    markdown = (out / "results.md").read_text()
    assert markdown.strip() in result.stdout

    if budgets:
        assert "budget 2,000 frames" in result.stderr  # skipped: the mixture has no evaluation before 4,000
        budgets_by_env = {env: [b for b in budgets if b != 2000] for env in ENVS}
    else:  # the evaluation frames after start of the run that ends first, nearest 25/50/75/100% of its end: Breakout,
        # mixture seed 3 (stopped at 32,000; evaluations every 4,000); Pong, all end at 45,000: baseline seed 1
        # (evaluations at 3,000 k + 137, then 45,000)
        budgets_by_env = {"Breakout-v5": [8000, 16000, 24000, 32000], "ALE_Pong-v5": [12137, 21137, 33137, 45000]}
    stopped = next(f for f in (runs_root / "mixture").iterdir() if f.name.startswith(f"Breakout-v5__{MIXTURE}__3__"))
    if not budgets:
        assert f"default budgets end at 32,000 frames, where run {stopped} ends" in result.stderr
        assert "the Atari games share no budget" in result.stderr
        assert "ALE_Pong-v5: default budgets" not in result.stderr  # every Pong run reaches 45,000
    assert f"Breakout-v5/{MIXTURE}: the curve stops at 32,000 frames, where run {stopped} ends" in result.stderr
    assert f"Breakout-v5/{BASELINE}: the curve stops" not in result.stderr
    expected = recompute_rows(runs_root, budgets_by_env)

    results = json.loads((out / "results.json").read_text())
    assert results["metric"] == "eval/return" and results["confidence"] == 0.95
    rows = {(r["env_id"], r["script"], r["budget_frames"]): r for r in results["rows"]}
    assert sorted(rows) == sorted(expected)
    markdown_rows = parse_markdown(markdown)
    assert sorted(markdown_rows) == sorted(expected)
    for key, want in expected.items():
        row = rows[key]
        assert (row["n"], row["n_runs"], row["auc_start_frames"]) == (want["n"], want["n_runs"], want["start"]), key
        assert sorted(row["seeds"]) == want["seeds"] and sorted(row["runs"]) == want["runs"], key
        assert_close(row["final_return_mean"], want["final"][0], 1e-6)
        assert_close(row["final_return_ci"], want["final"][1], 1e-6)
        assert_close(row["auc_mean"], want["auc"][0], 1e-6)
        assert_close(row["auc_ci"], want["auc"][1], 1e-6)
        n, n_runs, final_cell, auc_cell = markdown_rows[key]
        assert (n, n_runs) == (want["n"], want["n_runs"]), key
        display_tolerance = 0.5 * 10**-decimals + 1e-9  # results.md rounds to --decimals
        for cell, (mean, ci) in ((final_cell, want["final"]), (auc_cell, want["auc"])):
            shown_mean, shown_ci = parse_cell(cell)
            assert_close(shown_mean, mean, display_tolerance)  # with --decimals 8: within 1e-6, as results.json
            assert_close(shown_ci, ci, display_tolerance)

    # the statistics cases the data was built to hit
    if budgets:
        assert rows["Breakout-v5", MIXTURE, 40000]["n"] == 2  # seed 3 stopped at 32,000: excluded, t with 1 df
        assert rows["Breakout-v5", BASELINE, 40000]["n"] == 4  # includes the seed without config.json: 3 df
        assert rows["Breakout-v5", MIXTURE, 50000]["n"] == 0 and rows["Breakout-v5", MIXTURE, 50000]["auc_mean"] is None
        assert rows["Breakout-v5", MIXTURE, 10000]["auc_start_frames"] == 4000  # AUC spans frames every run evaluated


def test_duplicate_frames_keep_the_last_line(runs_root, tmp_path):
    # the stale 999.0 logged before a resume must not leak into any number
    out = tmp_path / "compare"
    assert compare_run(str(runs_root), "--out", str(out), "--budgets", "20000", "--reps", "100").returncode == 0
    row = next(
        r
        for r in json.loads((out / "results.json").read_text())["rows"]
        if r["env_id"] == "Breakout-v5" and r["script"] == MIXTURE
    )
    assert 999.0 not in row["final_return_per_run"]
    assert max(row["final_return_per_run"]) < 100


def test_scripts_ending_a_little_apart_is_no_partial_run(tmp_path):
    # a finished study: the mixture's last update ends past the baseline's budget; nothing ended early
    for seed in (1, 2):
        write_run(tmp_path / "runs", "Breakout-v5", MIXTURE, seed, [10000, 20000, 40448])
        write_run(tmp_path / "runs", "Breakout-v5", BASELINE, seed, [0, 20000, 40000])
    result = compare_run(str(tmp_path / "runs"), "--out", str(tmp_path / "compare"))
    assert result.returncode == 0, result.stderr
    assert "default budgets" not in result.stderr and "the curve stops" not in result.stderr


def test_no_budget_after_start_says_so(tmp_path):
    # every run evaluates first at 30,000 and one stops there: no default budget is after start
    for seed, frames in ((1, [30000, 40000]), (2, [30000])):
        write_run(tmp_path / "runs", "Breakout-v5", MIXTURE, seed, frames)
    out = tmp_path / "compare"
    result = compare_run(str(tmp_path / "runs"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "no evaluation after 30,000 frames" in result.stderr
    markdown = (out / "results.md").read_text()
    assert "start = 30,000 frames" in markdown and "No budget after start" in markdown and "| budget" not in markdown


def test_exp_names_that_differ_only_by_their_seed_are_one_experiment(tmp_path):
    # minatar_study.py names its runs <game>__<arm>__<seed>: one experiment; other names are still flagged
    for seed, exp_name in ((1, "Breakout__mixture__1"), (2, "Breakout__mixture__2"), (3, "Breakout__other__3")):
        folder = write_run(tmp_path / "runs", "Breakout-v5", MIXTURE, seed, [4000, 8000])
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "exp_name": exp_name}))
    result = compare_run(str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "different exp_names ['Breakout__mixture', 'Breakout__other']" in result.stderr


def test_no_runs_is_a_clear_error(tmp_path):
    empty = tmp_path / "nothing_here"
    (empty / "some_dir").mkdir(parents=True)
    result = compare_run(str(empty), "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "no runs found" in result.stderr and str(empty) in result.stderr
    assert not (tmp_path / "out").exists()

    missing = tmp_path / "typo"
    result = compare_run(str(missing))
    assert result.returncode != 0 and str(missing) in result.stderr


def test_compare_on_real_runs_of_both_scripts(tmp_path):
    """Tiny real runs of pqn_lake.py and dqn_single_baseline.py (two seeds each, synthetic env): compare.py
    groups them by script, draws the PNG and writes the tables, and its numbers are recomputed here."""
    root = tmp_path / "runs"
    env_id, frames = "tests.synthetic_env:PondGlyphSmall-v0", 384  # 3 mixture phases of 128 frames
    common = [
        "--env-id",
        env_id,
        "--frame-height",
        "36",
        "--frame-width",
        "36",
        "--total-frames",
        str(frames),
        "--eval-episodes",
        "2",
        "--runs-dir",
        str(root),
    ]
    mixture = [
        "pqn_lake.py",
        "--num-agents",
        "2",
        "--num-envs",
        "4",
        "--num-steps",
        "8",
        "--num-minibatches",
        "2",
        "--pond-steps",
        "8",
        "--agent-updates-per-phase",
        "2",
        "--big-pond-size",
        "200",
        "--big-batch-size",
        "16",
        "--collapse-probe-states",
        "256",
    ]
    baseline = [
        "dqn_single_baseline.py",
        "--num-envs",
        "4",
        "--eval-every-frames",
        "128",
        "--learning-starts",
        "32",
        "--buffer-size",
        "384",
        "--batch-size",
        "16",
    ]
    script_runs.run_together(
        *[(*script, *common, "--seed", seed) for script in (mixture, baseline) for seed in ("1", "2")]
    )
    identities = expected_runs(root)
    assert sorted((script, seed) for _, script, seed in identities.values()) == [
        (BASELINE, 1),
        (BASELINE, 2),
        (MIXTURE, 1),
        (MIXTURE, 2),
    ]
    for folder, (_, script, _) in identities.items():  # what compare.py groups by is what the script wrote
        assert json.loads((folder / "config.json").read_text())["script"] == script
        # the clone points marked in the figure are the mixture's phase ends (3 phases of 128 frames)
        clone_frames = compare.read_metrics(str(folder), "eval/return")[2]
        assert clone_frames == ([128, 256, 384] if script == MIXTURE else []), (script, clone_frames)

    out = tmp_path / "compare"
    budgets = [256, 384]
    result = compare_run(str(root), "--out", str(out), "--decimals", "8", "--budgets", *map(str, budgets))
    assert result.returncode == 0, result.stderr
    env = "tests.synthetic_env_PondGlyphSmall-v0"
    assert sorted(os.listdir(out)) == sorted(
        [f"{env}.png", f"{env}_recovery.png", f"{env}_collapse.png", "results.json", "results.md"]
    )
    assert_png(out / f"{env}.png")
    assert_png(out / f"{env}_recovery.png")
    assert_png(out / f"{env}_collapse.png")
    expected = recompute_rows(root, {env: budgets})
    rows = {
        (r["env_id"], r["script"], r["budget_frames"]): r
        for r in json.loads((out / "results.json").read_text())["rows"]
    }
    markdown_rows = parse_markdown((out / "results.md").read_text())
    assert sorted(rows) == sorted(expected) == sorted(markdown_rows)
    for key, want in expected.items():
        row = rows[key]
        assert (row["n"], row["n_runs"], row["auc_start_frames"]) == (2, 2, want["start"]), key
        for name, (mean, ci) in (("final_return", want["final"]), ("auc", want["auc"])):
            assert_close(row[f"{name}_mean"], mean, 1e-6)
            assert_close(row[f"{name}_ci"], ci, 1e-6)
        for cell, (mean, ci) in zip(markdown_rows[key][2:], (want["final"], want["auc"])):
            shown_mean, shown_ci = parse_cell(cell)
            assert_close(shown_mean, mean, 1e-6)
            assert_close(shown_ci, ci, 1e-6)


# Published random and human scores (Mnih et al. 2015; van Hasselt et al. 2016) of the games below.
REFERENCE = {"Breakout-v5": (1.7, 30.5), "Pong-v5": (-20.7, 14.6), "MsPacman-v5": (307.3, 6951.6)}


def test_aggregates_across_games_reproduce_rliable(tmp_path):
    """Two scripts x three games x three seeds: the IQM, median and mean of human-normalised scores, their stratified
    bootstrap intervals and the probability of improvement equal rliable's, called here on the same scores."""
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(0)
    frames = [0, 10000, 20000, 30000]
    finals = {}
    for env_id, (random, human) in REFERENCE.items():
        for script in (MIXTURE, BASELINE):
            for seed in (1, 2, 3):
                values = random + (human - random) * rng.uniform(0, 1.5, len(frames))
                folder = tmp_path / "runs" / f"{env_id}__{script}__{seed}__1700000000"
                folder.mkdir(parents=True)
                (folder / "config.json").write_text(
                    json.dumps({"script": script, "env_id": env_id, "seed": seed, "anneal_lr": True})
                )
                (folder / "metrics.jsonl").write_text(
                    "".join(
                        json.dumps({"global_frames": f, "eval/return": float(v)}) + "\n" for f, v in zip(frames, values)
                    )
                )
                finals[env_id, script, seed] = {f: (v - random) / (human - random) for f, v in zip(frames, values)}
    out = tmp_path / "compare"
    result = compare_run(
        str(tmp_path / "runs"),
        "--out",
        str(out),
        "--budgets",
        "20000",
        "30000",
        "--reps",
        "100",
        "--bootstrap-seed",
        "7",
        "--decimals",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert_png(out / "performance_profile.png")
    aggregates = json.loads((out / "results.json").read_text())["aggregates"]
    assert [a["budget_frames"] for a in aggregates] == [20000, 30000]
    games = sorted(REFERENCE)  # compare.py orders games by env id
    for row in aggregates:
        budget = row["budget_frames"]
        scores = {
            script: np.array([[finals[g, script, seed][budget] for g in games] for seed in (1, 2, 3)])
            for script in (MIXTURE, BASELINE)
        }
        for script in scores:
            assert np.allclose(row["normalised_scores"][script], scores[script])

        def aggregate(x):
            return np.array([metrics.aggregate_iqm(x), metrics.aggregate_median(x), metrics.aggregate_mean(x)])

        for script in scores:
            np.random.seed(7)  # arch 7 draws in part from NumPy's global generator (see compare.bootstrap)
            point, interval = rly.get_interval_estimates(
                {script: scores[script]}, aggregate, reps=100, random_state=np.random.RandomState(7)
            )
            for i, name in enumerate(("IQM", "median", "mean")):
                assert row["aggregates"][script][name]["point"] == pytest.approx(point[script][i])
                assert row["aggregates"][script][name]["ci"] == pytest.approx(interval[script][:, i].tolist())
        pair = f"{MIXTURE},{BASELINE}"
        np.random.seed(7)
        p_point, p_interval = rly.get_interval_estimates(
            {pair: (scores[MIXTURE], scores[BASELINE])},
            metrics.probability_of_improvement,
            reps=100,
            random_state=np.random.RandomState(7),
        )
        assert row["family"] == "atari" and list(row["probability_of_improvement"]) == [BASELINE]
        assert row["probability_of_improvement"][BASELINE]["point"] == pytest.approx(p_point[pair])
        assert row["probability_of_improvement"][BASELINE]["ci"] == pytest.approx(p_interval[pair][:, 0].tolist())
        low, high = p_interval[pair][:, 0]
        verdict = "the mixture beats" if low > 0.5 else f"{BASELINE} beats" if high < 0.5 else "neither is shown better"
        assert f"At {budget:,} frames, P(mixture > {BASELINE}) = {p_point[pair]:.3f}" in result.stdout
        assert verdict in [line for line in result.stdout.splitlines() if f"At {budget:,} frames" in line][0]


def test_per_game_interval_is_scipys():
    from scipy import stats

    samples = [3.0, 5.5, 4.25, 9.0]
    mean, half_width = compare.mean_and_ci(samples, 0.9)
    low, high = stats.t.interval(0.9, 3, loc=np.mean(samples), scale=stats.sem(samples))
    assert mean == pytest.approx(np.mean(samples)) and half_width == pytest.approx((high - low) / 2)
    assert compare.mean_and_ci([2.0], 0.95) == (2.0, None)


def test_figure_marks_evaluations_and_says_when_there_is_no_band(tmp_path):
    """Markers at every evaluation frame (one shape per script); n = 1 says it has no band."""
    one = write_run(tmp_path / "a", "Breakout-v5", MIXTURE, 1, [4000, 8000, 12000])
    two = [write_run(tmp_path / "b", "Breakout-v5", BASELINE, seed, [0, 5000, 12000]) for seed in (1, 2)]
    runs = compare.load_runs([str(one)] + [str(f) for f in two], "eval/return")
    scripts = compare.group_runs(runs)["Breakout-v5"]
    args = compare.Args()
    style = {MIXTURE: ("C0", "o"), BASELINE: ("C1", "s")}
    drawn = compare.plot_env("Breakout-v5", scripts, style, args, str(tmp_path / "fig.png"))
    assert_png(tmp_path / "fig.png")
    assert drawn[MIXTURE]["evaluations"] == [4000, 8000, 12000] and "n = 1: no band" in drawn[MIXTURE]["label"]
    assert drawn[BASELINE]["evaluations"] == [0, 5000, 12000] and "95% band" in drawn[BASELINE]["label"]
    assert drawn[MIXTURE]["marker"] != drawn[BASELINE]["marker"]


def test_minatar_normalisation_arms_and_aggregates_reproduce_rliable(tmp_path):
    """Seven arms (the mixture; live transfer with and without clones and the single PQN agent, pqn_lake runs whose
    config.json says --big-agent-schedule live / none; the mixture and the single agent at a constant rate, one saying
    anneal_lr false, one made before the flag, without it; the DQN baseline) x two MinAtar games x three seeds: each
    game is normalised by its runs' mean random play
    (eval/random_return) and the MinAtar paper's DQN (compare.MINATAR_DQN); the IQM, median, mean and the mixture's
    probability of improvement over each single arm equal rliable's, called here on the same scores."""
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(1)
    frames = [0, 10000, 20000]
    arms = {
        MIXTURE: (MIXTURE, {}),
        "pqn_single": (MIXTURE, {"big_agent_schedule": "none"}),
        BASELINE: (BASELINE, {}),
        "pqn_live": (MIXTURE, {"big_agent_schedule": "live", "clone_every_updates": 50}),
        "pqn_live_noclone": (MIXTURE, {"big_agent_schedule": "live", "clone_every_updates": 0}),
        "pqn_lake_constant_lr": (MIXTURE, {"anneal_lr": False}),
        "pqn_single_constant_lr": (MIXTURE, {"big_agent_schedule": "none", "anneal_lr": None}),
    }
    games = {"MinAtar/Breakout-v1": "breakout", "MinAtar/SpaceInvaders-v1": "space_invaders"}
    finals, randoms = {}, {}
    for env_id, game in games.items():
        for arm, (script, extra) in arms.items():
            for seed in (1, 2, 3):
                random = float(rng.uniform(0, 3))
                randoms.setdefault(env_id, []).append(random)
                values = compare.MINATAR_DQN[game] * rng.uniform(0, 1.5, len(frames))
                folder = tmp_path / "runs" / f"{env_id.replace('/', '_')}__{arm}__{seed}__1700000000"
                folder.mkdir(parents=True)
                config = {"script": script, "env_id": env_id, "seed": seed, "anneal_lr": True, **extra}
                config = {k: v for k, v in config.items() if v is not None}  # (None: a run from before the flag)
                (folder / "config.json").write_text(json.dumps(config))
                rows = [{"global_frames": 0, "eval/random_return": random}]
                rows += [{"global_frames": f, "eval/return": float(v)} for f, v in zip(frames, values)]
                (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
                finals[env_id, arm, seed] = dict(zip(frames, values))
    out = tmp_path / "compare"
    result = compare_run(
        str(tmp_path / "runs"), "--out", str(out), "--budgets", "20000", "--reps", "100", "--bootstrap-seed", "3"
    )
    assert result.returncode == 0, result.stderr
    assert_png(out / "performance_profile_minatar.png")
    (row,) = json.loads((out / "results.json").read_text())["aggregates"]
    envs = sorted(e.replace("/", "_") for e in games)
    assert row["family"] == "minatar" and row["games"] == envs
    scores = {}
    for arm in arms:
        scores[arm] = np.array(
            [
                [
                    (finals[env_id, arm, seed][20000] - np.mean(randoms[env_id]))
                    / (compare.MINATAR_DQN[games[env_id]] - np.mean(randoms[env_id]))
                    for env_id in sorted(games)
                ]
                for seed in (1, 2, 3)
            ]
        )
        assert np.allclose(row["normalised_scores"][arm], scores[arm]), arm
    aggregate = lambda x: np.array([metrics.aggregate_iqm(x), metrics.aggregate_median(x), metrics.aggregate_mean(x)])  # noqa: E731
    for arm in arms:
        np.random.seed(3)
        point, interval = rly.get_interval_estimates(
            {arm: scores[arm]}, aggregate, reps=100, random_state=np.random.RandomState(3)
        )
        for i, name in enumerate(("IQM", "median", "mean")):
            assert row["aggregates"][arm][name]["point"] == pytest.approx(point[arm][i])
            assert row["aggregates"][arm][name]["ci"] == pytest.approx(interval[arm][:, i].tolist())
    others = [BASELINE, "pqn_single", "pqn_live", "pqn_live_noclone", "pqn_lake_constant_lr", "pqn_single_constant_lr"]
    assert sorted(row["probability_of_improvement"]) == sorted(others)
    for other in others:
        pair = f"{MIXTURE},{other}"
        np.random.seed(3)
        p_point, p_interval = rly.get_interval_estimates(
            {pair: (scores[MIXTURE], scores[other])},
            metrics.probability_of_improvement,
            reps=100,
            random_state=np.random.RandomState(3),
        )
        assert row["probability_of_improvement"][other]["point"] == pytest.approx(p_point[pair])
        assert row["probability_of_improvement"][other]["ci"] == pytest.approx(p_interval[pair][:, 0].tolist())
        assert f"At 20,000 frames, P(mixture > {other}) = " in result.stdout
