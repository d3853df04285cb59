"""The studies: the harness's bookkeeping (runs span sessions and machines, so a rerun must skip, resume or restart
each run by what it left, and a finished run's record must outlive the machine that made it), and the drivers' tables
read from records."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))
import harness  # noqa: E402
import minatar_study  # noqa: E402


def study_args(tmp_path: Path, **kwargs) -> minatar_study.Args:
    """The study's Args with its runs and its records in tmp_path (not the repository's committed records)."""
    return minatar_study.Args(runs_dir=str(tmp_path), record_dir=str(tmp_path / "records"), **kwargs)


def make_run(runs_dir: Path, name: str, evaluations: list, checkpoint_frames: int = 0) -> Path:
    """A run folder as pqn_lake.py names it, its metrics.jsonl holding evaluations at those frames (and a train row
    past the last, as a run killed mid-phase leaves), a phase checkpoint at checkpoint_frames if > 0."""
    run_dir = runs_dir / f"MinAtar_Breakout-v1__{name}__1__1__1700000000"
    (run_dir / "checkpoints").mkdir(parents=True)
    rows = [{"global_frames": f, "eval/return": 1.0} for f in evaluations] + [{"global_frames": 10**9, "losses/td": 0}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    torch.save({"global_frames": 10**9}, run_dir / "checkpoints" / "best.pt")  # best.pt never counts as progress
    if checkpoint_frames:
        torch.save({"global_frames": checkpoint_frames}, run_dir / "checkpoints" / "phase_0001.pt")
    return run_dir


def test_a_rerun_skips_resumes_or_restarts_each_run_by_what_it_left(tmp_path):
    """harness.still_to_run: a finished run not yet recorded is recorded and skipped; one never checkpointed starts
    again (its folder goes); one with a checkpoint is resumed with the plan's frames; a new one starts."""
    records = tmp_path / "records"
    finished = make_run(tmp_path, "Breakout__live__1", [0, 500, 1024])  # finished: its evaluations say so
    (finished / "config.json").write_text(json.dumps({"total_frames": 1000}))
    restarted = make_run(tmp_path, "Breakout__live__2", [0, 500])  # never checkpointed, short of the budget
    resumed = make_run(tmp_path, "Breakout__live__3", [0, 500], checkpoint_frames=512)
    flags = ["--clone-every-updates", "0"]
    planned = [
        harness.minatar_run(str(tmp_path), "Breakout", s, "live", 1000, flags, "pqn_lake_live.py") for s in range(1, 5)
    ]

    queue = dict(harness.still_to_run(planned, str(tmp_path), str(records)))

    assert list(queue) == ["Breakout__live__2", "Breakout__live__3", "Breakout__live__4"]
    assert (records / finished.name / "metrics.jsonl.gz").exists()
    assert not restarted.exists()  # its folder goes, and the run starts from scratch with the plan's command
    assert queue["Breakout__live__2"][:2] == ["pqn_lake_live.py", "--env-id"] and "1000" in queue["Breakout__live__2"]
    assert queue["Breakout__live__3"] == ["pqn_lake_live.py", "--resume", str(resumed), "--total-frames", "1000"]
    assert queue["Breakout__live__4"][-2:] == ["--clone-every-updates", "0"]  # never started


def test_the_arms_table_compares_every_arm_and_seed_made_whatever_the_rerun_asked_for(tmp_path):
    # a rerun of one arm at two seeds (--arms live --arm-seeds 3 2) still tables the other arms and seed 1
    made = [
        make_run(tmp_path, name, [0, 1024])
        for name in ("Breakout__live__1", "Breakout__live__3", "Breakout__mixture__1", "Breakout__pqn_lake__2")
    ]
    args = study_args(tmp_path, part="arms", games=("Breakout",), arm_seeds=(3, 2))
    assert sorted(minatar_study.arm_folders(args)) == sorted(made)


def test_the_mixture_table_leaves_out_runs_still_going(tmp_path):
    # a run still going would enter with its last clone as its final return
    for seed, frames in ((1, 2048), (2, 1024)):
        run_dir = make_run(tmp_path, f"Breakout__eps-reset-0.1__{seed}", [0, frames])
        rows = [
            {"global_frames": frames, "eval/random_return": 0.5},
            {"global_frames": frames, "eval/return": 10.0 * seed, "distill/big_minus_agents": 0.0},
        ]
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    args = study_args(tmp_path, part="questions")
    table = minatar_study.mixture_table(args, {"ε reset 0.1": ("eps-reset-0.1", 10)}, ("Breakout",), (1, 2), 2048)
    assert "| ε reset 0.1 | 1 |" in table and "| 10.0 |" in table  # seed 1 alone: 2 is short of 2048 frames


