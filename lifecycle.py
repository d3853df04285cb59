"""The run lifecycle the scripts share (pqn_lake.py, pqn_lake_live.py, dqn_single_baseline.py; written once,
imported): a user's mistake in one line, the run folder (removed when the run ends before it logged anything), its
flags on --resume, config.json, metrics.jsonl and wandb, seeds and random states, checkpoints written atomically and
found in order, and the stop a signal asks for."""

import atexit
import errno
import io
import json
import os
import platform
import random
import re
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import NoReturn, Optional

import numpy as np
import torch

from envs import check_env, frame_shape, minatar_game, write_video
from lake import Lake, LakeError


class RunError(Exception):
    """An error a run states in one line (sys.excepthook: one_line_errors), not a traceback."""


def usage_error(message: str) -> NoReturn:
    """A user's mistake: one line on stderr and exit code 2, as argparse (tyro) does for a malformed flag."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    sys.exit(2)


def apply_family_defaults(args, defaults: dict) -> None:
    """Every flag left None takes its env family's default, `defaults[name]` = (Atari, MinAtar) (gymnasium ids take
    Atari's): a given flag wins."""
    family = 1 if minatar_game(args.env_id) is not None else 0
    for name, pair in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, pair[family])


RULES = {  # what check_flags can ask of a flag, by the words of its message ("must be >= 1")
    ">= 1": lambda v: v >= 1,
    ">= 0": lambda v: v >= 0,
    "in [0, 1]": lambda v: 0 <= v <= 1,
    "> 0": lambda v: 0 < v < float("inf"),  # (and finite)
}


def check_flags(args, must_be: dict) -> None:
    """Each flag named in `must_be[rule]` (a rule of RULES: its names, space-separated), the Nature CNN's smallest frame
    (MinAtar's grids aside), then the env's own checks (envs.check_env): the first flag that breaks one is a
    usage_error naming it, its value and the rule (instead of a segfault in ale-py at --num-envs 0, or a run that does
    nothing at --total-frames -5)."""
    rules = [(names.split(), RULES[rule], f"must be {rule}") for rule, names in must_be.items()]
    if minatar_game(args.env_id) is None:
        rules.append((("frame_height", "frame_width"), lambda v: v >= 36, "the Nature CNN needs 36 pixels at least"))
    for names, ok, rule in rules:
        for name in names:
            if not ok(getattr(args, name)):
                usage_error(f"--{name.replace('_', '-')} {getattr(args, name)}: {rule}")
    try:
        check_env(args)
    except ValueError as error:
        usage_error(str(error))


# pqn_lake.py's finished phase, or a stop after an update; the baseline's round end (ckpt_<frames>.pt); nothing else
# (best.pt, a user's copy) is resumed from or pruned
CHECKPOINT_NAME = re.compile(r"(?:phase|ckpt)_(\d+)(?:_update_(\d+))?\.pt")


def checkpoint_order(path: Path) -> Optional[tuple]:
    """(phase, update) of a checkpoint's name, a finished phase as (phase, inf): after its mid-phase checkpoints,
    though "phase_0003.pt" sorts before "phase_0003_update_000050.pt" by name (a round end: (frames, inf)). None: not
    a checkpoint."""
    match = CHECKPOINT_NAME.fullmatch(path.name)
    return match and (int(match[1]), float("inf") if match[2] is None else int(match[2]))


def checkpoints_in_order(folder: Path) -> list[Path]:
    return sorted((p for p in folder.glob("*.pt") if checkpoint_order(p)), key=checkpoint_order)


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


def load_for_resume(run_dir: Path, path: Optional[Path], script: str, needs: tuple = ()) -> dict:
    """--resume: the run folder's latest checkpoint (`path`), loaded on the CPU. No checkpoint, a run of another
    script (config.json's "script"), or a checkpoint without a field the script reads (an older script's) stops the
    run in one line."""
    if path is None:
        usage_error(f"--resume {run_dir}: no checkpoint in {run_dir / 'checkpoints'}")
    config = run_dir / "config.json"
    made_by = json.loads(config.read_text()).get("script", script) if config.exists() else script
    if made_by != script:
        usage_error(f"--resume {run_dir}: a run of {made_by}.py; resume it with {made_by}.py")
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    missing = [key for key in needs if key not in checkpoint]
    if missing:
        usage_error(
            f"--resume {run_dir}: {path.name} has no {', '.join(map(repr, missing))}: an older script wrote it; "
            "continue the run with the commit that made it"
        )
    return checkpoint


