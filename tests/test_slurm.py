"""The slurm array scripts (slurm/*.sbatch), run as plain bash as slurm runs them (sbatch only reads their #SBATCH
lines): a task that gets USR1 passes it to its script, which checkpoints and exits 0, and the task asks slurm to requeue
it; the requeued task finds that run and resumes it to its end."""

import os
import signal
import subprocess
import sys

import pytest

from script_runs import ENV, ROOT, TINY_MINATAR, metrics, only_run_dir

BASELINE_MINATAR = [
    *"--num-envs 4 --total-frames 2000 --buffer-size 2000 --learning-starts 200 --batch-size 32".split(),
    *"--replay-ratio 8 --eval-every-frames 1000 --eval-episodes 2 --log-every-frames 200".split(),
]
# the array script: the script's flags (the env id comes from ENV_ID), the line at which USR1 is sent, the checkpoint
TASKS = {
    "pqn_lake_array": (
        # TINY_MINATAR without its --env-id, two agents, two phases
        [*TINY_MINATAR[2:], "--num-agents", "2", "--total-frames", str(2 * 8 * 16 * 4 * 2)],
        "phase 1 update 2/4",
        "phase_0001_update_*.pt",  # a mid-phase checkpoint
    ),
    "baseline_array": (BASELINE_MINATAR, "frames 400 ", "ckpt_*.pt"),  # a round cut by the signal, before 1,000
}


def task(sbatch: str, flags: list, env: dict) -> subprocess.Popen:
    command = ["bash", str(ROOT / "slurm" / f"{sbatch}.sbatch"), *flags]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("sbatch", TASKS)
def test_a_signalled_array_task_checkpoints_requeues_itself_and_its_requeued_task_resumes_the_run(sbatch, tmp_path):
    flags, signal_at, checkpoint = TASKS[sbatch]
    # the submit folder: the scripts as a cluster user's checkout has them; runs/ goes there; scontrol notes its call
    submit, bin_dir = tmp_path / "submit", tmp_path / "bin"
    submit.mkdir()
    bin_dir.mkdir()
    for module in ("pqn_lake.py", "dqn_single_baseline.py", "lake.py", "envs.py", "lifecycle.py"):
        (submit / module).symlink_to(ROOT / module)
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    (bin_dir / "scontrol").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)  # the scripts' `python`: this suite's, whatever PATH has first
    env = {
        **ENV,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_SUBMIT_DIR": str(submit),
        "SLURM_ARRAY_JOB_ID": "77",
        "SLURM_ARRAY_TASK_ID": "2",
        "ENV_ID": "MinAtar/Breakout-v1",
    }

    first, output = task(sbatch, flags, env), []
    for line in first.stdout:
        output.append(line)
        if line.startswith(signal_at):
            first.send_signal(signal.SIGUSR1)  # slurm's --signal=B:USR1: to the batch shell
            break
    output += first.stdout.readlines()
    assert first.wait(timeout=300) == 0, "".join(output)
    assert "checkpointed; requeueing" in "".join(output), "".join(output)
    assert (tmp_path / "scontrol.log").read_text() == "requeue 77_2\n"
    run_dir = only_run_dir(submit / "runs")
    assert run_dir.name.startswith("MinAtar_Breakout-v1__") and run_dir.name.split("__")[2] == "2"  # the task's seed
    assert list((run_dir / "checkpoints").glob(checkpoint)), sorted(os.listdir(run_dir / "checkpoints"))
    stopped_at = metrics(run_dir)[-1]["global_frames"]
    assert stopped_at < (2 * 8 * 16 * 4 if sbatch == "pqn_lake_array" else 1000), "".join(output)  # mid-phase/round

    second = task(sbatch, flags, env)  # the requeued task: no flag of the submission is read again
    again = second.communicate(timeout=300)[0]
    assert second.returncode == 0 and f"--resume runs/{run_dir.name}" in again, again
    assert only_run_dir(submit / "runs") == run_dir  # the same run, its metrics.jsonl extended to the end
    frames = [row["global_frames"] for row in metrics(run_dir)]
    assert frames == sorted(frames) and frames[-1] == int(flags[flags.index("--total-frames") + 1]) > stopped_at
    assert (tmp_path / "scontrol.log").read_text() == "requeue 77_2\n"  # an unsignalled task ends without a requeue