def test_the_mixture_table_gives_the_bootstrap_interval_and_the_probability_of_improvement(tmp_path):
    # two variants on two games x two seeds; "better" scores 5 above "reference" in every run
    for variant, bonus in (("reference", 0.0), ("better", 5.0)):
        for game in ("Asterix", "Breakout"):
            for seed in (1, 2):
                run_dir = make_run(tmp_path, f"{game}__{variant}__{seed}", [0, 2048])
                rows = [
                    {"global_frames": 2048, "eval/random_return": 0.0, "eval/agents_mean": 1.0},
                    {
                        "global_frames": 2048,
                        "eval/return": 2.0 * seed + bonus,
                        "distill/big_minus_agents": 0.0,
                        "eval/agents_mean": 2.0 * seed + bonus,
                    },
                ]
                with open(run_dir / "metrics.jsonl", "a") as f:
                    f.write("".join(json.dumps(r) + "\n" for r in rows))
    args = study_args(tmp_path, part="questions")
    table = minatar_study.mixture_table(
        args, {"reference": ("reference", 10), "better": ("better", 10)}, ("Asterix", "Breakout"), (1, 2), 2048
    ).splitlines()
    # normalised by random play 0 and the paper's DQN (Asterix 17, Breakout 10): the mean of the games' means
    reference = (3 / 17 + 3 / 10) / 2
    cells = lambda row: [c.strip() for c in row.strip("|").split("|")]  # noqa: E731
    mean, low, high = map(float, cells(table[2])[9].replace("[", "").replace("]", "").replace(",", "").split())
    assert abs(mean - reference) < 0.005 and low < mean < high
    assert cells(table[2])[10] == "n/a"  # the first row is the reference
    assert cells(table[3])[10] == "1.00 [1.00, 1.00]"  # every run of "better" beats every run of "reference"
    minatar_study.plot_questions(args, {"reference": ("reference", 10), "better": ("better", 10)}, tmp_path / "q.png")
    assert (tmp_path / "q.png").stat().st_size > 10_000  # drawn: the evaluations' lines of both variants


def test_the_mixture_table_gives_the_training_return_after_a_clone_over_before_it(tmp_path):
    # 4 updates a phase: a quarter is one update; clones at 100 and 200 frames, the second the one measured
    run_dir = make_run(tmp_path, "Breakout__reference__1", [0, 2048])
    trained = [(90, 9.0), (100, 9.0), (110, 1.0), (190, 8.0), (200, 8.0), (210, 2.0), (220, 9.0)]
    rows = [{"global_frames": f, "charts/episodic_return": ret} for f, ret in trained]
    rows += [{"global_frames": f, "eval/return": 5.0, "distill/big_minus_agents": 0.0} for f in (100, 200)]
    rows += [{"global_frames": 2048, "eval/random_return": 0.0}]
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["global_frames"])))
    args = study_args(tmp_path, part="questions")
    table = minatar_study.mixture_table(args, {"reference": ("reference", 4)}, ("Breakout",), (1,), 2048)
    assert "| 0.25x | 5.0 |" in table  # 2 in the update after the second clone, 8 in the one up to it


