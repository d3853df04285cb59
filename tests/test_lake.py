"""Tests of lake.py, the crash-safe replay store (issue 2). All on CPU.

Most tests use synthetic streams (tests/lake_synth.py) whose frames are a pure function of (session,
stream, step) and name themselves, so every transition the Lake returns can be identified and recomputed.
The first test checks bit-exact reconstruction against a real ale-py AtariVectorEnv. Subprocess helpers
(writers killed with SIGKILL, readers, a writer under RLIMIT_FSIZE) live in tests/lake_procs.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import hdf5plugin  # noqa: F401  (registers the zstd filter, for plain h5py reads)
import numpy as np
import pytest

import lake as lake_module
from lake import Lake
from lake_helpers import append_steps, chi2_critical, popen_proc, segment_files, verify_group, watchdog
from lake_synth import Synth

ROOT = Path(__file__).resolve().parent.parent
S = 4  # stack size


# ---------------------------------------------------------------------- helpers


# ---------------------------------------------------------------------- 1. bit-exact against real Atari
class AtariStream:
    """One group: an ale-py AtariVectorEnv driven by random actions, every step recorded as ground truth."""

    def __init__(self, num_envs: int, steps: int, seed: int):
        from ale_py.vector_env import AtariVectorEnv

        self.envs = AtariVectorEnv(
            "breakout",
            num_envs,
            episodic_life=False,
            life_loss_info=True,
            reward_clipping=False,
            max_num_frames_per_episode=600,
        )
        self.N, self.steps = num_envs, steps
        self.obs_all = np.empty((steps + 1, num_envs, S, 84, 84), np.uint8)  # obs_all[t + 1]: next obs of step t
        self.actions = np.empty((steps, num_envs), np.int64)
        self.rewards = np.empty((steps, num_envs), np.float32)
        self.terminated = np.empty((steps, num_envs), bool)
        self.truncated = np.empty((steps, num_envs), bool)
        self.episode_start = np.empty((steps, num_envs), bool)
        self.game_over = np.empty((steps, num_envs), bool)
        self.obs, _ = self.envs.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.es, self.go = np.ones(num_envs, bool), np.zeros(num_envs, bool)
        self.t = 0

    def run(self, lake: Lake, group, T: int, single: bool) -> None:
        """Step T times and append them to the Lake as one batch ((N,) leading dims when `single`)."""
        t0 = self.t
        for _ in range(T):
            t = self.t
            self.obs_all[t] = self.obs
            a = self.rng.integers(0, 4, self.N)
            next_obs, r, term, trunc, info = self.envs.step(a)
            self.actions[t], self.rewards[t], self.terminated[t], self.truncated[t] = a, r, term, trunc
            self.episode_start[t] = self.es
            self.game_over[t] = trunc | (term & (info["lives"] == 0))
            self.es, self.go = self.go, self.game_over[t]
            self.obs = next_obs
            self.t += 1
            self.obs_all[self.t] = next_obs
        sl = slice(t0, self.t)
        if single:  # leading dims (N,)
            lake.append(
                group,
                self.obs_all[t0],
                self.actions[t0],
                self.rewards[t0],
                self.terminated[t0],
                self.truncated[t0],
                self.episode_start[t0],
            )
        else:
            lake.append(
                group,
                self.obs_all[sl],
                self.actions[sl],
                self.rewards[sl],
                self.terminated[sl],
                self.truncated[sl],
                self.episode_start[sl],
            )

    def valid_steps(self, n: int) -> np.ndarray:
        """Ground truth: step t is a transition iff step t + 1 was appended and is not a reset obs."""
        t = np.arange(self.steps - 1)
        return t[~self.episode_start[t + 1, n]]


def test_atari_bit_exact_reconstruction(tmp_path):
    path = tmp_path / "lake"
    rng = np.random.default_rng(0)
    streams = {0: AtariStream(4, 640, seed=0), "b": AtariStream(2, 360, seed=1)}
    with Lake(path, frame_shape=(84, 84), env_id="ALE/Breakout-v5", segment_bytes=50 * 84 * 84 * 4) as lake:
        while any(s.t < s.steps for s in streams.values()):
            live = [g for g, s in streams.items() if s.t < s.steps]
            group = live[int(rng.integers(len(live)))]
            st = streams[group]
            T = min(int(rng.choice([1, 1, 2, 3, 7, 16])), st.steps - st.t)
            st.run(lake, group, T, single=T == 1 and rng.random() < 0.6)
            if rng.random() < 0.1:
                lake.commit()
        lake.commit(wait=True)

        for group, st in streams.items():
            # The scenario covers what it must: game overs, life losses, truncations, auto-resets, rollovers.
            lives_lost = st.terminated & ~st.game_over
            assert st.game_over[st.terminated].sum() >= 1, "no game over: the test would not cover terminations"
            assert (
                (st.truncated.sum() >= 1 or group == "b") and lives_lost.sum() >= 3 and st.episode_start[1:].sum() >= 3
            )

        where_to_truth, frames_total = {}, 0
        for group, st in streams.items():
            segs = [m for m in lake.manifest["segments"] if m["group"] == str(group)]
            assert len(segs) >= 3, "segment rollovers not exercised"
            for n in range(st.N):
                b = lake.read_stream(group, n)
                t = st.valid_steps(n)
                assert len(b.obs) == len(t), f"group {group} stream {n}: {len(b.obs)} transitions read, {len(t)} valid"
                np.testing.assert_array_equal(b.obs, st.obs_all[t, n])
                np.testing.assert_array_equal(b.next_obs, st.obs_all[t + 1, n])
                np.testing.assert_array_equal(b.actions, st.actions[t, n])
                np.testing.assert_array_equal(b.rewards, st.rewards[t, n])
                np.testing.assert_array_equal(b.terminated, st.terminated[t, n])
                np.testing.assert_array_equal(b.truncated, st.truncated[t, n])
                assert (b.where[:, 1] == n).all()
                # The special steps are all there, exact: the first step, reset obs, game-over finals with
                # their true final next obs, truncations, and the carried step of every segment rollover.
                assert 0 in t and st.episode_start[t, n].sum() >= 1
                assert (st.game_over[t, n] & st.terminated[t, n]).sum() + (st.truncated[t, n]).sum() >= 1
                assert (b.where[:, 2] == 0).sum() >= len(segs) - 2, "transitions of carried steps missing"
                # Never a transition into a reset obs (the auto-reset step ignores its action).
                assert not st.episode_start[t + 1, n].any()
                for w, step in zip(b.where, t):
                    where_to_truth[tuple(int(x) for x in w)] = (group, n, int(step))

        # The same transitions through sample(): `where` names the transition; content must be the truth.
        b = lake.sample(3000, rng=np.random.default_rng(1))
        assert b.obs.shape == (3000, S, 84, 84) and b.next_obs.shape == (3000, S, 84, 84) and b.obs.dtype == np.uint8
        hit_groups = set()
        for i, w in enumerate(b.where):
            key = tuple(int(x) for x in w)
            assert key in where_to_truth, f"sample returned {key}, not a valid committed transition"
            group, n, t = where_to_truth[key]
            st = streams[group]
            hit_groups.add(group)
            assert np.array_equal(b.obs[i], st.obs_all[t, n]) and np.array_equal(b.next_obs[i], st.obs_all[t + 1, n]), (
                key
            )
            assert (b.actions[i], b.rewards[i], b.terminated[i], b.truncated[i]) == (
                st.actions[t, n],
                st.rewards[t, n],
                st.terminated[t, n],
                st.truncated[t, n],
            ), key
        assert hit_groups == set(streams)

        # Bulk slices: every transition is a valid one, exact (matched by content).
        truth = set()
        for st in streams.values():
            for n in range(st.N):
                for t in st.valid_steps(n):
                    truth.add(
                        _transition_key(
                            st.obs_all[t, n],
                            st.obs_all[t + 1, n, -1],
                            st.actions[t, n],
                            st.rewards[t, n],
                            st.terminated[t, n],
                            st.truncated[t, n],
                        )
                    )
        sl = lake.sample_slices(24, 40, rng=np.random.default_rng(2))
        assert 0 < len(sl.actions) <= 24 * 40
        for i, o in enumerate(sl.obs_start):
            assert (
                _transition_key(
                    sl.frames[o : o + S],
                    sl.frames[o + S],
                    sl.actions[i],
                    sl.rewards[i],
                    sl.terminated[i],
                    sl.truncated[i],
                )
                in truth
            ), f"slice transition {i} is not a valid transition"

    # Sealed segments are ordinary HDF5 files whose frames plain h5py + hdf5plugin read, equal to the truth;
    # all segments hold one frame per step and whole stacks only at boundaries (first step, resets, carries).
    manifest = json.loads((path / "manifest.json").read_text())
    with Lake(path, mode="r") as lake:
        for group, st in streams.items():
            segs = [m for m in manifest["segments"] if m["group"] == str(group)]
            assert sum(m["file"].endswith(".h5") for m in segs) >= 2 and segs[-1]["file"].endswith(".journal")
            for n in range(st.N):
                t = st.valid_steps(n)
                b = lake.read_stream(group, n)  # reopened: the sealed files and the journal as committed
                np.testing.assert_array_equal(b.obs, st.obs_all[t, n])
                np.testing.assert_array_equal(b.next_obs, st.obs_all[t + 1, n])
                frames_used, plain = 0, []
                for m in segs:
                    if m["file"].endswith(".h5"):
                        with h5py.File(path / m["file"], "r") as h5:
                            rec = h5["records"][n, : m["steps"]]
                            frames = h5["frames"][n, : rec["frame_end"][-1]]
                        valid = np.flatnonzero((rec["flags"][1:] & lake_module.BOUNDARY) == 0)
                        plain.append(frames[rec["frame_end"][valid, None] - S + np.arange(S)])
                    else:
                        rec = next(s for s in lake._segments if s.index == m["index"]).read_records(n, 0, m["steps"])
                    frames_used += int(rec["frame_end"][-1])
                got = np.concatenate(plain)
                np.testing.assert_array_equal(got, b.obs[: len(got)])
                boundaries = st.episode_start[1:, n].sum() + 1
                assert frames_used == st.steps + (S - 1) * boundaries + S * (len(segs) - 1)
                assert (frames_used - S * (len(segs) - 1)) <= 1.05 * st.steps
                frames_total += frames_used
    # Disk: compressed frames (these tiny segments, 50-100 steps each, also pay HDF5's few KB per file).
    steps = sum(st.steps * st.N for st in streams.values())
    disk = sum(os.stat(p).st_blocks * 512 for p in path.glob("segment_*"))
    print(f"disk {disk} B, {disk / steps:.0f} B/step, frames/step {frames_total / steps:.3f}")
    assert disk / steps < 84 * 84 / 5, "frames of real Atari play compress far better than this"


def _transition_key(obs, next_frame, action, reward, term, trunc) -> bytes:
    h = hashlib.sha1(np.ascontiguousarray(obs).tobytes())
    h.update(np.ascontiguousarray(next_frame).tobytes())
    h.update(
        np.array([action], np.int64).tobytes()
        + np.array([reward], np.float32).tobytes()
        + bytes([bool(term), bool(trunc)])
    )
    return h.digest()


def test_segment_files_open_in_plain_h5py(tmp_path):
    """A sealed segment is an ordinary HDF5 file: its attributes describe it, and plain h5py (with hdf5plugin
    for the zstd filter) reads its frames and records, equal to what the Lake returns."""
    synth = Synth((6, 5), 2, episode_len=6)
    with Lake(tmp_path / "lake", frame_shape=(6, 5), env_id="Synth-v0", segment_bytes=16 * 2 * 30) as lake:
        append_steps(lake, "agent7", synth, 1, 0, 40)
        lake.commit(wait=True)
        from_lake = lake.read_stream("agent7", 1)
    manifest = json.loads((tmp_path / "lake" / "manifest.json").read_text())
    segs = manifest["segments"]
    assert len(segs) >= 2
    with h5py.File(tmp_path / "lake" / segs[0]["file"], "r") as h5:
        a = h5.attrs
        assert a["format"] == "pqn-lake" and int(a["format_version"]) == manifest["format_version"] == 2
        assert tuple(a["frame_shape"]) == (6, 5) and int(a["stack_size"]) == S and a["env_id"] == "Synth-v0"
        assert a["group"] == "agent7" and int(a["num_streams"]) == 2 and str(a["frame_dtype"]) == "uint8"
        assert (
            a["codec"] == "zstd"
            and int(a["steps"]) == segs[0]["steps"]
            and int(a["chunk_frames"]) == manifest["chunk_frames"]
        )
        K = int(a["chunk_frames"])
        assert (
            h5["frames"].chunks == (1, K, 6, 5) and h5["frames"].compression_opts is not None or h5["frames"]._filters
        )
        assert h5["frames"].shape[0] == 2 and h5["frames"].shape[1] % K == 0 and h5["frames"].shape[2:] == (6, 5)
        rec = h5["records"][1, : segs[0]["steps"]]
        frames = h5["frames"][1]
    valid = np.flatnonzero((rec["flags"][1:] & lake_module.BOUNDARY) == 0)
    n = len(valid)
    np.testing.assert_array_equal(frames[rec["frame_end"][valid, None] - S + np.arange(S)], from_lake.obs[:n])
    np.testing.assert_array_equal(frames[rec["frame_end"][valid, None] - S + 1 + np.arange(S)], from_lake.next_obs[:n])
    # The first step of a session stores its whole stack; later steps their newest frame.
    np.testing.assert_array_equal(frames[:S], synth.obs(1, 1, 0))
    for t in range(1, segs[0]["steps"]):
        np.testing.assert_array_equal(frames[rec["frame_end"][t] - S : rec["frame_end"][t]], synth.obs(1, 1, t))
        assert rec["action"][t] == synth.actions(1, 1, t) and rec["reward"][t] == synth.rewards(1, 1, t)


def test_dense_boundaries_and_single_stream(tmp_path):
    """Episodes of 1-3 steps: most steps store whole stacks, so segments roll over on frame capacity."""
    synth = Synth((5, 5), 1, episode_len=2, seed=3)
    with Lake(tmp_path / "lake", frame_shape=(5, 5), segment_bytes=16 * 25) as lake:
        append_steps(lake, "g", synth, 1, 0, 300)
        lake.commit(wait=True)
        found, _ = verify_group(lake, synth, "g", [(1, 300, 300)])
        assert len(found[(1, 0)]) >= 50
        segs = lake.manifest["segments"]
        sealed = [m for m in segs if m["tails"] is None]  # 16 steps per segment, unless frames run out first
        assert any(m["steps"] < 16 for m in sealed), "no rollover on frame capacity"
        for m in sealed:
            with h5py.File(lake.path / m["file"], "r") as h5:
                assert h5["records"][0, m["steps"] - 1]["frame_end"] <= h5["frames"].shape[1]


@pytest.mark.parametrize(
    "frame_shape,dtype,stack", [((6, 5, 3), "uint8", 4), ((4, 4), "uint16", 2), ((4, 4), "uint8", 1)]
)
def test_other_frame_shapes_dtypes_and_stacks(tmp_path, frame_shape, dtype, stack):
    """RGB frames, wider dtypes and other stack sizes are rebuilt exactly too (read_stream, sample, reopen)."""
    synth = Synth(frame_shape, 2, stack_size=stack, episode_len=7, seed=11)
    nbytes = int(np.prod(frame_shape)) * np.dtype(dtype).itemsize
    path = tmp_path / "lake"

    class Cast:  # the synthetic stream with frames in `dtype`
        def batch(self, *a):
            obs, *rest = synth.batch(*a)
            return (obs.astype(dtype), *rest)

    for session, steps in [(1, 50), (2, 23)]:
        with Lake(
            path, frame_shape=frame_shape, frame_dtype=dtype, stack_size=stack, segment_bytes=16 * 2 * nbytes
        ) as lake:
            append_steps(lake, "g", Cast(), session, 0, steps, seed=session)
    with Lake(path, mode="r", frame_dtype=dtype, stack_size=stack) as lake:
        assert lake.stack_size == stack and lake.frame_shape == frame_shape and lake.frame_dtype == np.dtype(dtype)
        verify_group(lake, synth, "g", [(1, 50, 50), (2, 23, 23)])
        b = lake.sample(500, rng=np.random.default_rng(0))
        assert b.obs.shape == (500, stack, *frame_shape) and b.obs.dtype == np.dtype(dtype)
        ids = synth.decode_many(b.obs[:, -1])
        assert synth.valid(ids[:, 0], ids[:, 1], ids[:, 2], np.where(ids[:, 0] == 1, 50, 23)).all()
        synth.check_transitions(
            ids[:, 0], ids[:, 1], ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
        )


def test_open_without_settings_reads_any_lake(tmp_path):
    """Settings are in the manifest: a reader (and `lake.py inspect`, which passes none) must open a Lake
    made with a non-default stack_size or frame_dtype without being told them again."""
    path = tmp_path / "lake"
    synth = Synth((4, 4), 2, stack_size=2, seed=12)
    with Lake(path, frame_shape=(4, 4), frame_dtype="uint16", stack_size=2) as lake:
        obs, *rest = synth.batch(1, 0, 20)
        lake.append("g", obs.astype(np.uint16), *rest)
    res = subprocess.run(
        [sys.executable, "lake.py", "inspect", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert res.returncode == 0 and "stack 2" in res.stdout, res.stdout + res.stderr[-1500:]
    with Lake(path, mode="r") as lake:
        assert lake.stack_size == 2 and lake.frame_dtype == np.uint16
        verify_group(lake, synth, "g", [(1, 20, 20)])


# ---------------------------------------------------------------------- 2. uniform, seeded sampling
def _uniformity_failures(counts: np.ndarray, categories: dict[str, np.ndarray], z: float = 5.0) -> list[str]:
    """Chi-square over all cells plus binomial z-tests on categories of cells; [] when consistent with uniform."""
    B, V = counts.sum(), len(counts)
    E = B / V
    chi2 = float(((counts - E) ** 2 / E).sum())
    fails = []
    if chi2 > chi2_critical(V - 1, z):
        fails.append(f"chi2={chi2:.0f} > {chi2_critical(V - 1, z):.0f} (df={V - 1})")
    for name, mask in categories.items():
        p = mask.sum() / V
        got = counts[mask].sum()
        zz = (got - B * p) / math.sqrt(B * p * (1 - p))
        if abs(zz) > z:
            fails.append(f"{name}: {got} drawn, {B * p:.0f} expected (z={zz:.1f})")
    return fails


@pytest.fixture(scope="module")
def uniform_lake(tmp_path_factory):
    """Two groups (3 and 2 streams), many segments and boundaries, a resume, partly filled last segments."""
    path = tmp_path_factory.mktemp("uniform") / "lake"
    sa, sb = Synth((4, 4), 3, episode_len=9, seed=1), Synth((4, 4), 2, episode_len=15, seed=2)
    sessions = {"a": [(1, 250, 250), (2, 165, 165)], "b": [(11, 301, 301)]}
    with Lake(path, frame_shape=(4, 4), segment_bytes=1536) as lake:  # 32 steps per segment for a, 48 for b
        append_steps(lake, "a", sa, 1, 0, 250, seed=1)
        append_steps(lake, "b", sb, 11, 0, 150, seed=2)
    with Lake(path, frame_shape=(4, 4), segment_bytes=1536) as lake:
        append_steps(lake, "b", sb, 11, 150, 301, seed=3)
        append_steps(lake, "a", sa, 2, 0, 165, seed=4)
    # The resumed "b" is one synthetic session cut in two Lake sessions: the cut is a boundary, so its
    # valid set is the session's minus the transition into step 150.
    return path, {"a": sa, "b": sb}, sessions


def _uniform_cells(lake: Lake, synths: dict, sessions: dict) -> list[tuple]:
    """Every valid transition of the uniform_lake as (group, session, stream, step, segment, step in segment),
    after checking read_stream against the truth."""
    cells = []
    for g, synth in synths.items():
        where = verify_group(lake, synth, g, sessions[g])[1] if g == "a" else _verify_b(lake, synth)
        cells += [(g, s, n, t, seg, step) for (s, n, t), (seg, _, step) in where.items()]
    return cells


def _cell(session, stream, t):
    return np.asarray(session, np.int64) * 10**8 + np.asarray(stream, np.int64) * 10**6 + np.asarray(t, np.int64)


def _verify_b(lake, synth) -> dict:
    """Group b: one synthetic session written in two Lake sessions; the resume at step 150 is a boundary."""
    where = {}
    for n in range(synth.N):
        b = lake.read_stream("b", n)
        ids = synth.decode_many(b.obs[:, -1])
        synth.check_transitions(
            ids[:, 0], n, ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
        )
        t = np.arange(300)
        t = t[~synth.episode_start(11, n, t + 1) & (t != 149)]
        np.testing.assert_array_equal(ids[:, 2], t)
        assert (ids[:, 0] == 11).all() and (ids[:, 1] == n).all()
        for (s, _, tt, _), w in zip(ids, b.where):
            where[(int(s), n, int(tt))] = tuple(int(x) for x in w)
    return where


def test_sampling_is_uniform(uniform_lake):
    path, synths, sessions = uniform_lake
    lake = Lake(path, mode="r")
    cells = sorted(_uniform_cells(lake, synths, sessions), key=lambda c: int(_cell(*c[1:4])))
    keys = np.array([_cell(*c[1:4]) for c in cells], np.int64)
    assert len(np.unique(keys)) == len(keys) and len(keys) > 1500
    seg_steps = {m["index"]: m["steps"] for m in lake.manifest["segments"]}
    last_seg = {g: max(m["index"] for m in lake.manifest["segments"] if m["group"] == g) for g in synths}
    first_seg = {g: min(m["index"] for m in lake.manifest["segments"] if m["group"] == g) for g in synths}
    es = lambda g, s, n, t: bool(synths[g].episode_start(s, n, t))  # noqa: E731
    cats = {
        "group b": [g == "b" for g, s, n, t, seg, step in cells],
        "session 2": [s == 2 for g, s, n, t, seg, step in cells],
        "last segment": [seg == last_seg[g] for g, s, n, t, seg, step in cells],
        "first segment": [seg == first_seg[g] for g, s, n, t, seg, step in cells],
        "obs is a boundary": [
            step == 0 or es(g, s, n, t) or (g == "b" and t == 150) for g, s, n, t, seg, step in cells
        ],
        "next is last committed step": [step + 2 == seg_steps[seg] for g, s, n, t, seg, step in cells],
        "step before a reset": [es(g, s, n, t + 2) for g, s, n, t, seg, step in cells],
    }
    cats = {k: np.array(v, bool) for k, v in cats.items()}
    for name, mask in cats.items():
        assert 20 <= mask.sum() <= len(keys) - 20, f"category {name} too small to test: {mask.sum()}"

    counts = np.zeros(len(keys), np.int64)
    B = 0
    for i in range(12):
        b = lake.sample(10_000, rng=np.random.default_rng(100 + i))
        assert b.obs.shape == (10_000, S, 4, 4) and b.next_obs.shape == (10_000, S, 4, 4)
        ids = synths["a"].decode_many(b.obs[:, -1])
        assert (ids[:, 3] == 0).all()
        for g, synth in synths.items():  # exact content of every draw
            m = np.isin(ids[:, 0], [s for s, _, _ in sessions[g]])
            synth.check_transitions(
                ids[m, 0],
                ids[m, 1],
                ids[m, 2],
                b.obs[m],
                b.next_obs[m],
                b.actions[m],
                b.rewards[m],
                b.terminated[m],
                b.truncated[m],
            )
        cell = _cell(ids[:, 0], ids[:, 1], ids[:, 2])
        pos = np.minimum(np.searchsorted(keys, cell), len(keys) - 1)
        bad = keys[pos] != cell
        assert not bad.any(), f"sampled transitions that are not valid: {ids[bad][:5]}"
        counts += np.bincount(pos, minlength=len(keys))
        B += len(cell)
    fails = _uniformity_failures(counts, cats)
    assert not fails, f"sampling is not uniform over valid transitions: {fails}"

    # The test has power: it rejects samplers biased in the ways a bug would bias them.
    rng = np.random.default_rng(0)
    for name, weight in [
        ("last segment", 1.3),
        ("obs is a boundary", 0.75),
        ("next is last committed step", 0.0),
        ("group b", 1.1),
        ("step before a reset", 1.25),
    ]:
        p = np.where(cats[name], weight, 1.0)
        assert _uniformity_failures(rng.multinomial(B, p / p.sum()), cats), (
            f"a sampler weighting '{name}' x{weight} would pass"
        )
    # Weighting segments equally instead of by their valid transitions (what a wrong rejection loop does):
    seg = np.array([c[4] for c in cells])
    p = 1.0 / np.bincount(seg)[seg]
    assert _uniformity_failures(rng.multinomial(B, p / p.sum()), cats)
    lake.close()


def test_sampling_is_seeded(uniform_lake):
    path, synths, _ = uniform_lake
    with Lake(path, mode="r") as lake:
        a = lake.sample(512, rng=np.random.default_rng(7))
        b = lake.sample(512, rng=np.random.default_rng(7))
        c = lake.sample(512, rng=np.random.default_rng(8))
        for f in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated", "where"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert not np.array_equal(a.where, c.where)
        s1 = lake.sample_slices(16, 12, rng=np.random.default_rng(3))
        s2 = lake.sample_slices(16, 12, rng=np.random.default_rng(3))
        for f in ("frames", "obs_start", "actions", "rewards", "terminated", "truncated"):
            np.testing.assert_array_equal(getattr(s1, f), getattr(s2, f))
    # A Lake's own seed fixes its draws too, whatever its number of reader threads.
    with Lake(path, mode="r", seed=5, read_threads=1) as l1, Lake(path, mode="r", seed=5, read_threads=4) as l4:
        x, y = l1.sample(300), l4.sample(300)
        np.testing.assert_array_equal(x.where, y.where)
        np.testing.assert_array_equal(x.obs, y.obs)


@pytest.mark.parametrize("slice_steps", [12, 40])  # 40: longer than a segment of group a (32 steps)
def test_sample_slices_cover_every_transition_alike(uniform_lake, slice_steps):
    """A BigPond filled with slices must hold each valid transition with the same probability: the steps near a
    segment's ends as often as the middle ones, short segments' as often as long ones'. Slices make the counts
    of neighbouring cells move together, so this compares mean counts per cell of whole categories."""
    path, synths, sessions = uniform_lake
    L = slice_steps
    with Lake(path, mode="r") as lake:
        cells = sorted(_uniform_cells(lake, synths, sessions), key=lambda c: int(_cell(*c[1:4])))
        keys = np.array([_cell(*c[1:4]) for c in cells], np.int64)
        counts = np.zeros(len(keys), np.int64)
        for i in range(10):
            sl = lake.sample_slices(2000, L, rng=np.random.default_rng(50 + i))
            ids = synths["a"].decode_many(sl.frames[sl.obs_start + S - 1])
            cell = _cell(ids[:, 0], ids[:, 1], ids[:, 2])
            pos = np.minimum(np.searchsorted(keys, cell), len(keys) - 1)
            assert (keys[pos] == cell).all()
            counts += np.bincount(pos, minlength=len(keys))
        seg_steps = {m["index"]: m["steps"] for m in lake.manifest["segments"]}
    step, last = np.array([c[5] for c in cells]), np.array([seg_steps[c[4]] - 2 for c in cells])  # last valid step
    categories = {
        "first steps of a segment": step < L // 2,
        "last steps of a segment": step > last - L // 2,
        "group b (48-step segments)": np.array([c[0] == "b" for c in cells]),
        "segments with fewer valid steps than a slice": last + 1 < L,
    }
    for name, mask in categories.items():
        if 50 <= mask.sum() <= len(cells) - 50:
            ratio = counts[mask].mean() / counts[~mask].mean()
            assert 0.95 < ratio < 1.05, f"{name}: {ratio:.3f} times as often as the rest"
        else:
            assert name == "segments with fewer valid steps than a slice" and L == 12, (name, mask.sum())
    assert counts.min() > 0


def test_sample_slices_are_valid_and_exact(uniform_lake):
    path, synths, sessions = uniform_lake
    valid = set()
    with Lake(path, mode="r") as lake:
        valid = {c[1:4] for c in _uniform_cells(lake, synths, sessions)}
        sl = lake.sample_slices(64, 20, rng=np.random.default_rng(4))
    M = len(sl.actions)
    assert M >= 64 * 20 // 2 and M <= 64 * 20
    assert sl.frames.shape[1:] == (4, 4) and sl.frames.dtype == np.uint8 and len(sl.obs_start) == M
    obs = sl.frames[sl.obs_start[:, None] + np.arange(S)]
    nxt = sl.frames[sl.obs_start[:, None] + 1 + np.arange(S)]
    ids = synths["a"].decode_many(obs[:, -1])
    for g, synth in synths.items():
        m = np.isin(ids[:, 0], [1, 2] if g == "a" else [11])
        synth.check_transitions(
            ids[m, 0],
            ids[m, 1],
            ids[m, 2],
            obs[m],
            nxt[m],
            sl.actions[m],
            sl.rewards[m],
            sl.terminated[m],
            sl.truncated[m],
        )
    assert all((int(s), int(n), int(t)) in valid for s, n, t, _ in ids)
    # Bytes: frames stored once, so a slice of k transitions reads about k + stack frames, not 2 * stack * k.
    assert len(sl.frames) <= M + 64 * 4 * S


# ---------------------------------------------------------------------- 3. FIFO eviction
def test_fifo_eviction(tmp_path):
    path = tmp_path / "lake"
    synth = Synth((4, 4), 2, episode_len=12, seed=4)
    cap, seg_steps = 300, 32  # 32 steps of 2 streams per segment
    reader = None
    with Lake(path, frame_shape=(4, 4), capacity=cap, segment_bytes=seg_steps * 2 * 16) as lake:
        t = 0
        while t < 1000:
            t = append_steps(lake, "g", synth, 1, t, t + 10, seed=t)
            lake.commit(wait=True)
            assert lake.num_transitions <= cap + seg_steps * 2
            on_disk = segment_files(path)
            assert on_disk == {m["file"] for m in lake.manifest["segments"]}, "evicted segments must be deleted"
            if reader is None:
                reader = Lake(path, mode="r")  # opened early: sees evictions on refresh
        evicted = lake.stats()["evicted_steps"]
        assert evicted >= 1000 * 2 - cap - seg_steps * 2
        assert cap - seg_steps * 2 < lake.num_transitions <= cap + seg_steps * 2
        assert "segment_000000.h5" not in segment_files(path)
        assert len(segment_files(path)) <= cap // (seg_steps * 2) + 2
        # What survives is the newest data, exact and complete from its first step on.
        for n in range(2):
            b = lake.read_stream("g", n)
            ids = synth.decode_many(b.obs[:, -1])
            first = int(ids[0, 2])
            assert first >= 1000 - (cap + seg_steps * 2) // 2 - seg_steps
            every = np.arange(first, 999)
            every = every[~synth.episode_start(1, n, every + 1)]
            np.testing.assert_array_equal(ids[:, 2], every)
            synth.check_transitions(1, n, ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated)
        survivors = {m["index"] for m in lake.manifest["segments"]}
        firsts = {n: int(synth.decode_many(lake.read_stream("g", n).obs[:1, -1])[0, 2]) for n in range(2)}
        for lk in (lake, reader):
            lk.refresh()
            b = lk.sample(2000, rng=np.random.default_rng(1))
            assert set(b.where[:, 0].tolist()) <= survivors
            ids = synth.decode_many(b.obs[:, -1])
            assert all(t >= firsts[n] for _, n, t, _ in ids), "sampled an evicted transition"
            assert synth.valid(1, ids[:, 1], ids[:, 2], 1000).all()
            synth.check_transitions(
                1, ids[:, 1], ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
            )
        assert reader.num_transitions == lake.num_transitions
    reader.close()
    # Reopening keeps the surviving data.
    with Lake(path, mode="r") as lake:
        assert cap - seg_steps * 2 < lake.num_transitions <= cap + seg_steps * 2


def _uncached_files(path: Path) -> set[str]:
    """Segment files of which one of the pages the reader probes is not in the page cache (a read that may not
    wait). The same pages as the reader's: a drop is partial at times (pages in another CPU's LRU batch stay), and a
    file whose probed pages all stay is warm to the reader, which reads it back only when one is gone."""
    out = set()
    for p in path.glob("segment_*"):
        fd = os.open(p, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for offset in range(0, size, max(4096, size // lake_module.READ_BACK_PROBES)):
                try:
                    os.preadv(fd, [bytearray(1)], offset, os.RWF_NOWAIT)
                except BlockingIOError:
                    out.add(p.name)
                    break
        finally:
            os.close(fd)
    return out


def test_a_cold_lake_is_read_back_whole_on_its_first_sample(tmp_path):
    """Segments the page cache dropped are read back whole, sequentially, by the next sample (not one random
    page per draw); the batch is the same as from a warm Lake."""
    path = tmp_path / "lake"
    synth = Synth((32, 32), 4, episode_len=40, seed=2)
    with Lake(path, frame_shape=(32, 32), segment_bytes=64 * 4 * 1024) as lake:  # 64 steps per segment
        append_steps(lake, "g", synth, 1, 0, 400)
    os.sync()  # written back: only clean pages can be dropped
    with Lake(path, mode="r") as lake:
        want = lake.sample(64, rng=np.random.default_rng(0))
        # The kernel drops pages on a best-effort basis (pages still in another CPU's LRU batch stay): ask again
        # until a few segments are cold. What is tested is that the sample reads back each one that is.
        for _ in range(20):
            lake.drop_page_cache()
            dropped = _uncached_files(path)
            if len(dropped) >= 3:
                break
            time.sleep(0.05)
        if not dropped:
            pytest.skip("this file system keeps its pages: a cold Lake cannot be made here")
        got = lake.sample(64, rng=np.random.default_rng(0))
        assert not _uncached_files(path), "segments the sample did not read back"
    for f in ("obs", "next_obs", "actions", "rewards", "where"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f))


def test_sample_while_writing_and_evicting(tmp_path, monkeypatch):
    """The trainer samples while its appends are written and old segments evicted on the writer thread;
    a reader in the same process refreshes and samples meanwhile. Every draw is a valid, exact transition."""
    path = tmp_path / "lake"
    synth = Synth((8, 8), 4, episode_len=15, seed=13)
    with Lake(path, frame_shape=(8, 8), capacity=800, segment_bytes=20 * 4 * 64, read_threads=2) as lake:
        append_steps(lake, "g", synth, 1, 0, 10)
        lake.commit(wait=True)
        reader = Lake(path, mode="r", read_threads=2)
        t = 10
        for i in range(60):
            t = append_steps(lake, "g", synth, 1, t, t + 7, seed=i)
            lake.commit(wait=i % 5 == 0)
            for lk in (lake, reader):
                if lk is reader:
                    lk.refresh()
                b = lk.sample(128, rng=np.random.default_rng(i))
                ids = synth.decode_many(b.obs[:, -1])
                assert synth.valid(1, ids[:, 1], ids[:, 2], t).all()
                synth.check_transitions(
                    1, ids[:, 1], ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
                )
        assert lake.manifest["evicted_steps"] > 0
        reader.close()


def test_stats_while_another_process_writes(tmp_path):
    """stats() (and so `lake.py inspect`) on a live Lake: the writer replaces manifest.json and deletes
    evicted segments all the time; a reader's stats() must not fail on a file that vanished meanwhile."""
    path = tmp_path / "lake"
    cfg = dict(
        path=str(path),
        frame_shape=[8, 8],
        num_streams=2,
        session=1,
        segment_bytes=16 * 2 * 64,
        max_T=1,
        capacity=200,
        group="g",
    )
    w = popen_proc("write", cfg)
    timer = watchdog(w)
    try:
        assert w.stdout.readline().startswith("ready")
        assert w.stdout.readline().startswith("C ")
        errors, calls = [], 0
        with Lake(path, mode="r") as r:
            t0 = time.time()
            while time.time() - t0 < 2.0 and len(errors) < 3:
                calls += 1
                r.refresh()
                try:
                    s = r.stats()
                    assert 0 < s["transitions"] <= r.num_transitions and s["disk_bytes"] > 0
                except OSError as e:
                    errors.append(repr(e))
        assert not errors, f"{len(errors)} of {calls} stats() calls failed: {errors[0]}"
    finally:
        timer.cancel()
        w.kill()
        w.wait()