def open_lake(args, run_dir: Path, resuming: bool) -> Lake:
    """The run's Lake (--lake-path, or the run folder's lake/; a resumed run's must still be there), opened for writing
    before any env or network, unbounded (a run keeps every transition): a Lake another process writes, or one that
    cannot be made, stops the run at once."""
    path = Path(args.lake_path) if args.lake_path else run_dir / "lake"
    if resuming and not path.is_dir():
        usage_error(f"--resume {run_dir}: the run's Lake {path} is gone")
    try:
        return Lake(
            path,
            frame_shape=frame_shape(args),
            stack_size=args.stack_size,
            env_id=args.env_id,
            segment_bytes=args.lake_segment_mb << 20,
        )
    except OSError as error:
        usage_error(f"--lake-path {path}: {error.strerror or error}")


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
    if issubclass(kind, (LakeError, RunError)):
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


# ====================================================================== the run folder and what a run writes in it
def new_run(args) -> tuple[Path, str]:
    """A new run's folder, <--runs-dir>/<env id>__<--exp-name>__<--seed>__<unix time>, made now and removed at exit
    until the run has logged (remove_unstarted_run). Returns (folder, run name)."""
    global new_run_dir
    run_name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', args.env_id)}__{args.exp_name}__{args.seed}__{int(time.time())}"
    new_run_dir = Path(args.runs_dir) / run_name
    atexit.register(remove_unstarted_run)
    try:
        new_run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        usage_error(f"--runs-dir {args.runs_dir}: cannot make the run folder ({error.strerror or error})")
    return new_run_dir, run_name


def known_flags(args_type, saved: dict) -> dict:
    """A saved run's flags that `args_type` still has (RESULTS.md names the commit that last had each removed one)."""
    return {k: v for k, v in saved.items() if k in args_type.__dataclass_fields__}


def resumed_args(args, checkpoint: dict, session_flags: tuple, can_change: tuple):
    """--resume: the checkpoint's flags, with the session flags and the `can_change` flags of this command line (each
    change printed); any other flag on the command line is refused rather than silently dropped."""
    fields = set(vars(args))
    given = []  # the flags on the command line (--flag, --flag=value, --no-flag), as field names
    for token in sys.argv[1:]:
        name = token[2:].split("=", 1)[0].replace("-", "_") if token.startswith("--") else ""
        name = name[3:] if name.startswith("no_") and name[3:] in fields else name
        if name in fields and name not in session_flags and name not in given:
            given.append(name)
    refused = [f"--{n.replace('_', '-')}" for n in given if n not in can_change]
    if refused:
        allowed = ", ".join(f"--{n.replace('_', '-')}" for n in can_change)
        usage_error(
            f"--resume continues a run with its own flags; {', '.join(refused)} cannot change mid-run "
            f"(allowed: {allowed})"
        )
    saved = known_flags(type(args), checkpoint["args"])
    changes = {n: getattr(args, n) for n in given if getattr(args, n) != saved.get(n)}
    if changes.get("total_frames", float("inf")) < checkpoint["global_frames"]:
        usage_error(f"--total-frames {changes['total_frames']}: the run is at {checkpoint['global_frames']} frames")
    for name, value in changes.items():
        print(f"--resume applies --{name.replace('_', '-')} {value} (was {saved.get(name)})")
    return type(args)(**{**saved, **{k: getattr(args, k) for k in session_flags}, **changes})


def software(device: torch.device) -> dict:
    """What the run runs on: torch, CUDA and cuDNN versions, the device's name and count (config.json, wandb)."""
    cuda = device.type == "cuda"
    cpu = (
        re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        if Path("/proc/cpuinfo").exists()
        else None
    )
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "device_name": torch.cuda.get_device_name(device) if cuda else (cpu.group(1) if cpu else platform.machine()),
        "device_count": torch.cuda.device_count() if cuda else 1,
    }


def pinned_torch_warning(device: torch.device, version: str = torch.__version__) -> Optional[str]:
    """A GPU run's warning when its torch is not requirements.txt's pin (the GPU path is tested on the pin), else
    None."""
    requirements = Path(__file__).resolve().parent / "requirements.txt"
    pin = re.search(r"^torch==(\S+)", requirements.read_text(), re.M) if requirements.exists() else None
    if device.type == "cuda" and pin and version.split("+")[0] != pin.group(1):
        return (
            f"warning: torch {version} is not requirements.txt's torch=={pin.group(1)}, on which the GPU path is tested"
        )
    return None


