"""The run lifecycle that pqn_lake.py and pqn_lake_live.py share (written once, imported): a user's mistake in one
line, checkpoints written atomically and found in order, the stop a signal asks for, and a new run's folder removed
when the run ends before it logged anything."""

import errno
import io
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import NoReturn, Optional

import torch

from lake import LakeError


def usage_error(message: str) -> NoReturn:
    """A user's mistake: one line on stderr and exit code 2, as argparse (tyro) does for a malformed flag."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


# a finished phase, or a stop after an update; nothing else (best.pt, a user's copy) is resumed from or pruned
CHECKPOINT_NAME = re.compile(r"phase_(\d+)(?:_update_(\d+))?\.pt")


def checkpoint_order(path: Path) -> Optional[tuple]:
    """(phase, update) of a checkpoint's name, a finished phase as (phase, inf): after its mid-phase checkpoints,
    though "phase_0003.pt" sorts before "phase_0003_update_000050.pt" by name. None: not a checkpoint."""
    match = CHECKPOINT_NAME.fullmatch(path.name)
    return match and (int(match[1]), float("inf") if match[2] is None else int(match[2]))


def checkpoints_in_order(folder: Path) -> list[Path]:
    return sorted((p for p in folder.glob("phase_*.pt") if checkpoint_order(p)), key=checkpoint_order)


def atomic_save(path: Path, state: dict) -> None:
    """torch.save to a tmp file, then os.replace: a kill never leaves a half-written file. Written by Python, so a
    full disk is an OSError naming the file (torch's writer raises a RuntimeError without it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    try:
        with open(tmp, "wb") as f:
            f.write(buffer.getbuffer())
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(tmp)) from None
    os.replace(tmp, path)


def save_checkpoint(path: Path, state: dict, keep: int) -> None:
    """Atomic (atomic_save), then the checkpoints it supersedes go (and the oldest beyond --keep-checkpoints)."""
    atomic_save(path, state)
    phase, update = checkpoint_order(path)
    finished = []
    for old in checkpoints_in_order(path.parent):
        old_phase, old_update = checkpoint_order(old)
        if old_update == float("inf"):
            finished.append(old)
        elif update == float("inf") and old_phase <= phase:  # a finished phase supersedes the mid-phase
            old.unlink()  # checkpoints it passed (a kill may have left some of earlier phases)
    if keep > 0:  # mid-phase checkpoints are newer than every finished phase: they stay until their phase ends
        for old in finished[:-keep]:
            old.unlink()


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    found = checkpoints_in_order(run_dir / "checkpoints")
    return found[-1] if found else None


# Set by a signal: a run checkpoints at its next stop point (pqn_lake.py's: after the current update, its resume
# resetting the envs; the baseline's: after this env step), then exits 0
stop_requested = False
stop_point = "after the current update"  # (the baseline's own: "after this env step")


def request_stop(signum, frame) -> None:
    """SIGTERM, SIGUSR1 (slurm) and Ctrl-C (SIGINT): checkpoint at the next stop point and exit 0. A second Ctrl-C
    exits at once, without a checkpoint: what the Lake committed stays (it survives even SIGKILL)."""
    global stop_requested
    # os.write, not print: a print interrupting the main thread's print raises "reentrant call"
    if stop_requested and signum == signal.SIGINT:
        os.write(sys.stdout.fileno(), b"got SIGINT again: exiting now, without a checkpoint\n")
        remove_unstarted_run()
        os._exit(130)
    stop_requested = True
    message = f"got {signal.Signals(signum).name}: checkpointing and exiting {stop_point}"
    os.write(
        sys.stdout.fileno(),
        (message + (" (Ctrl-C again: exit now)" if signum == signal.SIGINT else "") + "\n").encode(),
    )


new_run_dir: Optional[Path] = None  # the folder of a run this process started, until the run has logged


def remove_unstarted_run() -> None:
    """At exit: a new run that ends before it logged anything (a locked Lake, a crash or Ctrl-C during start-up)
    leaves no folder behind, so compare.py never counts it."""
    metrics_path = new_run_dir / "metrics.jsonl" if new_run_dir is not None else None
    if metrics_path is not None and not (metrics_path.exists() and metrics_path.stat().st_size > 0):
        shutil.rmtree(new_run_dir, ignore_errors=True)


DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a full disk, the process's file-size limit, a quota


def one_line_errors(kind, error, traceback) -> None:
    """sys.excepthook: the user's errors in one line (the Lake's, a full disk, Ctrl-C during start-up); everything else
    keeps its traceback."""
    if issubclass(kind, LakeError):
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
    elif issubclass(kind, OSError) and error.errno in DISK_FULL:  # a checkpoint or metrics.jsonl could not be written
        print(
            f"{Path(sys.argv[0]).name}: error: disk full writing {error.filename or 'a file'} ({error.strerror}): "
            "the last checkpoint and what the Lake committed are intact; free some space, then --resume",
            file=sys.stderr,
        )
    elif issubclass(kind, KeyboardInterrupt):
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
    else:
        sys.__excepthook__(kind, error, traceback)