def _evict_while_opening(monkeypatch, writer: Lake, synth: Synth, t: int, target: str) -> dict:
    """Make a reader's opening of sealed segment `target` race its eviction: once the reader holds the file's
    descriptor (in `_check_attributes`), the writer appends and commits until `target` is evicted and deleted."""
    check, state = lake_module._Segment._check_attributes, {"t": t, "evicted": False}

    def racing(seg, manifest):
        if seg.path.name == target and threading.current_thread() is threading.main_thread() and not state["evicted"]:
            while (writer.path / target).exists():
                state["t"] = append_steps(writer, "g", synth, 1, state["t"], state["t"] + 20, seed=state["t"])
                writer.commit(wait=True)
            state["evicted"] = True
        return check(seg, manifest)

    monkeypatch.setattr(lake_module._Segment, "_check_attributes", racing)
    return state


def _check_reader(reader: Lake, synth: Synth, t: int) -> None:
    b = reader.sample(500, rng=np.random.default_rng(0))
    ids = synth.decode_many(b.obs[:, -1])
    assert synth.valid(1, ids[:, 1], ids[:, 2], t).all()
    synth.check_transitions(1, ids[:, 1], ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated)


@pytest.mark.parametrize("when", ["open", "refresh"])
def test_a_segment_evicted_while_a_reader_opens_it_is_no_error(tmp_path, monkeypatch, when):
    """A reader in another process reads the manifest, opens a listed sealed segment, and the writer evicts it
    in between: the reader opens (or refreshes) without error, samples exact transitions, and the segment is
    gone from its view by its next refresh (a false LakeCorruptError before: the file was opened again by path)."""
    path = tmp_path / "lake"
    synth = Synth((8, 8), 2, episode_len=15, seed=21)
    with Lake(path, frame_shape=(8, 8), capacity=400, segment_bytes=16 * 2 * 64) as writer:
        t = append_steps(writer, "g", synth, 1, 0, 100)
        writer.commit(wait=True)
        reader = Lake(path, mode="r") if when == "refresh" else None
        if reader is not None:  # a segment sealed after the reader opened: its refresh() is what opens it
            t = append_steps(writer, "g", synth, 1, t, t + 60, seed=1)
            writer.commit(wait=True)
        known = set() if reader is None else {s.meta["file"] for s in reader._segments}
        target = next(m["file"] for m in writer.manifest["segments"] if m["tails"] is None and m["file"] not in known)
        state = _evict_while_opening(monkeypatch, writer, synth, t, target)
        if reader is None:
            reader = Lake(path, mode="r")
        else:
            reader.refresh()
        assert state["evicted"] and not (path / target).exists()
        _check_reader(reader, synth, state["t"])  # what it holds, evicted or not, reads exact
        reader.refresh()
        assert target not in {s.meta["file"] for s in reader._segments}
        assert reader.num_transitions == writer.num_transitions
        _check_reader(reader, synth, state["t"])
        reader.close()


