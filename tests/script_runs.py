"""What the script tests share: run a script as a user runs it (a subprocess in the repo root), read its
run folder, and decode the MP4 videos that --capture-video writes."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import av
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
# One intra-op thread: the runs are tiny, and OpenMP's spinning threads collapse when the two cores are
# shared with the env threads and the Lake's writer. A run with --track logs to an offline wandb run (in its folder).
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
# A mixture of seconds on MinAtar Breakout (one agent unless a test adds --num-agents): 8 envs x 16 steps, 4 updates
# a phase, a BigPond of 2,000 transitions in slices of 16, batches of 32
TINY_MINATAR = (
    "--env-id MinAtar/Breakout-v1 --num-envs 8 --num-steps 16 --num-minibatches 4 --pond-steps 32 "
    "--agent-updates-per-phase 4 --eval-episodes 2 --eval-every-updates 2 --big-pond-size 2000 "
    "--big-pond-slice-steps 16 --big-batch-size 32"
).split()


def run(script: str, *flags: str, timeout: int = 300) -> str:
    """`python script flags...`; asserts it exits 0 (showing the end of its output if not); returns stdout."""
    proc = subprocess.run(
        [sys.executable, script, *flags], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def run_together(*commands: tuple, env: dict = ENV, timeout: int = 300) -> list:
    """run() for independent runs, side by side (one thread each: CI's two cores both work): each command is
    (script, *flags); asserts each exits 0; returns their stdouts in order."""
    procs = []
    for script, *flags in commands:
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # files: a full pipe would block a run
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, script, *flags], cwd=ROOT, env=env, stdout=out, stderr=err, text=True
                ),
                out,
                err,
            )
        )
    outputs = []
    for proc, out, err in procs:
        code = proc.wait(timeout=timeout)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
        assert code == 0, stdout[-3000:] + stderr[-5000:]
        outputs.append(stdout)
    return outputs


def start(script: str, *flags: str) -> subprocess.Popen:
    """The script in the background, stdout and stderr merged into proc.stdout (text lines)."""
    return subprocess.Popen(
        [sys.executable, script, *flags], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def only_run_dir(runs: Path) -> Path:
    (run_dir,) = list(runs.iterdir())
    return run_dir


def metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def read_video(path: Path) -> np.ndarray:
    """Decode an MP4 as --capture-video writes it (H.264, yuv420p) with PyAV: its frames, (T, H, W, 3) uint8 RGB."""
    with av.open(str(path)) as container:
        (stream,) = container.streams.video
        assert stream.codec_context.name == "h264" and stream.codec_context.pix_fmt == "yuv420p"
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(stream)])
