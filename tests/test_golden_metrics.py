"""Golden metrics: changes that must not change results keep these. Tiny runs at fixed seeds on the CPU (a MinAtar
mixture with clones inside the run, a single PQN agent, a mixture merged by averaging weights, the live script, the
baseline) log exactly the metrics stored in tests/golden_metrics.json, bit for bit (wall-clock ones aside).

The runs pin what changes a CPU's float sums: one thread, and each math library's kernels at the AVX2 level
(ATen's, MKL's conditional numerical reproducibility, oneDNN's), so that any x86-64 CPU with AVX2 sums alike.

A change that alters results on purpose rewrites the file in a commit of its own that says why:
    python tests/test_golden_metrics.py --write
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden_metrics.json"
PINNED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"}
PINNED |= {"DNNL_MAX_CPU_ISA": "AVX2", "WANDB_MODE": "offline", "CUDA_VISIBLE_DEVICES": ""}

# 2 agents of 8 envs x 16 steps, 4 minibatches, 4 updates a phase, 3 phases: two clones inside the run, one at its end
TINY = "--env-id MinAtar/Breakout-v1 --num-envs 8 --num-steps 16 --num-minibatches 4 --pond-steps 32".split()
TINY += "--agent-updates-per-phase 4 --eval-episodes 2 --eval-every-updates 2 --big-pond-size 2000".split()
TINY += "--big-pond-slice-steps 16 --big-batch-size 32 --seed 3".split()
MIXTURE = [*TINY, "--num-agents", "2", "--total-frames", str(2 * 8 * 16 * 4 * 3)]
RUNS = {
    "mixture": ["pqn_lake.py", *MIXTURE],
    "single-pqn": ["pqn_lake.py", *TINY, "--num-agents", "1", "--big-agent-schedule", "none", "--total-frames", "2048"],
    "mixture-softmax-average": ["pqn_lake.py", *MIXTURE, "--merge", "softmax-average"],
    "live": ["pqn_lake_live.py", *MIXTURE],
    "baseline": [
        "dqn_single_baseline.py",
        *"--env-id MinAtar/Breakout-v1 --seed 3 --total-frames 3000 --learning-starts 1000".split(),
        *"--eval-every-frames 1000 --eval-max-frames 200 --eval-episodes 2 --buffer-size 2000".split(),
    ],
}


def comparable(rows: list) -> list:
    """Every logged value but the wall-clock ones."""
    return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]


def run_metrics(name: str) -> list:
    """The run's metrics.jsonl rows, the script run by this interpreter as `python script flags` in a new process
    (so that the pinned kernels apply from its start)."""
    with tempfile.TemporaryDirectory() as runs:
        script, *flags = RUNS[name]
        done = subprocess.run(
            [sys.executable, script, *flags, "--runs-dir", runs],
            cwd=ROOT,
            env={**os.environ, **PINNED},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (run_dir,) = Path(runs).iterdir()
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name", RUNS)
def test_a_tiny_run_logs_its_golden_metrics_bit_for_bit(name):
    golden = json.loads(GOLDEN.read_text())[name]
    assert golden["command"] == RUNS[name], "the run's command changed: its golden metrics must be written again"
    rows = comparable(run_metrics(name))
    assert len(rows) > 5 and any("eval/return" in r for r in rows)
    for i, (row, expected) in enumerate(zip(rows, golden["metrics"])):
        assert row == expected, f"row {i} differs: " + str(
            {k: (row.get(k), expected.get(k)) for k in {*row, *expected} if row.get(k) != expected.get(k)}
        )
    assert len(rows) == len(golden["metrics"])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    GOLDEN.write_text(
        json.dumps({name: {"command": RUNS[name], "metrics": comparable(run_metrics(name))} for name in RUNS}, indent=1)
        + "\n"
    )
    print(f"wrote {GOLDEN}")