def test_readers_in_other_processes_reopen_while_the_writer_evicts(tmp_path):
    """The issue's stress run, bounded: a writer appends, commits and evicts (small capacity and segments)
    while two reader processes open the Lake again and again, sample, read every stream and refresh: 0 errors,
    0 wrong transitions."""
    path = tmp_path / "lake"
    cfg = dict(
        path=str(path),
        frame_shape=[8, 8],
        num_streams=2,
        session=1,
        segment_bytes=8 * 2 * 64,
        max_T=2,
        capacity=120,
        group="g",
    )
    w = popen_proc("write", cfg)
    timer = watchdog(w)
    readers = []
    try:
        assert w.stdout.readline().startswith("ready")
        assert w.stdout.readline().startswith("C ")
        readers = [popen_proc("reopen", {**cfg, "seconds": 3.0}) for _ in range(2)]
        reports = [json.loads(r.communicate(timeout=60)[0].strip().splitlines()[-1]) for r in readers]
    finally:
        timer.cancel()
        for p in [w, *readers]:
            p.kill()
            p.wait()
    for rep in reports:
        assert rep["opens"] >= 5 and rep["refreshes"] >= 5, rep
        assert rep["errors"] == [], rep
        assert rep["wrong"] == 0 and rep["checked"] > 0, rep
    assert json.loads((path / "manifest.json").read_text())["evicted_steps"] > 0


