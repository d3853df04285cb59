"""The GPU node's benchmarks at tiny sizes on the CPU, in a file of their own so that xdist's loadfile can put their
minute of runs on another worker than test_benchmarks.py's: gpu_bench exits 0 and prints its table with the env
ceiling it measures beside; gpu_check.sh's learning run stops both runs at equal frames."""

import sys
from pathlib import Path

from script_runs import run

TINY_GPU_BENCH = "--env-id MinAtar/Breakout-v1 --num-agents 2 --num-envs 4 --updates 1 --big-updates 2"
TINY_GPU_BENCH += " --baseline-frames 0 --rounds 1 --phase-updates 1"


def test_gpu_bench_runs_and_prints_its_table_with_its_ceiling():
    out = run("benchmarks/gpu_bench.py", *TINY_GPU_BENCH.split(), timeout=600)
    assert "env ceiling, steps/s" in out and "frames at such phases" in out, out[-3000:]
    assert out.count("\n") >= 4, out[-3000:]


def test_the_gpu_checks_learning_run_stops_both_runs_at_equal_frames_and_keeps_their_curves(tmp_path):
    """gpu_check.sh's learning run (part d) at MinAtar's tiny sizes on the CPU: the mixture stops after 3 whole phases
    and one PQN agent after the same frames, their metrics copied out, a summary line each."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)  # the script's `python`: this suite's
    tiny = "--env-id MinAtar/Breakout-v1 --num-envs 8 --num-steps 16 --num-minibatches 4 --pond-steps 32"
    tiny += (
        " --eval-episodes 2 --eval-every-updates 2 --big-pond-size 500 --big-pond-slice-steps 16 --big-batch-size 32"
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
    env.update(LEARN_PHASE_UPDATES="2", LEARN_EXTRA=tiny)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "learn", str(tmp_path / "out")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = (tmp_path / "out" / "summary.txt").read_text()
    lines = [line for line in summary.splitlines() if line.startswith("d (")]
    assert len(lines) == 2 and all("all finite: True" in line for line in lines), done.stdout + done.stderr
    frames = 3 * 2 * 4 * 8 * 16  # 3 phases of 2 updates of 4 agents' 8 envs x 16 steps; one agent as many frames
    assert all(f"to {frames:,} frames" in line for line in lines), summary
    runs = sorted(p.name for p in (tmp_path / "out" / "d_learning").iterdir())
    assert [r.split("__")[2] for r in runs] == ["mixture", "pqn"]
