"""studies/atari_study.py: its runs made for real at tiny sizes (the commands it builds are valid pqn_lake.py runs
and their records are what its tables read), and its tables read from records of both sides alike."""

import json
import sys
from pathlib import Path

from script_runs import run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))
import atari_study  # noqa: E402
import cleanrl_peer  # noqa: E402

# The mixture: 4 agents x 2 envs x 32 steps (1,024 frames an update), one update a phase, one phase; one PQN agent:
# 4 updates of 256 frames; 64 probe states for the collapse metrics (2,000 Atari forwards a network took ~10 s)
TINY = (
    "--num-envs 2 --num-steps 32 --num-minibatches 2 --pond-steps 32 --eval-episodes 1 --eval-max-frames 400 "
    "--eval-every-updates 4 --big-pond-size 512 --big-pond-slice-steps 16 --big-batch-size 32 --lake-segment-mb 8 "
    "--collapse-probe-states 64"
)


def test_the_mixture_part_runs_both_arms_records_them_and_tables_them(tmp_path):
    flags = ["--runs-dir", str(tmp_path / "runs"), "--record-dir", str(tmp_path / "records"), "--seeds", "1"]
    flags += [
        "--arms",
        "pqn",
        "mixture",
        "--frames",
        "1024",
        "--phase-updates",
        "1",
        "--threads",
        "1",
        "--parallel",
        "2",
        "--figure",
        str(tmp_path / "a.png"),
    ]
    out = run("studies/atari_study.py", "--part", "mixture", *flags, f"--extra={TINY}", timeout=600)
    records = sorted(p.name for p in (tmp_path / "records").iterdir())
    assert [r.rsplit("__", 1)[0] for r in records] == [
        "Breakout-v5__Breakout__mixture__1__1",
        "Breakout-v5__Breakout__pqn__1__1",
    ]
    config = json.loads((tmp_path / "records" / records[0] / "config.json").read_text())
    assert config["agent_updates_per_phase"] == 1 and config["num_agents"] == 4 and config["runs_dir"] == "<runs-dir>"
    assert json.loads((tmp_path / "records" / records[1] / "config.json").read_text())["big_agent_schedule"] == "none"
    rows = {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| Breakout-v5 | ")}
    assert set(rows) == {"pqn", "mixture"} and rows["mixture"].count("[") == 2  # its IQM and P(> pqn)
    assert (tmp_path / "a.png").stat().st_size > 0
    again = run("studies/atari_study.py", "--part", "mixture", *flags, f"--extra={TINY}")  # recorded: skipped
    assert "start" not in again and rows["mixture"] in again


def record(where: Path, name: str, frames: int, rows: list) -> None:
    run_dir = where / f"Breakout-v5__{name}__1__1700000000"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"total_frames": frames}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_parity_table_reads_both_sides_training_returns_alike(tmp_path):
    """Both sides' full-game training returns: the mean over the run's last 2% ("final") and last 10% of its frames,
    ours over theirs with a bootstrap interval across seeds; our greedy evaluation beside; a record of another
    budget left out."""
    args = atari_study.Args(record_dir=str(tmp_path), seeds=(1, 2), parity_frames=100_000)
    for seed, (ours, theirs) in enumerate([((10, 20, 30), (20, 40, 60)), ((10, 20, 50), (20, 40, 80))], start=1):
        steps = (1, 22_500, 24_900)  # frames 4, 90,000 and 99,600: updates 0, 21 and 24 of 4,096 frames
        peer = cleanrl_peer.rows_of(list(zip(steps, theirs)), [(s, 1) for s in steps])
        cleanrl_peer.write_record(
            cleanrl_peer.Args(record_dir=str(tmp_path), steps=25_000), "Breakout-v5", seed, peer, "c", []
        )
        key = "charts/episodic_return"
        rows = [{"global_frames": f, key: v, "eval/return": v / 10} for f, v in zip((4096, 90_112, 98_304), ours)]
        record(tmp_path, f"Breakout__pqn-cleanrl__{seed}__{seed}", 100_000, rows)
    record(tmp_path, "Breakout__pqn-cleanrl__3__3", 2000, [{"global_frames": 0, key: 1.0}])
    table = atari_study.parity_table(atari_study.Args(**{**vars(args), "seeds": (1, 2, 3)}))
    # theirs: final (frames >= 98,000: the update ending at 102,400) 60, 80; last 10% (>= 90,000) 50, 60
    assert "| Breakout-v5 | CleanRL's PQN, run here | 2 | 70.0 ± 127.1 | 55.0 ± 63.5 |" in table
    row = next(line for line in table.splitlines() if "pqn-cleanrl" in line)
    assert row.startswith("| Breakout-v5 | ours (pqn-cleanrl) | 2 | 40.0 ± 127.1 | 30.0 ± 63.5 | 0.57 [")
    assert " | 4.0 ± 12.7 | 3.0 ± 6.4 |  |" in row  # greedy: finals 3, 5; last 10% 2.5, 3.5


