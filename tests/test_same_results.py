"""Changes that must not change results, proven against the code before them: the same seed and flags give the same
metrics as the scripts at an earlier commit (read from the repository's history), for a MinAtar mixture, a single-PQN
run and a live-transfer run (at f3004fc the mixture only: 7fd13f3's tests held all three to f3004fc).

- f3004fc, before the first cleanup: live transfer was `pqn_lake.py --big-agent-schedule live` (now
  pqn_lake_live.py), and the agents stepped one after another in one thread, where they now act and learn in threads
  of their own: these runs are the threaded loop against the serial one (at the constant rate, the only one then).
- 7fd13f3, before the loop's `__main__` became the box again (one call per step, the resume point read from the
  checkpoint, the environments in envs.py, one gradient step for both learners, pqn_lake_live.py on pqn_lake.py's
  agents' part): at the defaults, the rate annealed."""

import os
import subprocess
from pathlib import Path

import pytest

from script_runs import ENV, ROOT, TINY_MINATAR, metrics, only_run_dir, run_any, run_together

TINY = TINY_MINATAR
# Metrics of mechanisms removed since f3004fc, constant in these runs then: the distillation loss (0 without it)
REMOVED = ("big_agent/losses/distill",)
# Metrics added since: the agents against each other on the phase's probe states
ADDED = ("diversity/",)


def comparable(rows: list) -> list:
    """Every logged value but wall-clock ones (charts/SPS, time/*), the removed constants and the added metrics."""
    return [
        {k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith(("time/", *ADDED)) and k not in REMOVED}
        for r in rows
    ]


def scripts_before(tmp_path, commit: str, names: tuple):
    """The scripts as they were at `commit`, written into a folder of their own (they import each other from there,
    lake.py from the repository): from the repository's history, or where there is none (a GPU node's copy of the
    working tree) from $PQN_LAKE_REFERENCE_DIR/<commit>/ (benchmarks/gpu_check.sh prepare writes them there)."""
    folder = tmp_path / f"code_{commit}"
    folder.mkdir()
    written = Path(os.environ.get("PQN_LAKE_REFERENCE_DIR", "/nonexistent")) / commit
    for name in names:
        if (written / name).is_file():
            (folder / name).write_text((written / name).read_text())
            continue
        shown = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=ROOT, capture_output=True, text=True)
        assert shown.returncode == 0, f"commit {commit} is needed from the repository's history: {shown.stderr}"
        (folder / name).write_text(shown.stdout)
    return folder


# f3004fc: the threaded loop against the serial one, on the arm with agents to thread (the single agent and live
# transfer are held to 7fd13f3, which its tests held to f3004fc on all three)
@pytest.mark.parametrize(
    ("arm", "before"), [("mixture", "f3004fc"), ("mixture", "7fd13f3"), ("single-pqn", "7fd13f3"), ("live", "7fd13f3")]
)
def test_a_run_logs_the_same_metrics_as_before_the_cleanups(tmp_path, arm, before):
    frames = 2 * 8 * 16 * 4 * 3  # 3 phases of 2 agents (the mixture: 2 clones inside the run, one at its end)
    flags = [*TINY, "--num-agents", "2", "--total-frames", str(frames)]
    if arm == "single-pqn":
        flags = [*TINY, "--num-agents", "1", "--total-frames", str(frames // 2), "--big-agent-schedule", "none"]
    now_script = "pqn_lake_live.py" if arm == "live" else "pqn_lake.py"
    if before == "f3004fc":  # one script then, the constant rate only (annealing became the default since)
        code = scripts_before(tmp_path, before, ("pqn_lake.py",))
        live = ["--big-agent-schedule", "live"] if arm == "live" else []
        before_command = (str(code / "pqn_lake.py"), *flags, *live)
        flags = [*flags, "--no-anneal-lr"]
    else:
        code = scripts_before(tmp_path, before, ("pqn_lake.py", "pqn_lake_live.py"))
        before_command = (str(code / now_script), *flags)
    run_together(
        (now_script, *flags, "--runs-dir", str(tmp_path / "now")),
        (*before_command, "--runs-dir", str(tmp_path / "before")),
        env={**ENV, "PYTHONPATH": str(ROOT)},
    )
    now, before_rows = (metrics(only_run_dir(tmp_path / name)) for name in ("now", "before"))
    removed = {k: v for r in before_rows for k, v in r.items() if k in REMOVED}
    assert set(removed.values()) <= {0.0}, removed  # what went was constant here
    assert len(now) > 10 and comparable(now) == comparable(before_rows)
    if arm == "mixture":
        assert sum("distill/big_minus_agents" in r for r in now) == 3  # a clone after each phase
    if arm == "live":
        assert any("big_agent/eval/return" in r for r in now) and any("big_agent/charts/updates" in r for r in now)


def test_a_run_checkpointed_by_an_older_script_is_refused_in_one_line_naming_what_its_checkpoint_lacks(tmp_path):
    """A mixture stopped by the script at 7fd13f3 (its checkpoints have no "resume" and no "levels", which 2e3d8ac
    added): today's script refuses it in one line, exit 2, naming the fields; nothing is written."""
    flags = [*TINY, "--num-agents", "2", "--total-frames", str(2 * 8 * 16 * 4 * 2), "--stop-after-phases", "1"]
    code = scripts_before(tmp_path, "7fd13f3", ("pqn_lake.py",))
    run_together(
        (str(code / "pqn_lake.py"), *flags, "--runs-dir", str(tmp_path / "old")), env={**ENV, "PYTHONPATH": str(ROOT)}
    )
    run_dir = only_run_dir(tmp_path / "old")
    before = (run_dir / "metrics.jsonl").read_text()
    proc = run_any("pqn_lake.py", "--resume", str(run_dir))
    assert proc.returncode == 2 and "has no 'resume', 'levels'" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (run_dir / "metrics.jsonl").read_text() == before