def test_a_finished_run_is_recorded_and_its_record_outlives_the_runs_folder(tmp_path):
    runs, records = tmp_path / "runs", tmp_path / "records"
    finished = make_run(runs, "Breakout__live__1", [0, 500, 1024])
    (finished / "config.json").write_text(
        json.dumps({"env_id": "MinAtar/Breakout-v1", "runs_dir": str(runs), "resume": str(finished), "lake_path": None})
    )
    harness.keep_record(str(runs), str(records), finished)

    record = records / finished.name
    assert sorted(p.name for p in records.iterdir()) == [finished.name]
    assert sorted(p.name for p in record.iterdir()) == ["config.json", "metrics.jsonl.gz"]  # no Lake, no checkpoint
    assert gzip.decompress((record / "metrics.jsonl.gz").read_bytes()) == (finished / "metrics.jsonl").read_bytes()
    config = json.loads((record / "config.json").read_text())
    assert {k: v for k, v in config.items() if k != "commit"} == {  # no path of this machine; the commit that ran it
        "env_id": "MinAtar/Breakout-v1",
        "runs_dir": "<runs-dir>",
        "resume": f"<runs-dir>/{finished.name}",
        "lake_path": None,
    }

    shutil.rmtree(runs)  # a new machine: the runs folder is gone, the committed records are not
    runs.mkdir()
    planned = [harness.minatar_run(str(runs), "Breakout", s, "live", 1000, [], "pqn_lake_live.py") for s in (1, 2)]
    assert list(dict(harness.still_to_run(planned, str(runs), str(records)))) == ["Breakout__live__2"]
    args = minatar_study.Args(
        runs_dir=str(runs), record_dir=str(records), part="arms", games=("Breakout",), arm_seeds=(1,)
    )
    assert minatar_study.arm_folders(args) == [record]  # the tables read the record
    assert minatar_study.read_run(args, "Breakout__live__1")[0] == record


def test_a_run_is_recorded_only_once_it_reached_its_frames(tmp_path, monkeypatch):
    """harness.run_queue: a run stopped by SIGTERM exits 0 with a checkpoint; its record must wait for its last
    frames, or the next call would take the partial run for a finished one and skip it."""
    run_dir = tmp_path / "MinAtar_Breakout-v1__Breakout__pqn-horizon__1__1__1"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"total_frames": 1000, "runs_dir": str(tmp_path)}))
    done = type("Done", (), {"returncode": 0})()
    monkeypatch.setattr(harness, "launch", lambda runs_dir, name, command, env: (name, done))
    monkeypatch.setattr(harness, "ended", lambda running: [running.pop()] if running else [])
    for last_eval, recorded in ((500, False), (1000, True)):
        (run_dir / "metrics.jsonl").write_text(json.dumps({"global_frames": last_eval, "eval/return": 1.0}) + "\n")
        harness.run_queue([("Breakout__pqn-horizon__1", ["pqn_lake.py"])], str(tmp_path), str(tmp_path / "records"), 1)
        assert (tmp_path / "records" / run_dir.name).is_dir() == recorded


def test_the_parity_table_reads_nothing_that_has_not_finished(tmp_path):
    args = study_args(tmp_path, part="parity", games=("Breakout", "Freeway"), parity_seeds=(1, 2))
    make_run(tmp_path, "Breakout__pqn-reference__1", [0, 5_001_216])
    make_run(tmp_path, "Freeway__pqn-reference__1", [0, 2_000_000])
    assert "| Breakout |" in minatar_study.parity_table(args) and "| Freeway |" not in minatar_study.parity_table(args)


def test_the_limits_study_tables_its_records_and_runs_nothing(tmp_path):
    """studies/limits_study.py reads its records (per game the mean of the seeds' final returns); asked to run, an
    answered study names the commit that ran its arms and makes nothing."""
    import limits_study

    args = limits_study.Args(record_dir=str(tmp_path / "records"), games=("Breakout",), seeds=(1,), frames=1000)
    for name, value in (("lake-writer", 1.0), ("passive-lake-writer-x1", 0.25)):
        run_dir = tmp_path / "records" / f"MinAtar_Breakout-v1__Breakout__{name}__1__1__1700000000"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"global_frames": 1000, "eval/return": value}) + "\n")
    table = limits_study.question_table(args, "passive")
    assert "| lake-writer | 1.0 (1) |" in table and "| passive-lake-writer-x1 | 0.2 (1) |" in table
    for driver in ("limits_study.py", "wins_study.py", "minatar_study.py"):
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve().parent.parent / "studies" / driver)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 1 and f"git worktree add ../closed {limits_study.RAN_AT}" in done.stderr, driver