def test_the_mixture_table_reads_the_final_at_the_budget_and_the_agents_before_their_last_clone(tmp_path):
    """The final return is eval/return interpolated at --frames; the agents' column is their last evaluation before a
    clone (the clones are evaluated at once too, and score as the BigAgent they copy), one agent's its last."""
    args = atari_study.Args(record_dir=str(tmp_path), seeds=(1,), frames=1000)
    since, agents = "eval/frames_since_clone", "eval/agents_mean"
    record(
        tmp_path,
        "Breakout__mixture__1",
        1000,
        [
            {"global_frames": 800, since: 800, agents: 4.0},
            {"global_frames": 800, "eval/return": 6.0},
            {"global_frames": 800, since: 0, agents: 6.0},
            {"global_frames": 1200, since: 400, agents: 7.0},
            {"global_frames": 1200, "eval/return": 10.0},
            {"global_frames": 1200, since: 0, agents: 10.0},
        ],
    )
    record(tmp_path, "Breakout__pqn__1", 1000, [{"global_frames": 1000, since: 1000, agents: 9.0, "eval/return": 9.0}])
    table = atari_study.mixture_table(args)
    assert "| Breakout-v5 | mixture | 1 | 8.0 | 7.0 | " in table  # 6 + (10 - 6) / 2; 7, not the clones' 10
    assert "| Breakout-v5 | pqn | 1 | 9.0 | 9.0 | " in table


def test_a_rerun_resumes_a_checkpointed_run_restarts_an_unsaved_one_and_skips_a_recorded_one(tmp_path):
    import torch

    args = atari_study.Args(runs_dir=str(tmp_path), record_dir=str(tmp_path / "records"), seeds=(1, 2, 3))
    record(
        tmp_path / "records", "Breakout__pqn-cleanrl__1__1", 5_000_000, [{"global_frames": 5_000_000, "eval/return": 1}]
    )
    resumed = tmp_path / "Breakout-v5__Breakout__pqn-cleanrl__2__2__1"
    (resumed / "checkpoints").mkdir(parents=True)
    torch.save({"global_frames": 4096}, resumed / "checkpoints" / "phase_0001.pt")
    unsaved = tmp_path / "Breakout-v5__Breakout__pqn-cleanrl__3__3__1"
    unsaved.mkdir()
    queue = dict(atari_study.to_run(args))
    assert list(queue) == ["Breakout__pqn-cleanrl__2", "Breakout__pqn-cleanrl__3"] and not unsaved.exists()
    assert queue["Breakout__pqn-cleanrl__2"] == ["pqn_lake.py", "--resume", str(resumed), "--total-frames", "5000000"]
    assert queue["Breakout__pqn-cleanrl__3"][-8:] == [
        "--num-steps",
        "128",
        "--update-epochs",
        "4",
        "--num-minibatches",
        "4",
        "--agent-epsilon-end",
        "0.01",
    ]
    mixture = dict(atari_study.to_run(atari_study.Args(**{**vars(args), "part": "mixture"})))
    assert mixture["Breakout__mixture__1"][-2:] == ["--agent-updates-per-phase", "25"]
    assert "10000000" in mixture["Breakout__pqn__1"] and "--agent-updates-per-phase" not in mixture["Breakout__pqn__1"]
    rr16 = mixture["Breakout__mixture-4x32-rr16__1"]  # a phase is the mixture's frames: 32 envs x 100 = 128 x 25
    assert rr16.count("--agent-updates-per-phase") == 1 and rr16[rr16.index("--agent-updates-per-phase") + 1] == "100"
    assert rr16[rr16.index("--num-envs") + 1] == "32" and rr16[rr16.index("--big-replay-ratio") + 1] == "16"


def test_a_gpu_runs_curve_is_read_against_the_cpu_seeds_at_the_same_frames(tmp_path):
    """--gpu-runs: each GPU evaluation beside the CPU seeds' returns interpolated at its frames, and the figure."""
    for seed, values in ((1, (2.0, 6.0)), (2, (4.0, 10.0))):
        rows = [{"global_frames": 0, "eval/random_return": 1.0}]
        rows += [{"global_frames": f, "eval/return": v} for f, v in zip((1000, 3000), values)]
        run_dir = tmp_path / "records" / f"Breakout-v5__Breakout__pqn__{seed}__{seed}__1700000000"
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text(json.dumps({"total_frames": 4000}))
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gpu = tmp_path / "gpu" / "Breakout-v5__Breakout__pqn__1__1__1800000000"
    gpu.mkdir(parents=True)
    rows = [{"global_frames": 0, "eval/random_return": 2.0}, {"global_frames": 2000, "eval/return": 5.0}]
    (gpu / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = atari_study.Args(record_dir=str(tmp_path / "records"), frames=4000, seeds=(1, 2), gpu_runs=str(gpu.parent))
    table = atari_study.gpu_table(args)
    assert "| pqn | 2,000 | 5.0 | 2 | 4.0-7.0 |" in table  # seed 1 at 2,000 frames: 4.0; seed 2: 7.0
    assert "| pqn: random play | | 2.0 | | 1.0 |" in table
    atari_study.plot_gpu(args, tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").stat().st_size > 0
