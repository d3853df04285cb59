"""Changes that must not change results, proven against the code before them: the same seed and flags give the same
metrics as the scripts at commit f3004fc (read from the repository's history), for a MinAtar mixture, a single-PQN
run and a live-transfer run (pqn_lake.py --big-agent-schedule live then, pqn_lake_live.py now). Since f3004fc the
cleanup moved live transfer into its own script, and the agents act and learn in threads of their own, concurrently,
where f3004fc stepped them one after another in one thread: these runs are the threaded loop against the serial one."""

import subprocess

import pytest

from script_runs import ENV, ROOT, metrics, only_run_dir, run_together

BEFORE = "f3004fc"  # the last commit before the cleanup that moved live transfer into pqn_lake_live.py
TINY = ["--env-id", "MinAtar/Breakout-v1", "--num-envs", "8", "--num-steps", "16", "--num-minibatches", "4",
        "--pond-steps", "32", "--agent-updates-per-phase", "4", "--eval-episodes", "2", "--eval-every-updates", "2",
        "--big-pond-size", "2000", "--big-pond-slice-steps", "16", "--big-batch-size", "32"]
# Metrics of mechanisms removed since, constant in these runs then: the distillation loss (0 without distillation)
REMOVED = ("big_agent/losses/distill",)


def comparable(rows: list) -> list:
    """Every logged value but wall-clock ones (charts/SPS, time/*) and the removed constants."""
    return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/") and k not in REMOVED}
            for r in rows]


def script_before(tmp_path, name: str):
    """The script as it was at BEFORE, written next to the test's runs (it imports lake.py from the repository)."""
    path = tmp_path / f"{name}_{BEFORE}.py"
    shown = subprocess.run(["git", "show", f"{BEFORE}:{name}.py"], cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, f"commit {BEFORE} is needed from the repository's history: {shown.stderr}"
    path.write_text(shown.stdout)
    return path


@pytest.mark.parametrize("arm", ["mixture", "single-pqn", "live"])
def test_a_run_logs_the_same_metrics_as_before_the_cleanup(tmp_path, arm):
    frames = 2 * 8 * 16 * 4 * 3  # 3 phases of 2 agents (the mixture: 2 clones inside the run, one at its end)
    flags = [*TINY, "--num-agents", "2", "--total-frames", str(frames)]
    now_script, before_flags = "pqn_lake.py", []
    if arm == "single-pqn":
        flags = [*TINY, "--num-agents", "1", "--total-frames", str(frames // 2), "--big-agent-schedule", "none"]
    elif arm == "live":
        now_script, before_flags = "pqn_lake_live.py", ["--big-agent-schedule", "live"]
    # (--no-anneal-lr: the constant rate, the only one at BEFORE; annealing became the default since)
    run_together((now_script, *flags, "--no-anneal-lr", "--runs-dir", str(tmp_path / "now")),
                 (str(script_before(tmp_path, "pqn_lake")), *flags, *before_flags, "--runs-dir", str(tmp_path / "before")),
                 env={**ENV, "PYTHONPATH": str(ROOT)})
    now, before = (metrics(only_run_dir(tmp_path / name)) for name in ("now", "before"))
    removed = {k: v for r in before for k, v in r.items() if k in REMOVED}
    assert set(removed.values()) <= {0.0}, removed  # what went was constant here
    assert len(now) > 10 and comparable(now) == comparable(before)
    if arm == "mixture":
        assert sum("distill/big_minus_agents" in r for r in now) == 3  # a clone after each phase
    if arm == "live":
        assert any("big_agent/eval/return" in r for r in now) and any("big_agent/charts/updates" in r for r in now)