def test_the_horizon_part_says_where_a_curve_has_flattened(tmp_path):
    """limits_study.flattening_table: a curve still climbing in its last fifth is not flat, one whose last fifth gains
    under 5% of its end level is; a mixture's sparse evaluations (at its clones) are interpolated."""
    import limits_study

    args = limits_study.Args(
        record_dir=str(tmp_path / "records"), games=("Asterix", "Breakout"), seeds=(1,), horizon_frames=1000
    )
    frames = range(50, 1001, 50)
    curves = {
        "Asterix__pqn-horizon__1": (frames, [f / 10 for f in frames]),  # linear: the last fifth gains 20%
        "Breakout__pqn-horizon__1": (frames, [min(f, 700) / 10 for f in frames]),  # flat from 70%
        "Asterix__mixture-horizon__1": ((0, 500, 1000), (0.0, 40.0, 50.0)),
    }
    for name, (xs, ys) in curves.items():
        run_dir = tmp_path / "records" / f"MinAtar_{name.split('__')[0]}-v1__{name}__1__1700000000"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps({"global_frames": x, "eval/return": y}) + "\n" for x, y in zip(xs, ys))
        )
    rows = {
        tuple(c.strip() for c in line.split("|")[1:3]): line
        for line in limits_study.flattening_table(args).splitlines()[2:]
    }
    # Asterix: the tenth before 800 holds 750 and 800 (77.5), before 1000: 950, 1000 (97.5); gain 20/97.5
    assert rows["pqn-horizon", "Asterix"] == "| pqn-horizon | Asterix | 1 | 77.5 | 97.5 | +20.5% | no |"
    assert rows["pqn-horizon", "Breakout"].endswith("| 70.0 | 70.0 | +0.0% | yes |")
    # the mixture: no evaluation in (700, 800]: interpolated at 800 (46.0); its end 50.0: +8.0%
    assert rows["mixture-horizon", "Asterix"] == "| mixture-horizon | Asterix | 1 | 46.0 | 50.0 | +8.0% | no |"
    assert ("mixture-horizon", "Breakout") not in rows  # no record


def test_the_limits_study_says_what_an_arms_frames_are_worth_in_the_reference_arms(tmp_path):
    """limits_study.equivalent_frames_table: the first frames at which the reference's level (its curve averaged over
    the trailing tenth of the budget) reaches the arm's final return, as a share of the budget; never: > 1x."""
    import limits_study

    args = limits_study.Args(
        record_dir=str(tmp_path / "records"), games=("Asterix", "Breakout"), seeds=(1,), horizon_frames=1000
    )
    frames = range(0, 1001, 50)
    curves = {
        "Asterix__pqn-horizon__1": (frames, [f / 10 for f in frames]),  # linear, 0 -> 100
        "Breakout__pqn-horizon__1": (frames, [f / 10 for f in frames]),
        "Asterix__mixture-horizon__1": ((0, 1000), (0.0, 50.0)),  # ends at 50
        "Breakout__mixture-horizon__1": ((0, 1000), (0.0, 99.0)),
    }  # above the reference's level at its end
    for name, (xs, ys) in curves.items():
        run_dir = tmp_path / "records" / f"MinAtar_{name.split('__')[0]}-v1__{name}__1__1700000000"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps({"global_frames": x, "eval/return": y}) + "\n" for x, y in zip(xs, ys))
        )
    # the level at x: the mean of x / 10 over (x - 100, x], (x - 50) / 10; it reaches 50 at 550, 99 never (95 at 1000)
    assert (
        limits_study.equivalent_frames_table(args, "horizon").splitlines()[2]
        == "| mixture-horizon | 0.00M (0.55x) | > 1x |"
    )
    # a passive BigAgent is worth its own writer's frames: on the mixture's Lake, the mixture's (not the lake-writer's)
    curves = {
        "Asterix__lake-writer__1": (frames, [f / 5 for f in frames]),  # 0 -> 200: its level reaches 50 at 300
        "Asterix__mixture-writer__1": (frames, [f / 10 for f in frames]),  # 0 -> 100: at 550
        "Asterix__passive-mixture-writer-x1__1": ((0, 1000), (0.0, 30.0)),
    }  # at 350, in lake-writer's at 200
    for name, (xs, ys) in curves.items():
        run_dir = tmp_path / "records" / f"MinAtar_Asterix-v1__{name}__1__1700000000"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps({"global_frames": x, "eval/return": y}) + "\n" for x, y in zip(xs, ys))
        )
    rows = limits_study.equivalent_frames_table(limits_study.Args(**{**vars(args), "frames": 1000}), "passive")
    assert "| mixture-writer | 0.00M (0.55x) |  |" in rows.splitlines()  # 100: lake-writer's level at 550
    assert "| passive-mixture-writer-x1 | 0.00M (0.35x) |  |" in rows.splitlines()
    assert limits_study.reference("passive", "passive-lake-writer-x4") == "lake-writer"
    assert limits_study.reference("acting", "acting-noclone") == "pqn-anneal"
    assert limits_study.reference("passive", "mixture-rr8") == "mixture-writer"