# ---------------------------------------------------------------------- 4. resume after a clean close
def test_resume_after_clean_close(tmp_path):
    path = tmp_path / "lake"
    synth = Synth((7, 3), 2, episode_len=10, seed=5)
    kw = dict(frame_shape=(7, 3), segment_bytes=16 * 2 * 21)  # 16 steps per segment
    sessions = []
    # Session lengths: exactly one full segment (the resume then rolls over first), a rollover, a single
    # step, an empty session (open, close), and a longer one.
    for session, steps in [(1, 16), (2, 20), (3, 1), (4, 0), (5, 45)]:
        with Lake(path, **kw) as lake:
            append_steps(lake, "g", synth, session, 0, steps, seed=session)
        sessions.append((session, steps, steps))
        with Lake(path, mode="r") as r:
            found, where = verify_group(r, synth, "g", sessions)
    # No transition across a resume: the last step of each session has no successor.
    for (s, _), got in found.items():
        steps = dict((a, b) for a, b, _ in sessions)[s]
        assert steps - 1 not in got
    # Opening without frame_shape (it is in the manifest) resumes too; data written later stays exact.
    with Lake(path) as lake:
        assert lake.frame_shape == (7, 3) and lake.stack_size == S
        append_steps(lake, "g", synth, 6, 0, 30, seed=6)
        lake.commit(wait=True)
        verify_group(lake, synth, "g", sessions + [(6, 30, 30)])


