"""Subprocesses for the Lake tests: `python tests/lake_procs.py COMMAND JSON_CONFIG`.

write     open a Lake for writing, print "ready PID", then append synthetic steps of one session and
          commit in a loop, printing "C <steps of this session committed>" (flushed) after each commit;
          stops after `steps` steps if given (then closes and prints "closed"), else runs until killed.
diskfull  like write for `pre_steps` steps, then lowers RLIMIT_FSIZE (SIGXFSZ ignored) and keeps
          appending until the Lake raises; prints "E <error class> <json message>". Then tries a fresh
          Lake under the same limit and prints "E2 <error class> <json message>".
fillup    the issue's full disk: append `T` steps and commit(wait=True) until the Lake raises (RLIMIT_FSIZE
          lowered the moment a segment starts sealing if `fsize_at_seal`, else the disk fills: a small tmpfs),
          close, free the Lake, then report as JSON the error, the fds left into the Lake, its files, and
          whether a new reader finds every committed transition exact; exits 0 if nothing crashed.
tryopen   try to open the Lake for writing (with `kwargs`); print "OPENED" or "<error class> <json message>".
read      open the Lake with mode="r" and print a JSON summary; on every stdin line, refresh() and
          print it again (read_stream of every stream and a sample, checked against the synthetic truth).
reopen    for `seconds`, open the Lake with mode="r", check, refresh and check twice, close, again and
          again; print one JSON line counting opens, refreshes, checks, wrong ones and errors.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # lake.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # lake_synth.py

import numpy as np  # noqa: E402

import lake as lake_module  # noqa: E402
from lake import Lake, LakeError  # noqa: E402
from lake_synth import Synth  # noqa: E402


def _synth(cfg: dict) -> Synth:
    return Synth(
        tuple(cfg["frame_shape"]),
        cfg["num_streams"],
        episode_len=cfg.get("episode_len", 25),
        seed=cfg.get("synth_seed", 0),
    )


def _open(cfg: dict) -> Lake:
    if cfg.get("slow_seal"):  # widen the window in which a sealed file is written, so that kills land inside it
        write, pause = lake_module._pwrite_all, cfg.get("seal_pause", 0.04)

        def slow(fd, buffers, offset, path):
            if not str(path).endswith(".h5.tmp"):
                return write(fd, buffers, offset, path)
            data = b"".join(bytes(b) for b in buffers)  # half of it, a pause, then the rest
            write(fd, [data[: len(data) // 2]], offset, path)
            if cfg.get("say_seal"):  # (the test kills it in the pause)
                print("S", flush=True)
            time.sleep(pause)
            write(fd, [data[len(data) // 2 :]], offset + len(data) // 2, path)

        lake_module._pwrite_all = slow
    return Lake(
        cfg["path"],
        frame_shape=tuple(cfg["frame_shape"]),
        segment_bytes=cfg.get("segment_bytes", 1 << 20),
        fsync_every=cfg.get("fsync_every", 0),
        capacity=cfg.get("capacity", 0),
    )


def _write_loop(lake: Lake, synth: Synth, cfg: dict, steps: int | None) -> int:
    rng = np.random.default_rng(cfg.get("seed", 0))
    session, group, max_T = cfg["session"], cfg.get("group", "g"), cfg.get("max_T", 4)
    t = 0
    while steps is None or t < steps:
        T = int(rng.integers(1, max_T + 1))
        batch = synth.batch(session, t, T)
        if T == 1 and rng.random() < 0.5:
            batch = tuple(x[0] for x in batch)  # leading dims (N,)
        lake.append(group, *batch)
        t += T
        if rng.random() < 0.8:  # sometimes two appends per commit
            lake.commit(wait=True)
            print(f"C {t}", flush=True)
    lake.commit(wait=True)
    print(f"C {t}", flush=True)
    return t


def write(cfg: dict) -> None:
    lake = _open(cfg)
    print(f"ready {os.getpid()}", flush=True)
    _write_loop(lake, _synth(cfg), cfg, cfg.get("steps"))
    lake.close()
    print("closed", flush=True)


def diskfull(cfg: dict) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    synth = _synth(cfg)
    lake = _open(cfg)
    print(f"ready {os.getpid()}", flush=True)
    rng = np.random.default_rng(cfg.get("seed", 0))
    session, group, t = cfg["session"], cfg.get("group", "g"), 0
    limit = None
    try:
        for _ in range(100_000):
            if limit is None and t >= cfg["pre_steps"]:
                size = max(p.stat().st_size for p in Path(cfg["path"]).glob("segment_*"))
                limit = int(size * cfg.get("limit_fraction", 0.5))
                soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
                print(f"limit {limit}", flush=True)
            T = int(rng.integers(1, cfg.get("max_T", 4) + 1))
            lake.append(group, *synth.batch(session, t, T))
            t += T
            lake.commit(wait=True)
            print(f"C {t}", flush=True)
        print("E none", flush=True)
    except LakeError as e:
        print(f"E {type(e).__name__} {json.dumps(str(e))}", flush=True)
    try:
        lake.close()
        print("close ok", flush=True)
    except LakeError as e:
        print(f"close {type(e).__name__}", flush=True)
    # A fresh Lake under the same limit: it fills up too, with the same clear error.
    try:
        fresh = Lake(
            cfg["path2"], frame_shape=tuple(cfg["frame_shape"]), segment_bytes=cfg.get("segment_bytes", 1 << 20)
        )
        for t in range(0, 100_000, 4):
            fresh.append(group, *synth.batch(session, t, 4))
            fresh.commit(wait=True)
        print("E2 none", flush=True)
    except LakeError as e:
        print(f"E2 {type(e).__name__} {json.dumps(str(e))}", flush=True)


def fillup(cfg: dict) -> None:
    import gc

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death by signal
    path, synth, T = Path(cfg["path"]), _synth(cfg), cfg.get("T", 16)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    if cfg.get("fsize_at_seal"):
        seal = Lake._seal

        def limited(self, *args, **kwargs):  # the sealed file is what meets the limit (its journal is already written)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
            return seal(self, *args, **kwargs)

        Lake._seal = limited
    lake = _open(cfg)
    report, t = {"committed": 0, "error": None}, 0
    try:
        while t < 1_000_000:
            lake.append("g", *synth.batch(1, t, T))
            t += T
            lake.commit(wait=True)
            report["committed"] = t
    except LakeError as e:
        report["error"] = [type(e).__name__, str(e)]
    try:
        lake.close()
        report["close"] = None
    except LakeError as e:
        report["close"] = type(e).__name__
    del lake  # what crashed the process (SIGSEGV in H5D_close) when the failed segment's HDF5 objects were freed
    gc.collect()
    resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own fd, closed meanwhile
            pass
    report["fds"] = sorted(f for f in fds if f.startswith(str(path) + "/"))
    report["files"] = sorted(p.name for p in path.iterdir())
    problems = []
    with Lake(path, mode="r") as r:
        for n in range(synth.N):
            b = r.read_stream("g", n)
            need = np.arange(report["committed"])
            need = need[synth.valid(1, n, need, report["committed"])]
            ids = synth.decode_many(b.obs[:, -1]) if len(b.obs) else np.zeros((0, 4), np.int64)
            try:
                np.testing.assert_array_equal(ids[:, 2], need, err_msg="committed transitions lost or extra")
                synth.check_transitions(1, n, need, b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated)
            except AssertionError as e:
                problems.append(f"stream {n}: {e}"[:500])
        report["transitions"] = r.num_transitions
    report["problems"] = problems
    print(json.dumps(report), flush=True)


def tryopen(cfg: dict) -> None:
    kwargs = {"frame_shape": tuple(cfg["frame_shape"]), **cfg.get("kwargs", {})}
    try:
        Lake(cfg["path"], **kwargs)
        print("OPENED", flush=True)
    except LakeError as e:
        print(f"{type(e).__name__} {json.dumps(str(e))}", flush=True)


def _summary(lake: Lake, synth: Synth, group: str) -> dict:
    out = {"num_transitions": lake.num_transitions, "streams": [], "exact": True, "error": ""}
    try:
        for n in range(synth.N):
            b = lake.read_stream(group, n)
            ids = synth.decode_many(b.obs[:, -1]) if len(b.obs) else np.zeros((0, 4), np.int64)
            synth.check_transitions(
                ids[:, 0], n, ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
            )
            out["streams"].append(ids[:, [0, 2]].tolist())
        if lake.num_transitions:
            b = lake.sample(256, rng=np.random.default_rng(0))
            ids = synth.decode_many(b.obs[:, -1])
            synth.check_transitions(
                ids[:, 0], ids[:, 1], ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
            )
    except (AssertionError, LakeError) as e:
        out["exact"], out["error"] = False, f"{type(e).__name__}: {e}"[:2000]
    return out


def read(cfg: dict) -> None:
    synth = _synth(cfg)
    lake = Lake(cfg["path"], mode="r")
    print(json.dumps(_summary(lake, synth, cfg.get("group", "g"))), flush=True)
    for _ in sys.stdin:
        lake.refresh()
        print(json.dumps(_summary(lake, synth, cfg.get("group", "g"))), flush=True)
    lake.close()


def reopen(cfg: dict) -> None:
    """Open the Lake with mode="r" again and again for `seconds` while a writer evicts; after each open, check
    what it reads, refresh a few times checking again, close. Print one JSON line: opens, refreshes, checked
    summaries, wrong ones and errors (class and message)."""
    synth, group = _synth(cfg), cfg.get("group", "g")
    report = {"opens": 0, "refreshes": 0, "checked": 0, "wrong": 0, "errors": []}
    t0 = time.time()
    while time.time() - t0 < cfg["seconds"] and len(report["errors"]) < 3:
        try:
            with Lake(cfg["path"], mode="r") as lake:
                report["opens"] += 1
                for i in range(3):
                    if i:
                        lake.refresh()
                        report["refreshes"] += 1
                    s = _summary(lake, synth, group)
                    report["checked"] += 1
                    if not s["exact"]:
                        report["wrong"] += 1
                        report["errors"].append(s["error"][:300])
        except LakeError as e:
            report["errors"].append(f"{type(e).__name__}: {e}"[:300])
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    {"write": write, "diskfull": diskfull, "fillup": fillup, "tryopen": tryopen, "read": read, "reopen": reopen}[
        sys.argv[1]
    ](json.loads(sys.argv[2]))