def test_the_limits_study_shows_the_agents_diversity_phase_by_phase(tmp_path):
    """limits_study.diversity_table: per arm and game the agents' disagreement at the first, middle and last phase's
    end, mean over seeds over the phases all reached; a resumed phase's repeated line counts once (its last)."""
    import limits_study

    args = limits_study.Args(record_dir=str(tmp_path / "records"), games=("Asterix", "Breakout"), seeds=(1, 2))
    runs = {
        "Asterix__acting__1": [(100, 0.8), (200, 0.6), (200, 0.5), (300, 0.4)],
        "Asterix__acting__2": [(100, 0.6), (200, 0.4), (300, 0.2), (400, 0.1)],
        "Breakout__acting-noclone__1": [(100, 0.7), (200, 0.7)],
    }
    for name, points in runs.items():
        run_dir = tmp_path / "records" / f"MinAtar_{name.split('__')[0]}-v1__{name}__1__1700000000"
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"global_frames": f, "eval/return": 1.0})
                + "\n"
                + json.dumps({"global_frames": f, "diversity/disagreement": d})
                + "\n"
                for f, d in points
            )
        )
    rows = limits_study.diversity_table(args).splitlines()[2:]
    # Asterix: seed 1's phases 0.8, 0.5, 0.4 (the resumed phase's last line), seed 2's first three 0.6, 0.4, 0.2
    assert rows == [
        "| acting | Asterix | 2 | 3 | 0.70 | 0.45 | 0.30 |",
        "| acting-noclone | Breakout | 1 | 2 | 0.70 | 0.70 | 0.70 |",
    ]


def test_the_parity_yardstick_reads_both_sides_records_alike(tmp_path):
    """The parity part's yardstick: per arm the final return and the mean of the last 10% of the run's evaluations,
    both sides from their records (ours: pqn-<arm> runs; PQN's own code: studies/pqn_peer.py's records, which end
    at the last whole update, under 5M); the ratio to PQN's own code with its bootstrap interval, as shipped and, where
    it ran so, with its decays over 5M."""
    args = study_args(tmp_path, part="parity", games=("Breakout",), parity_seeds=(1, 2), pqn_frames=1000)
    for seed, (ours, theirs) in enumerate([((10, 20, 30), (20, 40, 60)), ((10, 20, 50), (20, 40, 80))], start=1):
        for name, values, frames in (
            (f"Breakout__pqn-reference-anneal__{seed}", ours, (0, 900, 1000)),
            (f"Breakout__purejaxql__{seed}", theirs, (0, 500, 997)),
            (f"Breakout__purejaxql-decay5m__{seed}", (0, 10, 40), (0, 500, 998)),
        ):
            run_dir = tmp_path / "records" / f"MinAtar_Breakout-v1__{name}__{seed}__1700000000"
            run_dir.mkdir(parents=True)
            (run_dir / "metrics.jsonl").write_text(
                "".join(json.dumps({"global_frames": f, "eval/return": v}) + "\n" for f, v in zip(frames, values))
            )
    table = minatar_study.parity_yardstick(args)
    # ours: finals 30, 50; last 10% (frames >= 900): (20 + 30) / 2, (20 + 50) / 2; theirs: finals 60, 80, last 10% alike
    assert "| Breakout | purejaxql | 2 | 70.0 ± 127.1 | 70.0 ± 127.1 |  |  |  |" in table
    assert (
        "| Breakout | purejaxql-decay5m | 2 | 40.0 ± 0.0 | 40.0 ± 0.0 | 0.57 [0.50, 0.67] | 0.57 [0.50, 0.67] |  |"
        in table
    )
    row = next(line for line in table.splitlines() if "reference-anneal" in line)
    assert row.startswith("| Breakout | reference-anneal | 2 | 40.0 ± 127.1 | 30.0 ± 63.5 | 0.57 [")
    assert row.endswith(" | 1.00 [0.75, 1.25] |")  # 40 over PQN's own with its decays over 5M: 40 (finals 40, 40)