def write_config(run_dir: Path, script: str, run_name: str, args, device: torch.device, can_change: tuple) -> None:
    """config.json: what compare.py groups runs by (script, env_id, seed), every flag, the device used (not the
    --cuda wish) and its software. Written when the run starts; a resume keeps it, updating the `can_change` flags it
    applied, and notes other software than the first session's under "resumed_on"."""
    path, now = run_dir / "config.json", software(device)
    warning = pinned_torch_warning(device)
    if warning:
        print(warning, flush=True)
    config = (
        json.loads(path.read_text())
        if path.exists()
        else {
            "script": script,
            "env_id": args.env_id,
            "seed": args.seed,
            "run_name": run_name,
            **vars(args),
            "cuda": device.type == "cuda",
            "device": str(device),
            **now,
        }
    )
    applied = {k: getattr(args, k) for k in can_change if config.get(k) != getattr(args, k)}
    if any(config.get(k) != v for k, v in now.items()) and now not in config.get("resumed_on", []):
        applied["resumed_on"] = [*config.get("resumed_on", []), now]
    if not path.exists() or applied:
        path.with_name("config.json.tmp").write_text(json.dumps({**config, **applied}, indent=2) + "\n")
        os.replace(path.with_name("config.json.tmp"), path)  # never a half-written config.json


def open_metrics(run_dir: Path, resumed_frames: Optional[int]):
    """metrics.jsonl, for appending; on resume, the lines past the checkpoint's frames go (a run killed mid-phase)."""
    path = run_dir / "metrics.jsonl"
    if resumed_frames is not None and path.exists():
        kept = [line for line in path.read_text().splitlines() if json.loads(line)["global_frames"] <= resumed_frames]
        path.write_text("".join(line + "\n" for line in kept))
    return open(path, "a")


def start_wandb(args, run_name: str, run_dir: Path, wandb_id: Optional[str], config: dict) -> str:
    """--track: wandb.init, its files in the run folder. Returns the run's wandb id, kept in its checkpoints: a resumed
    run logs to the same wandb run."""
    import wandb

    wandb_id = wandb_id or uuid.uuid4().hex[:8]
    wandb.init(
        project=args.wandb_project_name,
        entity=args.wandb_entity,
        group=f"{args.env_id}__{args.exp_name}",  # the seeds of one configuration together
        name=run_name,
        config=config,
        id=wandb_id,
        resume="allow",
        save_code=True,
        dir=run_dir,
    )
    # global_frames is every chart's x-axis, not wandb's step (pqn_lake's evaluations around a clone share a step)
    wandb.define_metric("global_frames")
    wandb.define_metric("*", step_metric="global_frames")
    return wandb_id


def log_row(metrics_file, track: bool, row: dict) -> None:
    """One JSON line in metrics.jsonl and, with --track, one wandb.log."""
    metrics_file.write(json.dumps(row) + "\n")
    metrics_file.flush()
    if track:
        import wandb

        wandb.log(row)


def log_video(path: Path, video, global_frames: int, track: bool) -> None:
    """An evaluation's film as an MP4 at `path` and, with --track, in wandb (metrics.jsonl holds numbers only)."""
    write_video(path, video)
    if track:
        import wandb

        wandb.log({"global_frames": global_frames, "media/video": wandb.Video(str(path))})


def close_metrics(metrics_file, track: bool) -> None:
    metrics_file.close()
    if track:
        import wandb

        wandb.finish()


def derive_seed(args, *keys: int) -> int:
    """A seed for one purpose (env resets, replay or BigPond draws, evaluation) of one phase or round, from --seed."""
    return int(np.random.SeedSequence([args.seed, *keys]).generate_state(1)[0] & 0x3FFFFFFF)


def set_determinism(args, device: torch.device) -> None:
    """--torch-deterministic: deterministic cuDNN and torch ops, a nondeterministic CUDA op an error (not a warning: a
    bit-exact check must fail). cuDNN's autotuner only without it and without --cuda-graphs: it times kernels in one
    agent's thread while another thread captures a graph, which can break the capture."""
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.backends.cudnn.benchmark = not args.torch_deterministic and not args.cuda_graphs
    if device.type == "cuda":  # the CPU kernels used here are deterministic already (and this import costs seconds)
        torch.use_deterministic_algorithms(args.torch_deterministic)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """The global random states (Python's, NumPy's, torch's, CUDA's), for a checkpoint."""
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def catch_stop_signals() -> None:
    """From now on SIGTERM, SIGUSR1 (slurm) and Ctrl-C ask for a stop (request_stop); until now Ctrl-C ends the run."""
    for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(signum, request_stop)
