"""A full disk while a segment is sealed: the writer raises LakeDiskFullError, and the process that catches it,
closes and frees the Lake exits with its own status (it died with SIGSEGV in HDF5's H5D_close when the failed
segment's h5py objects were freed after their file's close had failed). Each case runs in a child process
(`tests/lake_procs.py fillup`): RLIMIT_FSIZE is per process, and a tmpfs is mounted in the child's own mount
namespace (`unshare -rm`, where the machine allows it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lake import Lake, LakeDiskFullError
from lake_helpers import append_steps, run_proc, verify_group
from lake_synth import Synth

ROOT = Path(__file__).resolve().parent.parent
PROCS = ROOT / "tests" / "lake_procs.py"
SETTINGS = dict(frame_shape=[42, 42], num_streams=2, segment_bytes=128 << 10, T=16)


def run_fillup(cfg: dict, wrap: list[str] | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(PROCS), "fillup", json.dumps(cfg)]
    res = subprocess.run((wrap or []) + cmd, capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    return res, json.loads(lines[-1]) if lines else None


def check_report(res: subprocess.CompletedProcess, report: dict | None, path: Path) -> None:
    assert res.returncode == 0, f"exit status {res.returncode}: {res.stdout[-2000:]}{res.stderr[-3000:]}"
    assert report is not None, res.stdout[-2000:]
    kind, message = report["error"]
    assert kind == "LakeDiskFullError", report["error"]
    assert f"{path}/segment_" in message and ".h5.tmp" in message, f"the error must name the sealed file: {message}"
    assert report["close"] == "LakeDiskFullError", "close() re-raises the writer's error"
    assert report["fds"] == [], f"fds left open into the Lake after close: {report['fds']}"
    assert not [f for f in report["files"] if f.endswith(".tmp")], report["files"]
    assert report["committed"] > 0 and report["transitions"] > 0 and report["problems"] == [], report


def test_file_size_limit_while_sealing_exits_cleanly(tmp_path):
    """RLIMIT_FSIZE (SIGXFSZ ignored: writes fail with EFBIG, a full disk for the Lake) lowered to 4 KB the moment
    a segment starts sealing: the sealed file is what fails."""
    path = tmp_path / "lake"
    res, report = run_fillup(dict(SETTINGS, path=str(path), fsize_at_seal=True))
    check_report(res, report, path)
    # This process reads and writes on: every committed transition is there, and appending resumes.
    synth = Synth((42, 42), 2, seed=0)
    committed = report["committed"]
    with Lake(path, frame_shape=(42, 42), segment_bytes=SETTINGS["segment_bytes"]) as lake:
        for n in range(2):
            b = lake.read_stream("g", n)
            steps = np.arange(committed)
            steps = steps[synth.valid(1, n, steps, committed)]
            np.testing.assert_array_equal(synth.decode_many(b.obs[:, -1])[:, 2], steps)
            synth.check_transitions(1, n, steps, b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated)
        for t in range(0, 200, 8):
            lake.append("g", *synth.batch(2, t, 8))
        lake.commit(wait=True)
        assert lake.num_transitions >= report["transitions"] + 2 * 200


def test_full_tmpfs_while_sealing_exits_cleanly(tmp_path):
    """The issue's case: a 1 MB tmpfs fills up; at these sizes it fills while a segment is sealed (the old Lake
    died with SIGSEGV here). The tmpfs lives in the child's mount namespace, so the child checks the data."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a tmpfs in a private mount namespace; the RLIMIT_FSIZE case covers it")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    wrap = ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=1m none {mnt} && exec "$0" "$@"']
    probe = subprocess.run(wrap + ["true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(
            f"this machine cannot mount a tmpfs in a user namespace ({probe.stderr.strip()[:200]}); "
            "the RLIMIT_FSIZE case covers the full disk"
        )
    path = mnt / "lake"
    res, report = run_fillup(dict(SETTINGS, path=str(path)), wrap)
    check_report(res, report, path)


# ---------------------------------------------------------------------- moved from test_lake.py
def test_disk_full_is_a_clear_error_and_the_lake_still_reads(tmp_path):
    path, path2 = tmp_path / "lake", tmp_path / "fresh"
    synth = Synth((42, 42), 2, episode_len=20, seed=0)
    cfg = dict(
        path=str(path),
        path2=str(path2),
        frame_shape=[42, 42],
        num_streams=2,
        segment_bytes=40 * 2 * 42 * 42,
        session=1,
        pre_steps=100,
        max_T=4,
        episode_len=20,
        synth_seed=0,
        group="g",
    )
    res = run_proc("diskfull", cfg)
    lines = res.stdout.splitlines()
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "Segmentation" not in res.stderr
    lo = max(int(x[2:]) for x in lines if x.startswith("C "))
    assert lo >= 100
    err = next(x for x in lines if x.startswith("E "))
    kind, _, msg = err[2:].partition(" ")
    assert kind == LakeDiskFullError.__name__, err
    assert str(path) in json.loads(msg), f"the message must name the file: {msg}"
    assert any(x.startswith("close ") for x in lines)
    err2 = next(x for x in lines if x.startswith("E2 "))
    kind2, _, msg2 = err2[3:].partition(" ")
    assert kind2 == LakeDiskFullError.__name__ and str(path2) in json.loads(msg2), err2
    # Everything committed before reads back, exactly; nothing past it; and writing goes on.
    with Lake(path, mode="r") as r:
        verify_group(r, synth, "g", [(1, lo, lo)])
    with Lake(path, frame_shape=(42, 42), segment_bytes=cfg["segment_bytes"]) as lake:
        append_steps(lake, "g", synth, 2, 0, 60)
        lake.commit(wait=True)
        verify_group(lake, synth, "g", [(1, lo, lo), (2, 60, 60)])
    with Lake(path2, frame_shape=(42, 42)) as lake:  # the fresh Lake that could not grow still opens, exact
        verify_group(lake, synth, "g", [(1, 0, None)])