def test_the_wins_study_counts_a_runs_cpu_minutes_and_projects_its_gpu_hours(tmp_path):
    """The README's "What wins" columns: a run's minutes are its phases' seconds, or (a run without phases) per process
    the frames since its start over its last charts/SPS, a resume starting a new clock; the GPU-hours are 25M Atari env
    steps at the measured agents' rate plus --big-replay-ratio x 25M / --big-batch-size BigAgent updates at theirs."""
    import wins_study

    phased, rated = tmp_path / "phased", tmp_path / "rated"
    rows = [
        {"global_frames": 8192, "time/agents_seconds": 60.0, "time/big_agent_seconds": 30.0, "time/eval_seconds": 6.0}
    ]
    rows.append({"global_frames": 16384, "time/agents_seconds": 54.0, "time/big_pond_fill_seconds": 30.0})
    first = [{"global_frames": f, "charts/SPS": 1000} for f in range(4096, 40961, 4096)]  # 40,960 frames / 1,000
    resumed = [{"global_frames": f, "charts/SPS": 2000} for f in range(45056, 81921, 4096)]  # 40,960 frames / 2,000
    for run_dir, metrics in ((phased, rows), (rated, first + resumed)):
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in metrics))
    assert harness.cpu_minutes(phased) == 180.0 / 60
    assert harness.cpu_minutes(rated) == (40960 / 1000 + 40960 / 2000) / 60

    for agents, schedule, ratio, batch in ((1, "none", 2.0, 256), (4, "phases", 2.0, 256), (4, "phases", 8.0, 128)):
        (phased / "config.json").write_text(
            json.dumps(
                {
                    "num_agents": agents,
                    "big_agent_schedule": schedule,
                    "big_replay_ratio": ratio,
                    "big_batch_size": batch,
                }
            )
        )
        updates = 0 if schedule == "none" else ratio * 25_000_000 / batch
        rate = harness.GPU_AGENT_STEPS_PER_S if agents == 1 else harness.GPU_MIXTURE_STEPS_PER_S
        want = (25_000_000 / rate + updates * harness.GPU_BIG_AGENT_UPDATE_S) / 3600
        assert abs(wins_study.gpu_hours(phased) - want) < 1e-12


def test_the_wins_study_last_step_table_reads_each_runs_last_two_evaluation_steps(tmp_path):
    """last_step_table: per arm the change over a run's last evaluation step and the step before it, normalised by
    the MinAtar paper's DQN minus random play (Breakout: 10 - 0), and the runs it rose in; an arm without records has no
    row."""
    import wins_study

    for seed, values in ((1, (1.0, 3.0, 5.0)), (2, (1.0, 2.0, 1.0))):
        run_dir = tmp_path / f"MinAtar_Breakout-v1__Breakout__mixture-rr16__{seed}__{seed}__1700000000"
        run_dir.mkdir()
        rows = [{"global_frames": f, "eval/return": v} for f, v in zip((100, 900, 1000), values)]
        rows[0]["eval/random_return"] = 0.0
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = wins_study.Args(record_dir=str(tmp_path), games=("Breakout",), seeds=(1, 2))
    rows = wins_study.last_step_table(args).splitlines()
    assert len(rows) == 3  # the header, its rule, the one arm with records
    cells = [cell.strip() for cell in rows[2].strip("|").split("|")]
    # last steps +0.2 and -0.1 (mean +0.05), the steps before +0.2 and +0.1 (mean +0.15); one rose, then both
    assert cells[:3] == ["mixture-rr16", "2", "100-100"]
    assert cells[3].startswith("+0.050 ± ") and cells[4] == "1/2"
    assert cells[5].startswith("+0.150 ± ") and cells[6] == "2/2"


def test_every_arm_of_the_open_loss_study_is_a_command_pqn_lake_accepts():
    """Each LOSS_ARMS arm's command parses into pqn_lake's Args and passes its flag checks, with the arm's flags set
    (a renamed or removed flag would otherwise surface only when a study run starts)."""
    import loss_study
    import pqn_lake
    import tyro

    for arm, flags in loss_study.LOSS_ARMS.items():
        name, frames, command = harness.minatar_run("runs", "Breakout", 1, arm, 5_000_000, flags)
        parsed = tyro.cli(pqn_lake.Args, args=command[1:])
        pqn_lake.check_args(parsed)
        assert (parsed.exp_name, parsed.total_frames, parsed.env_id) == (name, frames, "MinAtar/Breakout-v1")
    merge = harness.minatar_run("runs", "Breakout", 1, "x", 1, loss_study.LOSS_ARMS["mixture-softmax-average"])[2]
    assert tyro.cli(pqn_lake.Args, args=merge[1:]).merge == "softmax-average"
