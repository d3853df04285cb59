"""Tests of how the Lake (lake.py) treats bad input: foreign directories, damaged manifests, degenerate read
requests, values that do not fit the stored types, and closing after the writer failed.

Only the Lake's public API is used (and manifest.json as a JSON file), so the tests hold for any on-disk
format. Synthetic streams (tests/lake_synth.py) name themselves in their frames, so what is read back can be
checked against the truth.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from lake import Lake, LakeCorruptError, LakeError, LakeLockedError, LakeMismatchError
from lake_helpers import append_steps, popen_proc, run_proc, small_lake, verify_group, watchdog
from lake_synth import Synth

ROOT = Path(__file__).resolve().parent.parent
FRAME = (6, 6)
S = 4  # the default stack size
SMALL_SEGMENTS = 16 * 2 * 36  # segment_bytes: a segment of 16 steps of two 6x6 streams (today's format)


# ---------------------------------------------------------------------- helpers
def append_fixed_chunks(lake: Lake, group: str, synth: Synth, session: int, t0: int, t1: int, chunk: int = 4) -> int:
    for t in range(t0, t1, chunk):
        lake.append(group, *synth.batch(session, t, min(chunk, t1 - t)))
    return t1


def check_group(lake: Lake, synth: Synth, group: str, sessions: list[tuple[int, int]]) -> None:
    """read_stream of every stream of `group` holds exactly the valid transitions of the `(session, committed
    steps)` written in this order, bit for bit, and nothing else."""
    order = {s: i for i, (s, _) in enumerate(sessions)}
    for n in range(synth.N):
        b = lake.read_stream(group, n)
        ids = synth.decode_many(b.obs[:, -1]) if len(b.obs) else np.zeros((0, 4), np.int64)
        assert set(ids[:, 0].tolist()) <= set(order) and (ids[:, 1] == n).all(), f"stream {n}: foreign transitions"
        key = np.array([order[s] for s in ids[:, 0].tolist()], np.int64) * 10**6 + ids[:, 2]
        assert (np.diff(key) > 0).all(), f"stream {n}: transitions out of order or repeated"
        synth.check_transitions(
            ids[:, 0], n, ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated
        )
        for session, committed in sessions:
            want = np.arange(committed)
            want = want[synth.valid(session, n, want, committed)]
            np.testing.assert_array_equal(ids[ids[:, 0] == session, 2], want, err_msg=f"stream {n}, session {session}")


def files_below(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def mentions_number(text: str, number: int) -> bool:
    """Whether `number` appears in `text` as a number of its own (not as a digit of a longer one)."""
    return re.search(rf"(?<![\d-]){re.escape(str(number))}(?!\d)", text) is not None


# ---------------------------------------------------------------------- 1. foreign directories and files
def test_a_lake_is_created_only_in_a_missing_or_empty_directory(tmp_path):
    """A directory that holds other files and no manifest.json is not a Lake: opening it must not turn it into
    one, nor remove any of its files (today a Lake is created among them and every *.tmp file is deleted)."""
    with Lake(tmp_path / "missing", frame_shape=FRAME) as lake:  # a missing directory is created
        assert lake.num_transitions == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    with Lake(empty, frame_shape=FRAME) as lake:
        assert lake.num_transitions == 0

    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "draft.tmp").write_bytes(b"work\n")
    (work / "notes.txt").write_bytes(b"my notes\n")
    (work / "sub" / "data.bin").write_bytes(bytes(range(256)))
    before = files_below(work)
    with pytest.raises(LakeCorruptError):
        Lake(work, mode="r")
    assert files_below(work) == before, "a read-only open of a non-Lake directory changed it"
    with pytest.raises(LakeCorruptError) as err:
        Lake(work, frame_shape=FRAME)
    assert str(work) in str(err.value), f"the message must name the directory: {err.value}"
    assert files_below(work) == before, "the user's files must be untouched, and no Lake file left behind"
    assert not (work / "manifest.json").exists() and not (work / "writer.lock").exists()


def test_reopening_a_lake_never_removes_a_users_files(tmp_path):
    """Cleanup of a crash's leftovers on open must only remove files the Lake itself could have made; today every
    *.tmp file in the directory goes."""
    path = tmp_path / "lake"
    synth = Synth(FRAME, 2, episode_len=9, seed=8)
    with Lake(path, frame_shape=FRAME, segment_bytes=SMALL_SEGMENTS) as lake:
        append_fixed_chunks(lake, "g", synth, 1, 0, 40)
    user = {"draft.tmp": b"work\n", "notes.tmp": b"remember the milk\n", "segment_notes.txt": b"segments are fun\n"}
    for name, data in user.items():
        (path / name).write_bytes(data)
    with Lake(path, frame_shape=FRAME, segment_bytes=SMALL_SEGMENTS) as lake:
        append_fixed_chunks(lake, "g", synth, 2, 0, 24)
        lake.commit(wait=True)
    for name, data in user.items():
        assert (path / name).exists(), f"{name} was removed"
        assert (path / name).read_bytes() == data, f"{name} was changed"
    with Lake(path, mode="r") as lake:
        check_group(lake, synth, "g", [(1, 40), (2, 24)])


# ---------------------------------------------------------------------- 2. malformed manifest entries
# Keys whose unreadable value may also be reported as a settings mismatch (LakeMismatchError).
SETTINGS_KEYS = {"format_version", "frame_shape", "frame_dtype", "stack_size", "chunk_frames"}


@pytest.fixture(scope="module")
def manifest_lake(tmp_path_factory) -> tuple[Path, dict]:
    """A closed Lake with at least two sealed segments and an open one, and its manifest."""
    path = tmp_path_factory.mktemp("template") / "lake"
    synth = Synth(FRAME, 2, episode_len=9, seed=8)
    with Lake(path, frame_shape=FRAME, env_id="Synth-v0", segment_bytes=SMALL_SEGMENTS) as lake:
        t = 0
        while len(lake.manifest["segments"]) < 3 and t < 4000:  # however large the format makes a segment
            t = append_fixed_chunks(lake, "g", synth, 1, t, t + 8)
            lake.commit(wait=True)
    manifest = json.loads((path / "manifest.json").read_text())
    segments = manifest["segments"]
    assert len(segments) >= 3, "the template Lake needs three segments"
    if all("sealed" in m for m in segments):
        assert [m["sealed"] for m in segments] == [True] * (len(segments) - 1) + [False]
    return path, manifest


def bad_values(value, huge: bool) -> dict[str, object]:
    """Values that are wrong for a manifest entry whose good value is `value`: always one of another JSON type;
    for counts (integers) also -1 and, where `huge`, 10**15 (no count, offset or size of a small Lake is)."""
    if isinstance(value, bool):
        return {"wrong type": "oops"}
    if isinstance(value, int):
        return {"wrong type": "oops", "negative": -1, **({"huge": 10**15} if huge else {})}
    if isinstance(value, float):
        return {"wrong type": "oops"}
    if isinstance(value, str):
        return {"wrong type": ["oops"]}
    if isinstance(value, list):
        out: dict[str, object] = {"wrong type": "oops"}
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            out["negative element"] = [-1, *value[1:]]  # e.g. a frame_shape of [-1, 6]
        return out
    if isinstance(value, dict):
        return {"wrong type": "oops", "a list": []}
    return {"wrong type": {"oops": [1]}}  # null in the good manifest: an object is not what it holds


class ManifestCases:
    """Opens copies of the template Lake with damaged manifests and collects what went wrong."""

    def __init__(self, template: Path, root: Path):
        self.template, self.root, self.count = template, root, 0
        self.problems: list[str] = []

    def check(
        self, name: str, manifest: dict, key: str, mismatch_ok: bool = False, segment: tuple | None = None
    ) -> None:
        """Both a reader and a writer must refuse `manifest` with LakeCorruptError (or LakeMismatchError where
        `mismatch_ok`) whose message names `key`, and for a segment entry `segment` = (position, good entry)
        the segment too."""
        self.count += 1
        case = self.root / f"case{self.count}"
        shutil.copytree(self.template, case)  # a fresh copy: a failed writable open may have changed the last
        (case / "manifest.json").write_text(json.dumps(manifest, indent=1))
        allowed = (LakeCorruptError, LakeMismatchError) if mismatch_ok else (LakeCorruptError,)
        for mode, kwargs in (("r", {}), ("a", {"frame_shape": FRAME})):
            where = f"{name} (mode={mode!r})"
            try:
                lake = Lake(case, mode=mode, **kwargs)
            except allowed as e:
                err = e
            except Exception as e:
                self.problems.append(f"{where}: {type(e).__name__}: {e}")
                continue
            else:
                try:
                    lake.close()
                except Exception:
                    pass
                self.problems.append(f"{where}: opened without an error")
                continue
            msg = str(err).replace(str(case), "<lake>")  # the path must not name the key for it
            if not re.search(rf"\b{re.escape(key)}\b", msg):
                self.problems.append(f"{where}: the message does not name {key!r}: {type(err).__name__}: {msg}")
            if segment is not None and not names_segment(msg, *segment):
                self.problems.append(f"{where}: the message does not name the segment: {type(err).__name__}: {msg}")

    def assert_none(self) -> None:
        if self.problems:  # all of them at once, without pytest's repr of the list
            pytest.fail(
                f"{len(self.problems)} of {2 * self.count} opens of a damaged manifest went wrong:\n"
                + "\n".join(self.problems[:100]),
                pytrace=False,
            )


def names_segment(msg: str, position: int, good: dict) -> bool:
    """Whether `msg` names the segment by its file name (any string of its good entry that looks like one) or by
    its index ("segments[1]", "segment 1", "segment #1", "segment_000001")."""
    names = [v for v in good.values() if isinstance(v, str) and "." in v]
    indices = {position} | ({good["index"]} if isinstance(good.get("index"), int) else set())
    return any(n in msg for n in names) or any(
        re.search(rf"segment(s|_)?\W{{0,3}}0*{i}(?!\d)", msg, re.IGNORECASE) for i in indices
    )


def test_every_malformed_top_level_manifest_key_is_a_corrupt_lake(manifest_lake, tmp_path):
    """Every top-level key of manifest.json, deleted or with a wrong value, must give LakeCorruptError naming it
    (today some give KeyError, ValueError or TypeError, and some open without a word)."""
    template, good = manifest_lake
    cases = ManifestCases(template, tmp_path)
    for key, value in good.items():
        mismatch_ok = key in SETTINGS_KEYS
        damaged = dict(good)
        del damaged[key]
        cases.check(f"{key} deleted", damaged, key, mismatch_ok)
        for what, bad in bad_values(value, huge=False).items():
            cases.check(f"{key} {what} ({bad!r})", {**good, key: bad}, key, mismatch_ok)
    # ("segments": "oops" and "groups": [] are among the bad values above.)
    cases.check("segments [1]", {**good, "segments": [1]}, "segments")
    # Each group's entry, key by key.
    for group, entry in good["groups"].items():
        assert isinstance(entry, dict) and entry, "a group's entry is expected to be an object"
        cases.check(f"groups[{group!r}] 'oops'", {**good, "groups": {**good["groups"], group: "oops"}}, "groups")
        for key, value in entry.items():
            damaged = {k: v for k, v in entry.items() if k != key}
            cases.check(f"groups[{group!r}].{key} deleted", {**good, "groups": {**good["groups"], group: damaged}}, key)
            for what, bad in bad_values(value, huge=False).items():
                cases.check(
                    f"groups[{group!r}].{key} {what} ({bad!r})",
                    {**good, "groups": {**good["groups"], group: {**entry, key: bad}}},
                    key,
                )
    cases.assert_none()


def test_every_malformed_segment_entry_is_a_corrupt_lake(manifest_lake, tmp_path):
    """Every key of a segment entry (of the first and a middle sealed segment, and the open one), deleted, of a
    wrong type, or an integer out of range (-1, 10**15), must give LakeCorruptError naming the key and the
    segment (today: KeyError, TypeError, a 'truncated' message naming no key, or no error at all)."""
    template, good = manifest_lake
    cases = ManifestCases(template, tmp_path)
    segments = good["segments"]
    for pos in sorted({0, 1, len(segments) - 1}):
        entry = segments[pos]
        assert isinstance(entry, dict) and entry

        def with_entry(new: dict, pos=pos) -> dict:
            return {**good, "segments": [new if i == pos else m for i, m in enumerate(segments)]}

        cases.check(f"segments[{pos}] 'oops'", with_entry("oops"), "segments")
        for key, value in entry.items():
            cases.check(
                f"segments[{pos}].{key} deleted",
                with_entry({k: v for k, v in entry.items() if k != key}),
                key,
                segment=(pos, entry),
            )
            for what, bad in bad_values(value, huge=True).items():
                cases.check(
                    f"segments[{pos}].{key} {what} ({bad!r})",
                    with_entry({**entry, key: bad}),
                    key,
                    segment=(pos, entry),
                )
    cases.assert_none()


# ---------------------------------------------------------------------- 3. degenerate read requests
@pytest.fixture(scope="module")
def read_lake(tmp_path_factory) -> Path:
    """Two groups: "alpha" with 3 streams, "beta" with 2."""
    path = tmp_path_factory.mktemp("reads") / "lake"
    with Lake(path, frame_shape=FRAME) as lake:
        append_fixed_chunks(lake, "alpha", Synth(FRAME, 3, episode_len=9, seed=1), 1, 0, 24)
        append_fixed_chunks(lake, "beta", Synth(FRAME, 2, episode_len=9, seed=2), 1, 0, 24)
    return path


def test_sample_of_zero_returns_an_empty_batch(read_lake):
    """Today sample(0) raises a TypeError from memoryview."""
    with Lake(read_lake, mode="r") as lake:
        b = lake.sample(0)
        assert b.obs.shape == (0, S, *FRAME) and b.next_obs.shape == (0, S, *FRAME) and b.obs.dtype == np.uint8
        for name in ("actions", "rewards", "terminated", "truncated"):
            assert len(getattr(b, name)) == 0, name
        b = lake.sample(0, torch=True)
        assert isinstance(b.obs, torch.Tensor) and tuple(b.obs.shape) == (0, S, *FRAME)
        assert tuple(b.next_obs.shape) == (0, S, *FRAME)
        for name in ("actions", "rewards", "terminated", "truncated"):
            assert len(getattr(b, name)) == 0, name
        assert len(lake.sample(3).obs) == 3  # and sampling goes on


def test_sample_of_negative_size_names_batch_size(read_lake):
    with Lake(read_lake, mode="r") as lake:
        with pytest.raises(ValueError, match="batch_size"):
            lake.sample(-1)


def test_sample_slices_of_zero_returns_empty_slices(read_lake):
    with Lake(read_lake, mode="r") as lake:
        sl = lake.sample_slices(0, 16)
        assert sl.frames.shape == (0, *FRAME)
        for name in ("obs_start", "actions", "rewards", "terminated", "truncated"):
            assert len(getattr(sl, name)) == 0, name
        assert len(lake.sample_slices(2, 16).obs_start) > 0


def test_read_stream_of_an_unknown_group_names_the_known_groups(read_lake):
    """Today an unknown group reads as an empty stream: a typo would look like a Lake without data."""
    with Lake(read_lake, mode="r") as lake:
        with pytest.raises(ValueError) as err:
            lake.read_stream("gamma", 0)
        msg = str(err.value).replace(str(read_lake), "<lake>")
        assert "gamma" in msg and "alpha" in msg and "beta" in msg, msg


@pytest.mark.parametrize("stream", [3, 5, -1])
def test_read_stream_index_out_of_range_names_the_valid_range(read_lake, stream):
    """Group "alpha" has 3 streams; today a stream past them reads as a truncated segment (or as garbage)."""
    with Lake(read_lake, mode="r") as lake:
        with pytest.raises(ValueError) as err:
            lake.read_stream("alpha", stream)
        msg = str(err.value).replace(str(read_lake), "<lake>")
        assert mentions_number(msg, stream), f"the message must name the index {stream}: {msg}"
        # (for index 3 this holds anyway; for 5 and -1 it asks for the range: "0..2", "[0, 3)", "3 streams", ...)
        assert mentions_number(msg, 3) or mentions_number(msg, 2), (
            f"the message must name the range of 3 streams: {msg}"
        )
        assert len(lake.read_stream("alpha", 2).obs) > 0  # the last stream is in range


# ---------------------------------------------------------------------- 4. values that do not fit the stored types
def _bad_batches(synth: Synth) -> list[tuple[str, str, tuple]]:
    """(field, what, batch) for batches of 4 steps of 2 streams, each with one value the Lake cannot store
    (at step 2 of stream 1, so a check of only the first value would miss it)."""
    obs, a, r, te, tr, es = synth.batch(1, 0, 4)
    out = []
    for what, bad in [("2**31", 2**31), ("2**40", 2**40), ("-2**31 - 1", -(2**31) - 1)]:
        actions = a.astype(np.int64)
        actions[2, 1] = bad
        out.append(("actions", what, (obs, actions, r, te, tr, es)))
    for what, bad, dtype in [
        ("nan", np.nan, np.float32),
        ("inf", np.inf, np.float32),
        ("-inf", -np.inf, np.float32),
        ("1e40 as float64", 1e40, np.float64),
        ("-1e40 as float64", -1e40, np.float64),
    ]:
        rewards = r.astype(dtype)
        rewards[2, 1] = bad
        out.append(("rewards", what, (obs, a, rewards, te, tr, es)))
    return out


@pytest.mark.parametrize("inputs", ["numpy", "torch"])
def test_append_rejects_actions_and_rewards_the_lake_cannot_store(tmp_path, inputs):
    """Actions are stored as int32 and rewards as float32: today 2**31 wraps and 1e40 becomes inf, and NaN or
    inf rewards are stored as given. A rejected batch must leave nothing behind and the writer working."""
    convert = (lambda x: torch.from_numpy(np.ascontiguousarray(x))) if inputs == "torch" else (lambda x: x)
    synth = Synth(FRAME, 2, episode_len=9, seed=5)
    with Lake(tmp_path / "lake", frame_shape=FRAME, segment_bytes=1 << 16) as lake:
        for field, _, batch in _bad_batches(synth):
            with pytest.raises(LakeMismatchError, match=field):
                lake.append("g", *map(convert, batch))

        # Values at the edges of int32 and float32 fit, and float64 rewards in range are taken.
        edge = Synth(FRAME, 2, episode_len=9, seed=6)
        obs, a, r, te, tr, es = edge.batch(1, 0, 12)
        a, r = a.astype(np.int64), r.astype(np.float64)
        valid = [np.flatnonzero(edge.valid(1, n, np.arange(12), 12)) for n in range(2)]
        assert all(len(v) >= 2 for v in valid)
        a[valid[0][0], 0], a[valid[1][0], 1] = 2**31 - 1, -(2**31)
        r[valid[0][1], 0], r[valid[1][1], 1] = 3e38, -3e38
        lake.append("edge", *map(convert, (obs, a, r, te, tr, es)))

        # The good steps of session 1: all that "g" holds, exactly as if nothing had been rejected before.
        for t in range(0, 20, 4):
            lake.append("g", *map(convert, synth.batch(1, t, 4)))
        lake.commit(wait=True)
        check_group(lake, synth, "g", [(1, 20)])
        assert lake.num_transitions == 2 * 20 + 2 * 12
        for n in range(2):
            b = lake.read_stream("edge", n)
            steps = edge.decode_many(b.obs[:, -1])[:, 2]
            np.testing.assert_array_equal(steps, valid[n])
            np.testing.assert_array_equal(b.actions, a[steps, n])
            np.testing.assert_array_equal(b.rewards, r[steps, n].astype(np.float32))


# ---------------------------------------------------------------------- 5. closing after the writer failed
WRITER_FAILS = r'''
"""Write a Lake until RLIMIT_FSIZE makes its writer fail, close it, then report on fds, the lock and the data."""
import json, os, resource, signal, sys
from pathlib import Path
import numpy as np
from lake import Lake, LakeError
from lake_synth import Synth

def report(**kw):
    print(json.dumps(kw), flush=True)

path = Path(sys.argv[1]).resolve()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death by signal
synth = Synth((6, 6), 2, episode_len=9, seed=4)
settings = dict(frame_shape=(6, 6), segment_bytes=16 * 2 * 36)
lake = Lake(path, **settings)
t = committed = 0
for _ in range(8):
    lake.append("g", *synth.batch(1, t, 4))
    t += 4
    lake.commit(wait=True)
    committed = t
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
limit = max(p.stat().st_size for p in path.iterdir()) // 2
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
error = None
try:
    for _ in range(5000):
        lake.append("g", *synth.batch(1, t, 4))
        t += 4
        lake.commit(wait=True)
        committed = t
except LakeError as e:
    error = e  # kept, as a caller may keep it: the Lake must not rely on it being freed
report(what="failure", kind=type(error).__name__ if error else None, committed=committed, appended=t, limit=limit)
try:
    lake.close()
    report(what="close", kind=None)
except LakeError as e:
    report(what="close", kind=type(e).__name__, message=str(e))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
open_fds = []  # `lake` (the failed Lake) and `error` are still referenced here: nothing was freed for us
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the listing's own fd, closed meanwhile
        continue
    if target.startswith(str(path) + "/"):
        open_fds.append(target)
report(what="fds", open=sorted(open_fds))
try:
    again = Lake(path, **settings)
except LakeError as e:
    report(what="reopen", kind=type(e).__name__, message=str(e))
    sys.exit(0)
report(what="reopen", kind=None)
problems, transitions = [], 0
for n in range(2):
    b = again.read_stream("g", n)
    ids = synth.decode_many(b.obs[:, -1]) if len(b.obs) else np.zeros((0, 4), np.int64)
    transitions += len(ids)
    try:
        assert (ids[:, 0] == 1).all() and (ids[:, 1] == n).all() and (np.diff(ids[:, 2]) > 0).all()
        synth.check_transitions(1, n, ids[:, 2], b.obs, b.next_obs, b.actions, b.rewards, b.terminated, b.truncated)
        need = np.arange(committed)
        need = need[synth.valid(1, n, need, committed)]
        assert np.isin(need, ids[:, 2]).all(), "committed transitions lost"
        assert synth.valid(1, n, ids[:, 2], t).all(), "transitions past what was appended"
    except AssertionError as e:
        problems.append(f"stream {n}: {e}")
again.close()
report(what="data", transitions=transitions, problems=problems)
'''


def test_close_after_a_writer_failure_releases_fds_and_lock_then_raises(tmp_path):
    """Today close() re-raises the writer's error but the failing segment's fds stay open (held by the
    error's traceback) until the Lake is garbage-collected. Run in a subprocess: RLIMIT_FSIZE is per process."""
    script = tmp_path / "writer_fails.py"
    script.write_text(WRITER_FAILS)
    paths = [str(ROOT), str(ROOT / "tests"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    got = {d["what"]: d for d in map(json.loads, res.stdout.splitlines())}
    assert got["failure"]["kind"] == "LakeDiskFullError", got["failure"]
    assert got["close"]["kind"] is not None, "close() after a writer failure must re-raise it"
    assert got["fds"]["open"] == [], f"close() left fds open into the Lake: {got['fds']['open']}"
    assert got["reopen"]["kind"] is None, f"the writer lock was not released: {got['reopen']}"
    assert got["data"]["transitions"] > 0 and got["data"]["problems"] == [], got["data"]


# ---------------------------------------------------------------------- moved from test_lake.py
def test_sample_without_any_valid_transition_raises(tmp_path):
    """Two one-step sessions: two committed steps, both boundaries, so no transition. sample() must raise a
    LakeError (as it does for an empty Lake), not spin forever in its rejection loop."""
    path = tmp_path / "lake"
    synth = Synth((4, 4), 2)
    for session in (1, 2):
        with Lake(path, frame_shape=(4, 4)) as lake:
            lake.append("g", *synth.batch(session, 0, 1))
    with Lake(path, mode="r") as lake:
        assert lake.num_transitions == 4 and all(len(lake.read_stream("g", n).obs) == 0 for n in range(2))
    code = (
        "import sys, lake\n"
        "l = lake.Lake(sys.argv[1], mode='r')\n"
        "try:\n    l.sample(8)\n    print('SAMPLED')\n"
        "except lake.LakeError as e:\n    print('LakeError', e)\n"
    )
    try:
        res = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=10
        )
    except subprocess.TimeoutExpired:
        pytest.fail("sample() on a Lake without a valid transition did not return within 10 s (rejection loop spins)")
    assert res.stdout.startswith("LakeError"), res.stdout + res.stderr[-2000:]


def test_second_writer_refused_readers_allowed(tmp_path):
    path = tmp_path / "lake"
    synth = Synth((8, 8), 2, episode_len=12, seed=0)
    cfg = dict(path=str(path), frame_shape=[8, 8], num_streams=2, synth_seed=0, episode_len=12, group="g")
    lake = Lake(path, frame_shape=(8, 8), segment_bytes=20 * 2 * 64)
    append_steps(lake, "g", synth, 1, 0, 30)
    lake.commit(wait=True)
    with pytest.raises(LakeLockedError, match=str(os.getpid())):
        Lake(path, frame_shape=(8, 8))
    with pytest.raises(LakeLockedError):
        Lake(path)
    out = run_proc("tryopen", cfg).stdout
    assert out.startswith("LakeLockedError") and str(os.getpid()) in out, out

    reader = popen_proc("read", cfg, stdin=subprocess.PIPE)
    timer = watchdog(reader)
    try:
        first = json.loads(reader.stdout.readline())
        assert first["exact"], first["error"]
        before = lake.num_transitions
        assert first["num_transitions"] == before >= 60
        assert [len(x) for x in first["streams"]] == [len(lake.read_stream("g", n).obs) for n in range(2)]
        append_steps(lake, "g", synth, 1, 30, 70)  # appended, not committed: invisible to readers
        time.sleep(0.3)
        reader.stdin.write("refresh\n")
        reader.stdin.flush()
        assert json.loads(reader.stdout.readline())["num_transitions"] == before
        lake.commit(wait=True)
        reader.stdin.write("refresh\n")
        reader.stdin.flush()
        second = json.loads(reader.stdout.readline())
        assert second["exact"], second["error"]
        assert second["num_transitions"] == lake.num_transitions >= 140
        for n in range(2):
            got = [t for s, t in second["streams"][n]]
            every = np.arange(69)
            assert got == every[~synth.episode_start(1, n, every + 1)].tolist()
    finally:
        reader.stdin.close()
        reader.wait(timeout=30)
        timer.cancel()
    # A reader in this process too.
    with Lake(path, mode="r") as r:
        verify_group(r, synth, "g", [(1, 70, 70)])
    lake.close()
    assert run_proc("tryopen", cfg).stdout.startswith("OPENED")

    # The other way round: a writer process holds the Lake; this process is refused, naming its pid.
    w = popen_proc("write", dict(cfg, session=2, segment_bytes=20 * 2 * 64))
    timer = watchdog(w)
    try:
        ready = w.stdout.readline().split()
        assert ready[0] == "ready"
        with pytest.raises(LakeLockedError, match=ready[1]):
            Lake(path, frame_shape=(8, 8))
        with Lake(path, mode="r") as r:
            assert r.num_transitions >= 140
    finally:
        timer.cancel()
        w.kill()
        w.wait()
    with Lake(path, frame_shape=(8, 8)) as lake:  # the dead writer's lock is gone
        assert lake.num_transitions >= 140


def test_append_rejects_bad_batches(tmp_path):
    path = tmp_path / "lake"
    synth = small_lake(path)
    lake = Lake(path, frame_shape=(6, 6))
    obs, a, r, te, tr, es = synth.batch(2, 0, 3)
    bad = {
        "frame_shape": (np.zeros((3, 2, S, 6, 5), np.uint8), a, r, te, tr, es),
        "stack_size": (np.zeros((3, 2, S - 1, 6, 6), np.uint8), a, r, te, tr, es),
        "expected": (np.zeros((S, 6, 6), np.uint8), a[0, 0], r[0, 0], te[0, 0], tr[0, 0], es[0, 0]),
        "dtype": (obs.astype(np.float32), a, r, te, tr, es),
        "actions": (obs, a[:, :1], r, te, tr, es),
        "rewards": (obs, a, r[:2], te, tr, es),
        "episode_start": (obs, a, r, te, tr, es[0]),
    }
    for field, args in bad.items():
        with pytest.raises(LakeMismatchError, match=field):
            lake.append("g", *args)
    with pytest.raises(LakeMismatchError, match="dtype"):
        lake.append("g", obs.astype(np.int16), a, r, te, tr, es)
    # Another number of streams for a known group (from an earlier session).
    o3 = Synth((6, 6), 3, seed=8).batch(2, 0, 3)
    with pytest.raises(LakeMismatchError, match="num_streams"):
        lake.append("g", *o3)
    # ... and for a group first appended in this session, right away (before the writer thread ran).
    lake.append("new", *Synth((6, 6), 2, seed=9).batch(1, 0, 5))
    with pytest.raises(LakeMismatchError, match="num_streams"):
        lake.append("new", *o3)
    # Nothing was lost and the writer still works.
    append_steps(lake, "g", synth, 2, 0, 30)
    lake.commit(wait=True)
    verify_group(lake, synth, "g", [(1, 40, 40), (2, 30, 30)])
    lake.close()
    with Lake(path, mode="r") as r:
        verify_group(r, synth, "g", [(1, 40, 40), (2, 30, 30)])
    with pytest.raises(LakeError):
        lake.append("g", obs, a, r, te, tr, es)  # closed


def test_rejected_unstacked_batch_leaves_no_trace(tmp_path):
    """Frames are stored once, so stacks must follow each other; a batch whose stacks do not is refused,
    and the refusal must not change how the next (good) batch is stored: its first step still starts the
    session (a boundary storing its whole stack)."""
    path = tmp_path / "lake"
    synth = small_lake(path)
    with Lake(path, frame_shape=(6, 6)) as lake:
        obs, a, r, te, tr, es = synth.batch(2, 0, 3)
        with pytest.raises(LakeMismatchError):
            lake.append("g", obs[::-1].copy(), a, r, te, tr, np.zeros_like(es))
        append_steps(lake, "g", synth, 2, 0, 30)
        lake.commit(wait=True)
        verify_group(lake, synth, "g", [(1, 40, 40), (2, 30, 30)])


@pytest.mark.parametrize(
    "field,value",
    [
        ("frame_shape", (6, 7)),
        ("frame_shape", (36,)),
        ("stack_size", 3),
        ("env_id", "Other-v0"),
        ("frame_dtype", "uint16"),
        ("chunk_frames", 8),
    ],
)
def test_reopen_with_other_settings(tmp_path, field, value):
    path = tmp_path / "lake"
    synth = small_lake(path)
    kw = {"frame_shape": (6, 6), field: value}
    # As a writer in another process (so this process holds no lock), then with the right settings.
    res = run_proc("tryopen", dict(path=str(path), frame_shape=list(kw.pop("frame_shape")), kwargs=kw))
    assert res.stdout.startswith("LakeMismatchError") and field in res.stdout, res.stdout + res.stderr[-2000:]
    assert run_proc("tryopen", dict(path=str(path), frame_shape=[6, 6])).stdout.startswith("OPENED")
    # In this process, as a reader and as a writer.
    kw = {"frame_shape": (6, 6), field: value}
    for mode in ("r", "a"):
        with pytest.raises(LakeMismatchError, match=field):
            Lake(path, mode=mode, **kw)
    with Lake(path, mode="r") as r:  # nothing lost
        verify_group(r, synth, "g", [(1, 40, 40)])


def test_failed_open_releases_the_writer_lock(tmp_path):
    """A writer open that fails (wrong settings, damaged manifest) must not keep the Lake locked."""
    path = tmp_path / "lake"
    synth = small_lake(path)
    with pytest.raises(LakeMismatchError):
        Lake(path, frame_shape=(6, 7))
    with Lake(path, frame_shape=(6, 6)) as lake:  # the same process may open it right after
        append_steps(lake, "g", synth, 2, 0, 10)
    manifest = (path / "manifest.json").read_bytes()
    (path / "manifest.json").write_bytes(b"\x00garbage")
    with pytest.raises(LakeCorruptError):
        Lake(path, frame_shape=(6, 6))
    (path / "manifest.json").write_bytes(manifest)
    with Lake(path, frame_shape=(6, 6)) as lake:
        verify_group(lake, synth, "g", [(1, 40, 40), (2, 10, 10)])


def test_not_a_lake(tmp_path):
    plain = tmp_path / "file.h5"
    plain.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 100)
    for mode in ("a", "r"):
        with pytest.raises(LakeCorruptError, match=re.escape(str(plain))):
            Lake(plain, mode=mode, frame_shape=(4, 4))
    assert plain.read_bytes().startswith(b"\x89HDF")  # untouched
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LakeCorruptError, match="manifest"):
        Lake(empty, mode="r")
    with pytest.raises(LakeCorruptError):
        Lake(tmp_path / "missing", mode="r")
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "segment_000000.h5").write_bytes(b"not hdf5")
    with pytest.raises(LakeCorruptError, match="manifest"):
        Lake(stray, frame_shape=(4, 4))
    assert (stray / "segment_000000.h5").exists()
    with pytest.raises(ValueError):
        Lake(tmp_path / "new", frame_shape=None)
    with pytest.raises(ValueError):
        Lake(tmp_path / "new2", mode="w", frame_shape=(4, 4))


def test_not_enough_data_to_sample(tmp_path):
    synth = Synth((4, 4), 2)
    with Lake(tmp_path / "lake", frame_shape=(4, 4)) as lake:
        with pytest.raises(LakeError):
            lake.sample(4)
        lake.append("g", *synth.batch(1, 0, 1))
        lake.commit(wait=True)
        with pytest.raises(LakeError):  # one step: no transition yet
            lake.sample(4)
        lake.append("g", *synth.batch(1, 1, 2))
        lake.commit(wait=True)
        b = lake.sample(64, rng=np.random.default_rng(0))
        ids = synth.decode_many(b.obs[:, -1])
        assert set(ids[:, 2].tolist()) <= {0, 1}
