"""What the script tests share: run a script as a user runs it (a subprocess in the repo root), read its
run folder, and decode the MP4 videos that --capture-video writes."""

import atexit
import json
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import NoReturn

import av
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
# One intra-op thread: the runs are tiny, and OpenMP's spinning threads collapse when the two cores are
# shared with the env threads and the Lake's writer. A run with --track logs to an offline wandb run (in its folder).
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
# Agents of a test: 8 envs x 16 steps, 4 minibatches, a Pond of two rollouts
SMALL_AGENTS = "--num-envs 8 --num-steps 16 --num-minibatches 4 --pond-steps 32".split()
# A mixture of seconds on MinAtar Breakout (one agent unless a test adds --num-agents): SMALL_AGENTS, 4 updates a
# phase, a BigPond of 2,000 transitions in slices of 16, batches of 32
TINY_MINATAR = [
    "--env-id",
    "MinAtar/Breakout-v1",
    *SMALL_AGENTS,
    *"--agent-updates-per-phase 4 --eval-episodes 2 --eval-every-updates 2 --big-pond-size 2000".split(),
    *"--big-pond-slice-steps 16 --big-batch-size 32".split(),
]


# run() and run_together() fork each run from a server that has imported the third-party packages (multiprocessing's
# forkserver, started once per test process): a tiny run spends more CPU importing torch (~3.7 s here) than running.
# The script still runs as `python script flags` would: as __main__, in a process of its own, from the repo root,
# with exactly `env`, its directory first on sys.path (so an older commit's scripts import their own modules: the
# project's modules are never preloaded), its exit code from sys.exit or 1 after sys.excepthook, non-daemon threads
# joined and atexit run. start() stays a real subprocess: the tests that send it signals see the real interpreter.
# torch._dynamo too: an optimizer's first construction imports it (~2.8 s here), in every run that trains; scipy.stats
# and rliable for compare.py's runs (~3 s).
PRELOAD = ["torch", "torch._dynamo", "numpy", "h5py", "tyro", "gymnasium", "ale_py", "av", "matplotlib"]
PRELOAD += ["scipy.stats", "rliable.library"]


def run_as_main(script: str, flags: tuple, env: dict, stdout: str, stderr: str) -> NoReturn:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    for fd, path in ((1, stdout), (2, stderr)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
    sys.stdout, sys.stderr = (open(fd, "w", buffering=1, closefd=False) for fd in (1, 2))
    sys.argv = [script, *flags]
    sys.path[:0] = [
        str(Path(ROOT, script).resolve().parent),
        *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # as the interpreter's exit: non-daemon threads first, then atexit
    atexit._run_exitfuncs()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


def forked(script: str, flags: tuple, env: dict) -> tuple:
    """The run started: (its process, its stdout file, its stderr file)."""
    context = multiprocessing.get_context("forkserver")
    if multiprocessing.forkserver._forkserver._forkserver_pid is None:  # the server's torch with one OpenMP thread
        context.set_forkserver_preload(PRELOAD)
        saved = dict(os.environ)
        os.environ.update(OMP_NUM_THREADS="1")
        multiprocessing.forkserver.ensure_running()
        os.environ.clear()
        os.environ.update(saved)
    out, err = (tempfile.NamedTemporaryFile("w+", delete=False, suffix=f".{name}") for name in ("out", "err"))
    process = context.Process(target=run_as_main, args=(script, tuple(flags), dict(env), out.name, err.name))
    process.start()
    return process, out, err


def outcome(process, out, err, timeout: int) -> subprocess.CompletedProcess:
    process.join(timeout)
    if process.exitcode is None:
        process.kill()
        process.join()
        raise subprocess.TimeoutExpired(process.name, timeout)
    stdout, stderr = out.read(), err.read()
    for f in (out, err):
        f.close()
        os.unlink(f.name)
    return subprocess.CompletedProcess(process.name, process.exitcode, stdout, stderr)


def finished(process, out, err, timeout: int) -> str:
    done = outcome(process, out, err, timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


def run(script: str, *flags: str, timeout: int = 300) -> str:
    """`python script flags...`; asserts it exits 0 (showing the end of its output if not); returns stdout."""
    return finished(*forked(script, flags, ENV), timeout)


def run_any(script: str, *flags: str, env: dict = ENV, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python script flags...` whatever its exit: its exit code, stdout and stderr (as subprocess.run's)."""
    return outcome(*forked(script, flags, env), timeout)


def run_together(*commands: tuple, env: dict = ENV, timeout: int = 300) -> list:
    """run() for independent runs, side by side (one thread each: CI's two cores both work): each command is
    (script, *flags); asserts each exits 0; returns their stdouts in order."""
    started = [forked(script, flags, env) for script, *flags in commands]
    return [finished(*one, timeout) for one in started]


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