def test_appended_buffers_may_be_reused(tmp_path):
    """append copies what it needs: overwriting the caller's arrays before the writer runs changes nothing."""
    synth = Synth((4, 4), 3, episode_len=6, seed=6)
    with Lake(tmp_path / "lake", frame_shape=(4, 4), segment_bytes=16 * 3 * 16, queue_size=64) as lake:
        t = 0
        for T in [1, 5, 16, 3, 9, 2, 30, 1]:
            batch = [np.array(x) for x in synth.batch(1, t, T)]
            lake.append("g", *batch)
            for x in batch:
                x[...] = 0 if x.dtype != bool else True
            t += T
        lake.commit(wait=True)
        verify_group(lake, synth, "g", [(1, t, t)])


def test_concurrent_appends_from_four_agents_come_back_bit_exact(tmp_path):
    """Four threads, one group each (four agents draining their Ponds at once), appending and committing while the
    writer runs: every transition of every group is back, bit for bit, in order."""
    synths = [Synth((4, 4), 3, episode_len=7 + k, seed=20 + k) for k in range(4)]
    with Lake(tmp_path / "lake", frame_shape=(4, 4), segment_bytes=16 * 3 * 24, queue_size=4) as lake:
        start = threading.Barrier(4)

        def agent(k: int) -> None:
            start.wait()
            for t0 in range(0, 400, 40):
                append_steps(lake, f"agent{k}", synths[k], 1, t0, t0 + 40, seed=k * 1000 + t0)
                lake.commit()

        threads = [threading.Thread(target=agent, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lake.commit(wait=True)
        assert lake.num_transitions > 0
        for k, synth in enumerate(synths):
            found, _ = verify_group(lake, synth, f"agent{k}", [(1, 400, 400)])
            assert all(len(found[(1, n)]) > 300 for n in range(3))


# ---------------------------------------------------------------------- 5. SIGKILL at random moments
def test_sigkill_never_loses_a_committed_transition(tmp_path):
    """30 writers killed with SIGKILL at random moments: while appending (every append compresses chunks),
    committing, rolling segments over, and sealing them (the writers slow the build of a sealed file, so that
    kills land inside it; five are killed inside one for certain); the next opens find every committed transition,
    exact."""
    path = tmp_path / "lake"
    # Frames of 20x21 bytes straddle pages; 40 steps per segment, so kills also land in segment rollovers.
    synth = Synth((20, 21), 3, episode_len=25, seed=0)
    base = dict(
        path=str(path),
        frame_shape=[20, 21],
        num_streams=3,
        segment_bytes=40 * 3 * 20 * 21,
        max_T=4,
        episode_len=25,
        synth_seed=0,
        group="g",
    )
    rng = np.random.default_rng(20240601)
    sessions, killed_writing, killed_sealing = [], 0, 0
    for trial in range(30):
        session = trial + 1
        cfg = dict(base, session=session, seed=trial, fsync_every=2 if trial % 4 == 3 else 0, slow_seal=trial % 2 == 0)
        in_seal = trial % 6 == 0  # killed inside a seal for certain (the writer says when, then waits): a loaded
        cfg.update(say_seal=in_seal, seal_pause=30.0 if in_seal else 0.04)  # machine's timings vary too much
        in_start_up = trial % 6 == 5  # somewhere in start-up: imports, opening, resuming, first writes
        p = popen_proc("write", cfg)
        timer = watchdog(p)
        try:
            out = ""
            if in_seal:
                while not out.endswith("S\n"):
                    line = p.stdout.readline()
                    assert line, "the writer died before its first seal"
                    out += line
            elif in_start_up:
                time.sleep(rng.uniform(0.05, 0.7))
            else:  # while appending and committing (and rolling segments over), once the first commit is out
                while not out.startswith("C "):
                    out = p.stdout.readline()
                    assert out, "the writer died before its first commit"
                time.sleep(rng.uniform(0.0, 0.3))
            p.send_signal(signal.SIGKILL)
            out += p.stdout.read()
        finally:
            timer.cancel()
            p.kill()
            p.wait()
        assert p.returncode == -signal.SIGKILL, f"writer exited by itself ({p.returncode}): {out[-2000:]}"
        commits = [int(line[2:]) for line in out.splitlines() if line.startswith("C ")]
        lo = max(commits, default=0)
        killed_writing += lo > 0 and not in_start_up  # start-up kills reach a commit only on an idle machine
        listed = {m["file"] for m in json.loads((path / "manifest.json").read_text())["segments"]}
        killed_sealing += any(
            p.name.endswith(".h5.tmp") or (p.suffix == ".h5" and p.name not in listed) for p in path.iterdir()
        )
        sessions.append((session, lo, None))
        with Lake(path, mode="r") as r:  # every transition reported committed reads back exactly
            verify_group(r, synth, "g", sessions)
    assert killed_writing >= 20, "the writer was rarely killed while writing: the test would prove little"
    assert killed_sealing >= 3, f"only {killed_sealing} kills landed while a segment was sealed"
    # Appending resumes: a writer opens (the lock of the killed one is gone), leftovers are cleaned up,
    # new steps commit, and everything reads back.
    with Lake(path, frame_shape=(20, 21), segment_bytes=base["segment_bytes"]) as lake:
        assert not list(path.glob("*.tmp"))
        assert segment_files(path) == {m["file"] for m in lake.manifest["segments"]}
        append_steps(lake, "g", synth, 99, 0, 50)
        lake.commit(wait=True)
        found, _ = verify_group(lake, synth, "g", sessions + [(99, 50, 50)])
    assert sum(len(v) for (s, _), v in found.items() if s != 99) > 1000


# ---------------------------------------------------------------------- 6. one writer, many readers


# ---------------------------------------------------------------------- 7. disk full


# ---------------------------------------------------------------------- 8. bad inputs
# ---------------------------------------------------------------------- 9. command line
def _episodes(synth: Synth, session: int, steps: int) -> list[float]:
    """Returns of the complete episodes (from one reset obs to the next) of a single Lake session."""
    out = []
    for n in range(synth.N):
        t = np.arange(steps)
        starts = t[synth.episode_start(session, n, t)]
        r = synth.rewards(session, n, t).astype(np.float64)
        out += [float(r[a:b].sum()) for a, b in zip(starts[:-1], starts[1:])]
    return out


def test_cli_inspect_and_help(tmp_path):
    path = tmp_path / "lake"
    synth = Synth((6, 6), 2, episode_len=9, seed=8)
    with Lake(path, frame_shape=(6, 6), env_id="Synth-v0") as lake:  # one segment: no carried steps
        append_steps(lake, 3, synth, 1, 0, 200)
    returns = _episodes(synth, 1, 200)
    res = subprocess.run(
        [sys.executable, "lake.py", "inspect", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Synth-v0" in out and "400 steps" in out, out
    m = re.search(r"agent 3: 2 streams, 400 steps, (\d+) episodes, return mean (-?[\d.]+)", out)
    assert m, out
    assert int(m.group(1)) == len(returns) and abs(float(m.group(2)) - np.mean(returns)) < 0.01, (
        out,
        len(returns),
        np.mean(returns),
    )
    res = subprocess.run([sys.executable, "lake.py", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0 and "inspect" in res.stdout, res.stderr
    # The compression ratio: the frames and records raw over the bytes on disk, as stats() counts them.
    with Lake(path, mode="r") as lake:
        st = lake.stats()
    ratio = re.search(r"([\d.]+)x smaller than its frames and records raw", out)
    assert ratio and abs(float(ratio.group(1)) - st["raw_bytes"] / st["disk_bytes"]) < 0.06, out
    # A user's mistake: one line, exit code 2, no traceback.
    res = subprocess.run(
        [sys.executable, "lake.py", "inspect", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 2 and "not a Lake" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = subprocess.run(
        [sys.executable, "lake.py", "fill", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert res.returncode == 0 and "steps of every env" in res.stdout and "envs stepped together" in res.stdout, (
        res.stdout
    )


def test_cli_fill(tmp_path):
    path = tmp_path / "filled"
    res = subprocess.run(
        [sys.executable, "lake.py", "fill", str(path), "--steps", "100", "--num-envs", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "agent 0: 2 streams, 200 steps" in res.stdout, res.stdout
    with Lake(path, mode="r") as lake:
        assert lake.num_transitions == 200 and lake.manifest["env_id"] == "Breakout-v5"
        b = lake.sample(16)
        assert b.obs.shape == (16, 4, 84, 84)


# ---------------------------------------------------------------------- 10. torch tensors
def test_torch_append_and_sample(tmp_path):
    import torch

    synth = Synth((6, 6), 3, episode_len=8, seed=10)
    kw = dict(frame_shape=(6, 6), segment_bytes=20 * 3 * 36)
    a, b, mix = Lake(tmp_path / "np", **kw), Lake(tmp_path / "th", **kw), Lake(tmp_path / "mix", **kw)
    t = 0
    for T in [1, 5, 16, 2, 9, 30, 1, 7, 22]:
        batch = synth.batch(1, t, T)
        if T == 1:
            batch = tuple(x[0] for x in batch)
        a.append("x", *batch)
        tensors = [torch.from_numpy(np.ascontiguousarray(x)).clone() for x in batch]
        b.append("x", *tensors)
        # a trainer's obs may be a tensor while its scalars are numpy arrays, or the other way round
        mixed = [x if (i == 0) == (T % 2 == 0) else x.numpy().copy() for i, x in enumerate(tensors)]
        mix.append("x", *mixed)
        for x in tensors:  # the Lake copied what it needs
            x.zero_()
        t += T
    for lake in (a, b, mix):
        lake.close()
    ma, mb, mm = (json.loads((tmp_path / d / "manifest.json").read_text())["segments"] for d in ("np", "th", "mix"))
    assert [m["steps"] for m in ma] == [m["steps"] for m in mb] == [m["steps"] for m in mm] and len(ma) >= 3
    for m in ma:
        for other in ("th", "mix"):
            if m["file"].endswith(".journal"):  # the open segment: written the same way, byte for byte
                assert (tmp_path / "np" / m["file"]).read_bytes() == (tmp_path / other / m["file"]).read_bytes()
                continue
            with h5py.File(tmp_path / "np" / m["file"], "r") as ha, h5py.File(tmp_path / other / m["file"], "r") as hb:
                np.testing.assert_array_equal(ha["records"][:, : m["steps"]], hb["records"][:, : m["steps"]])
                ends = ha["records"][:, m["steps"] - 1]["frame_end"]
                for n in range(3):
                    np.testing.assert_array_equal(ha["frames"][n, : ends[n]], hb["frames"][n, : ends[n]])
    with Lake(tmp_path / "th", mode="r") as lake, Lake(tmp_path / "np", mode="r") as lake_np:
        verify_group(lake, synth, "x", [(1, t, t)])
        s = lake.sample(64, rng=np.random.default_rng(0), torch=True)
        ref = lake_np.sample(64, rng=np.random.default_rng(0))
        for f, dtype in [
            ("obs", torch.uint8),
            ("next_obs", torch.uint8),
            ("actions", torch.int64),
            ("rewards", torch.float32),
            ("terminated", torch.bool),
            ("truncated", torch.bool),
        ]:
            v = getattr(s, f)
            assert isinstance(v, torch.Tensor) and v.dtype == dtype and v.device.type == "cpu", (f, type(v))
            np.testing.assert_array_equal(v.numpy(), getattr(ref, f))
        assert tuple(s.obs.shape) == (64, S, 6, 6) and tuple(s.next_obs.shape) == (64, S, 6, 6)
