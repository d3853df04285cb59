"""Every benchmark the README names runs at tiny sizes: it exits 0 and prints its table with the baseline it measures
beside (its figures at these sizes mean nothing; benchmarks/RESULTS.md has the real runs). The GPU node's benchmarks:
test_gpu_check.py."""

import pytest

from script_runs import run

BENCHMARKS = {
    "lake_bench": (
        [
            "--env-ids",
            "Breakout-v5",
            "--transitions",
            "2048",
            "--rss-sizes",
            "1024",
            "--baseline-sizes",
            "1024",
            "--rgb-transitions",
            "256",
            "--stores",
            "lake",
            "v1raw",
            "--num-envs",
            "8",
            "--rgb-num-envs",
            "2",
            "--num-steps",
            "16",
            "--feed-steps",
            "32",
            "--pool-envs",
            "4",
            "--rgb-pool-envs",
            "2",
            "--batch-size",
            "64",
            "--rgb-batch-size",
            "16",
            "--fill-mb",
            "8",
            "--cold-passes",
            "1",
            "--seconds",
            "0.1",
            "--read-threads",
            "2",
        ],
        ("| Lake ", "| Breakout-v5 v1 raw "),
    ),
    "frame_codec_bench": (
        ["--env-ids", "Breakout-v5", "--num-envs", "2", "--steps", "100", "--chunk-frames", "4", "16", "--passes", "1"],
        "ratio  comp GB/s",
    ),
    "loop_bench": (
        [
            "--env-id",
            "MinAtar/Breakout-v1",  # (half the seconds of Atari's start-up; Atari's loop: test_pqn_lake.py)
            "--num-agents",
            "2",
            "--num-envs",
            "4",
            "--num-steps",
            "8",
            "--num-minibatches",
            "2",
            "--pond-steps",
            "16",
            "--warmup-updates",
            "1",
            "--updates",
            "1",
            "--rounds",
            "1",
        ],
        "Ponds emptied (baseline)",
    ),
    "minatar_bench": (
        ["--updates", "1", "--rounds", "1", "--warmup", "1", "--threads", "1", "--num-envs", "16"],
        "4 agents, serial (baseline)",
    ),
}


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_benchmark_runs_and_prints_its_table_with_its_baseline(name):
    flags, rows = BENCHMARKS[name]
    out = run(f"benchmarks/{name}.py", *flags, timeout=600)
    assert all(row in out for row in ([rows] if isinstance(rows, str) else rows)), out[-3000:]
    assert out.count("\n") >= 4, out[-3000:]


def test_the_timed_runner_runs_the_script_as_itself_and_its_serial_baseline_learns_the_same(tmp_path):
    """benchmarks/timed_run.py runs pqn_lake.py as a program: a snapshot after every agent update, the totals only
    growing; --serial (the agents one after another) logs the very metrics of the threaded run, bit for bit (the speed
    module's rule: random numbers drawn before, in the serial order)."""
    import json

    from script_runs import metrics, only_run_dir

    flags = ["--env-id", "MinAtar/Breakout-v1", "--num-agents", "2", "--num-envs", "8", "--num-steps", "8"]
    flags += ["--num-minibatches", "2", "--pond-steps", "16", "--big-agent-schedule", "none"]
    flags += ["--agent-updates-per-phase", "5", "--stop-after-updates", "4", "--eval-every-updates", "2"]
    rows = {}
    for mode in ("threads", "serial"):
        out, runs = tmp_path / f"{mode}.json", tmp_path / mode
        run("benchmarks/timed_run.py", str(out), *(["--serial"] if mode == "serial" else []), "pqn_lake.py", *flags,
            "--runs-dir", str(runs))  # fmt: skip
        snapshots = json.loads(out.read_text())["updates"]
        assert len(snapshots) == 4
        for key in ("t", "agents", "env", "training", "lake", "cpu"):
            assert all(a[key] <= b[key] for a, b in zip(snapshots, snapshots[1:])), key
        assert snapshots[-1]["training"] > 0 and snapshots[-1]["lake"] > 0  # (a Pond of 16 steps drains every 2)
        rows[mode] = [{k: v for k, v in r.items() if k != "charts/SPS"} for r in metrics(only_run_dir(runs))]
    assert len(rows["threads"]) > 4 and rows["threads"] == rows["serial"]
