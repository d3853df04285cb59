"""What the Lake's test files share: appending a synthetic session in varied chunks, checking a group against the
truth, the subprocess helpers (tests/lake_procs.py) and a chi-square bound."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from lake import Lake
from lake_synth import Synth

ROOT = Path(__file__).resolve().parent.parent
PROCS = Path(__file__).resolve().parent / "lake_procs.py"


def append_steps(lake: Lake, group, synth: Synth, session: int, t0: int, t1: int, chunks=(1, 2, 3, 7, 16), seed=0):
    """Append steps t0..t1-1 of a synthetic session in chunks of varied sizes ((N,) leading dims for some
    single steps); returns t1."""
    rng = np.random.default_rng(seed)
    t = t0
    while t < t1:
        T = min(int(rng.choice(chunks)), t1 - t)
        batch = synth.batch(session, t, T)
        if T == 1 and rng.random() < 0.5:
            batch = tuple(x[0] for x in batch)
        lake.append(group, *batch)
        t += T
    return t


def verify_group(lake: Lake, synth: Synth, group, sessions) -> tuple[dict, dict]:
    """Check `read_stream` of every stream of a synthetic group against the truth.

    `sessions`: [(session, lo, hi)] in the order written; the session's committed steps K satisfy
    lo <= K <= hi (hi None: unknown). Every transition returned must be exact, in order, without duplicates,
    and the set returned for a session must be exactly its valid transitions for one such K (so nothing
    uncommitted, nothing across a session boundary or into a reset obs). Returns {(session, stream): steps}
    and {(session, stream, step): where}."""
    order = {s: i for i, (s, _, _) in enumerate(sessions)}
    found, where = {}, {}
    segs = {m["index"] for m in lake.manifest["segments"] if m["group"] == str(group)}
    for n in range(synth.N):
        b = lake.read_stream(group, n)
        assert (
            len(b.obs)
            == len(b.next_obs)
            == len(b.actions)
            == len(b.rewards)
            == len(b.terminated)
            == len(b.truncated)
            == len(b.where)
        )
        assert b.obs.dtype == lake.frame_dtype and b.obs.shape[1:] == (synth.S, *synth.frame_shape)
        ids = synth.decode_many(b.obs[:, -1]) if len(b.obs) else np.zeros((0, 4), np.int64)
        assert (ids[:, 1] == n).all() and (ids[:, 3] == 0).all()
        assert set(ids[:, 0].tolist()) <= set(order), (
            f"stream {n}: transitions of unknown sessions {set(ids[:, 0].tolist()) - set(order)}"
        )
        synth.check_transitions(
            ids[:, 0], n, ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
        )
        assert (b.where[:, 1] == n).all() and set(b.where[:, 0].tolist()) <= segs
        key = np.array([order[s] for s in ids[:, 0]], np.int64) * 10**7 + ids[:, 2]
        assert (np.diff(key) > 0).all(), f"stream {n}: transitions out of order or duplicated"
        for s, lo, hi in sessions:
            got = ids[ids[:, 0] == s, 2]
            top = int(got.max()) if len(got) else -1
            every = np.arange(top + 1)
            every = every[~synth.episode_start(s, n, every + 1)]
            assert np.array_equal(got, every), (
                f"session {s} stream {n}: gaps or invalid transitions {np.setdiff1d(got, every)[:5]} "
                f"{np.setdiff1d(every, got)[:5]}"
            )
            need = np.arange(max(lo - 1, 0))
            need = need[synth.valid(s, n, need, lo)]
            missing = np.setdiff1d(need, got)
            assert len(missing) == 0, (
                f"session {s} stream {n}: committed transitions lost: steps {missing[:10]} (lo={lo})"
            )
            if hi is not None:
                assert synth.valid(s, n, got, hi).all(), (
                    f"session {s} stream {n}: transitions past the {hi} committed steps"
                )
            found[(s, n)] = got
        for (s, _, t, _), w in zip(ids, b.where):
            where[(int(s), n, int(t))] = tuple(int(x) for x in w)
    return found, where


def run_proc(cmd: str, cfg: dict, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PROCS), cmd, json.dumps(cfg)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def popen_proc(cmd: str, cfg: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(PROCS), cmd, json.dumps(cfg)], stdout=subprocess.PIPE, text=True, cwd=ROOT, **kw
    )


def watchdog(p: subprocess.Popen, seconds: float = 60) -> threading.Timer:
    """Kill a subprocess that hangs (so a hang fails the test instead of blocking the suite)."""
    timer = threading.Timer(seconds, p.kill)
    timer.daemon = True
    timer.start()
    return timer


def segment_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("segment_*") if not p.name.endswith(".tmp")}


def chi2_critical(df: int, z: float) -> float:
    """Upper critical value of chi-square(df) at the normal quantile z (Wilson-Hilferty; accurate for df >> 1)."""
    k = 2.0 / (9.0 * df)
    return df * (1.0 - k + z * math.sqrt(k)) ** 3


def small_lake(path: Path, steps=40) -> Synth:
    """A Lake of one group (two 6x6 streams, 16-step segments) holding `steps` steps of session 1."""
    synth = Synth((6, 6), 2, episode_len=9, seed=8)
    with Lake(path, frame_shape=(6, 6), env_id="Synth-v0", segment_bytes=16 * 2 * 36) as lake:
        append_steps(lake, "g", synth, 1, 0, steps)
    return synth
