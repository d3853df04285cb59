"""Damaged and foreign files in a Lake: every value read from disk is checked before it is used, so damage is
LakeCorruptError naming the file (and the stream, step or chunk), on open or on the read that meets it, and
never a huge allocation, an OSError or a wrong transition. The Lake holds one sealed segment and one journal."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import struct
import sys
import zlib
from pathlib import Path

import google_crc32c
import h5py
import numpy as np
import pytest
import zstandard

import lake as lake_module
from lake import Lake, LakeCorruptError, LakeError
from lake_helpers import run_proc, segment_files, small_lake, verify_group
from lake_synth import Synth

ROOT = Path(__file__).resolve().parent.parent
SEGMENT_BYTES = 40 * 2 * 64  # 40 steps of 2 streams of 8x8 frames: 60 steps make one sealed segment and a journal


def make_lake(path: Path, steps: int = 60) -> Synth:
    synth = Synth((8, 8), 2, episode_len=9, seed=3)
    with Lake(path, frame_shape=(8, 8), env_id="Synth-v0", segment_bytes=SEGMENT_BYTES) as lake:
        for t in range(0, steps, 4):
            lake.append("g", *synth.batch(1, t, 4))
    return synth


def segment(path: Path, sealed: bool) -> tuple[Path, dict]:
    meta = next(
        m for m in json.loads((path / "manifest.json").read_text())["segments"] if (m["tails"] is None) == sealed
    )
    return path / meta["file"], meta


def check_exact(lake: Lake, synth: Synth, stream: int, steps: int, more: tuple = ()) -> None:
    """read_stream of a stream is session 1's first `steps` steps (then `more`: (session, steps) each), exact."""
    b = lake.read_stream("g", stream)
    ids = synth.decode_many(b.obs[:, -1])
    for session, n in ((1, steps), *more):
        want = np.arange(n)
        want = want[synth.valid(session, stream, want, n)]
        mine = ids[:, 0] == session
        np.testing.assert_array_equal(ids[mine, 2], want)
        synth.check_transitions(
            session,
            stream,
            want,
            b.obs[mine],
            b.next_obs[mine],
            b.actions[mine],
            b.rewards[mine],
            b.terminated[mine],
            b.truncated[mine],
        )
    assert len(ids) == sum(synth.valid(s, stream, np.arange(n), n).sum() for s, n in ((1, steps), *more))


# ---------------------------------------------------------------------- whole-file and region damage, in a child
DAMAGES = ["zeros", "random", "foreign-hdf5", "truncated", "truncated-chunks", "records-garbage", "index-garbage"]
INSIDE = {
    "records-garbage",
    "index-garbage",
    "truncated-chunks",
}  # the file's header (HDF5 or manifest entry) is intact

DAMAGE_ALL = r'''
"""Apply each damage to a copy of the Lake and try every way of reading it, under an address-space limit of
what this process uses plus 512 MB (an allocation sized by a damaged value fails with MemoryError)."""
import json, os, resource, shutil, sys
from pathlib import Path
import h5py, numpy as np
from lake import Lake

pristine, work, cases = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])

def damage(lake_dir, target, kind, rng):
    meta = next(m for m in json.loads((lake_dir / "manifest.json").read_text())["segments"]
                if (m["tails"] is None) == (target == "sealed"))
    f = lake_dir / meta["file"]
    size = f.stat().st_size
    if kind == "zeros":
        f.write_bytes(bytes(size))
    elif kind == "random":
        f.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    elif kind == "foreign-hdf5":
        f.unlink()
        with h5py.File(f, "w") as h5:
            h5["frames"] = np.arange(4096, dtype=np.int64).reshape(64, 64)
            h5.attrs["format"] = "something else"
    elif kind == "truncated":
        os.truncate(f, size // 2)
    elif kind == "truncated-chunks":  # header, records and chunk index intact; the last chunks cut off
        os.truncate(f, size - 64 if target == "sealed" else min(t[1] for t in meta["tails"] if t) + 1)
    else:  # random bytes over the records or the chunk index, where the manifest entry says they are
        N = meta["num_streams"]
        at, n = ((meta["records_offset"], N * meta["steps"] * 17) if kind == "records-garbage" else
                 (meta["index_offset"], N * meta["chunks_cap"] * 16))
        with open(f, "r+b") as fh:
            fh.seek(at)
            fh.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    return str(f)

def attempt(fn):
    try:
        fn()
        return ["ok", ""]
    except BaseException as e:
        return [type(e).__name__, str(e)]

status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
limit = int(status["VmSize"].split()[0]) * 1024 + (512 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
report = {}
for i, (target, kind) in enumerate(cases):
    d = work / f"case{i}"
    shutil.copytree(pristine, d)
    out = report[f"{target}/{kind}"] = {"file": damage(d, target, kind, np.random.default_rng(i))}
    try:
        r = Lake(d, mode="r")
        out["open_r"] = ["ok", ""]
    except BaseException as e:
        out["open_r"], r = [type(e).__name__, str(e)], None
    if r is not None:
        for n in range(2):
            out[f"read_stream_{n}"] = attempt(lambda: r.read_stream("g", n))
        out["sample"] = attempt(lambda: r.sample(4096, rng=np.random.default_rng(0)))
        out["sample_slices"] = attempt(lambda: r.sample_slices(64, 16, rng=np.random.default_rng(0)))
        r.close()
    def open_a():
        Lake(d).close()
    out["open_a"] = attempt(open_a)
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def damage_report(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("damage")
    make_lake(tmp / "pristine")
    script = tmp / "damage_all.py"
    script.write_text(DAMAGE_ALL)
    cases = [[target, kind] for target in ("sealed", "journal") for kind in DAMAGES]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    }
    (tmp / "work").mkdir()
    res = subprocess.run(
        [sys.executable, str(script), str(tmp / "pristine"), str(tmp / "work"), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("target", ["sealed", "journal"])
def test_damaged_file_is_a_corrupt_lake_naming_it(damage_report, target, kind):
    """Every way in (open as a reader, read_stream of each stream, sample, sample_slices, open as a writer) gives
    LakeCorruptError naming the damaged file, or works where it never reads the damage: a reader's open reads
    no records or chunks, and a writer's open reads only the journal's."""
    out = damage_report[f"{target}/{kind}"]
    path = out["file"]
    reads = ["read_stream_0", "read_stream_1", "sample", "sample_slices"]
    may_pass = {"open_r"} if target == "journal" or kind in INSIDE else set()
    if target == "sealed" and kind in INSIDE:
        may_pass.add("open_a")
    if out["open_r"][0] == "ok":
        assert "open_r" in may_pass, out
        for op in reads:  # the reads all meet the damage: both streams live in both files
            assert out[op][0] == "LakeCorruptError" and path in out[op][1], f"{op}: {out[op]}"
    for op in ("open_r", "open_a"):
        kind_, message = out[op]
        if not (kind_ == "ok" and op in may_pass):
            assert kind_ == "LakeCorruptError" and path in message, f"{op}: {out[op]}"


def test_damaged_record_names_stream_and_step(damage_report):
    out = damage_report["journal/records-garbage"]
    assert re.search(r"stream \d+ step \d+", out["read_stream_0"][1]), out["read_stream_0"]


# ---------------------------------------------------------------------- flipped bytes in a chunk
def has_crc(chunk: bytes, checksum: str = "crc32c") -> bool:
    """The chunk ends with a zstd skippable frame holding the CRC (CRC-32C, or zlib's CRC-32 in Lakes written before
    it) of the bytes before its last 4."""
    crc = google_crc32c.value if checksum == "crc32c" else zlib.crc32
    return chunk[-12:-4] == struct.pack("<II", 0x184D2A50, 4) and crc(chunk[:-4]) == int.from_bytes(
        chunk[-4:], "little"
    )


def flip(path: Path, offset: int, size: int) -> None:
    with open(path, "r+b") as f:
        for at in (offset + size // 2 - 1, offset + size // 2, offset + size // 2 + 1):
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("checksum", ["crc32c", "crc32"])  # crc32: a Lake written before CRC-32C still checks its own
@pytest.mark.parametrize("target", ["sealed", "journal"])
def test_flipped_bytes_in_a_chunk_name_segment_stream_and_chunk(tmp_path, monkeypatch, target, checksum):
    path = tmp_path / "lake"
    with monkeypatch.context() as m:
        m.setattr(lake_module, "CHUNK_CHECKSUM", checksum)
        synth = make_lake(path)
    assert json.loads((path / "manifest.json").read_text())["chunk_checksum"] == checksum
    f, meta = segment(path, sealed=target == "sealed")
    stream, chunk = (0, 1) if target == "sealed" else (1, 0)
    if target == "sealed":
        with h5py.File(f, "r") as h5:
            offset, size = h5["chunk_index"][stream, chunk].tolist()
    else:  # the journal's chunk index entry, as the module docstring lays it out
        raw = f.read_bytes()
        at = meta["index_offset"] + (stream * meta["chunks_cap"] + chunk) * 16
        offset, size = np.frombuffer(raw[at : at + 16], "<i8").tolist()
        assert has_crc(raw[offset : offset + size], checksum)
    flip(f, offset, size)
    name = re.escape(str(f)) + f".*chunk {chunk} of stream {stream}"
    with Lake(path, mode="r") as r:
        with pytest.raises(LakeCorruptError, match=name):
            r.read_stream("g", stream)
        with pytest.raises(LakeCorruptError, match=name):
            r.sample(4096, rng=np.random.default_rng(0))
        with pytest.raises(LakeCorruptError, match=name):
            r.sample_slices(256, 16, rng=np.random.default_rng(0))
        check_exact(r, synth, 1 - stream, 60)  # the other stream is intact


# ---------------------------------------------------------------------- the manifest against the files
@pytest.mark.parametrize(
    "field,value",
    [
        ("stack_size", 3),
        ("stack_size", 5),
        ("frame_shape", [8, 9]),
        ("frame_shape", [4, 16]),
        ("chunk_frames", 8),
        ("frame_dtype", "int8"),
        ("env_id", "Other-v0"),
        ("chunk_checksum", "none"),
        ("records_offset", 17),
    ],
)
def test_edited_manifest_disagrees_with_the_sealed_file(tmp_path, field, value):
    """An edited setting (or a sealed segment's entry) opens no more: LakeCorruptError naming the file, the
    attribute and both values. (frame_shape [4, 16] has the bytes of [8, 8]: only the file can tell.)"""
    path = tmp_path / "lake"
    synth = make_lake(path)
    good = (path / "manifest.json").read_text()
    m = json.loads(good)
    sealed = next(s for s in m["segments"] if s["tails"] is None)
    was = sealed[field] if field == "records_offset" else m[field]
    if field == "records_offset":
        sealed[field] += value
        value, field = sealed[field], "records"
    else:
        m[field] = value
    (path / "manifest.json").write_text(json.dumps(m))
    for mode in ("r", "a"):
        with pytest.raises(LakeCorruptError) as e:
            Lake(path, mode=mode)
        msg = str(e.value)
        assert str(path / sealed["file"]) in msg and field in msg and repr(value) in msg and str(was) in msg, msg
    (path / "manifest.json").write_text(good)
    with Lake(path, mode="r") as r:
        check_exact(r, synth, 0, 60)


@pytest.mark.parametrize("field,value", [("stack_size", 3), ("stack_size", 5), ("frame_shape", [8, 9])])
def test_edited_manifest_of_a_lake_of_one_journal(tmp_path, field, value):
    """No sealed file to compare with: the journal's records (a stream's first step ends at `stack_size`
    frames) and chunk headers (a chunk holds `chunk_frames` frames) disagree with the edit when they are read."""
    path = tmp_path / "lake"
    make_lake(path, steps=20)
    f, _ = segment(path, sealed=False)
    m = json.loads((path / "manifest.json").read_text())
    assert all(s["tails"] is not None for s in m["segments"])
    m[field] = value
    (path / "manifest.json").write_text(json.dumps(m))
    with Lake(path, mode="r") as r:
        for read in (
            lambda: r.read_stream("g", 0),
            lambda: r.sample(64, rng=np.random.default_rng(0)),
            lambda: r.sample_slices(8, 8, rng=np.random.default_rng(0)),
        ):
            with pytest.raises(LakeCorruptError, match=re.escape(str(f))):
                read()
    with pytest.raises(LakeCorruptError, match=re.escape(str(f))):
        Lake(path)  # the writer reads the journal to append on to it


def test_manifest_that_is_a_directory(tmp_path):
    path = tmp_path / "lake"
    synth = make_lake(path)
    good = (path / "manifest.json").read_bytes()
    (path / "manifest.json").unlink()
    (path / "manifest.json").mkdir()
    files = sorted(p.name for p in path.iterdir())
    for mode in ("r", "a"):
        with pytest.raises(LakeCorruptError, match=re.escape(str(path / "manifest.json"))):
            Lake(path, mode=mode, frame_shape=(8, 8))
    assert sorted(p.name for p in path.iterdir()) == files, "a failed open must not touch the Lake's files"
    (path / "manifest.json").rmdir()
    (path / "manifest.json").write_bytes(good)
    with Lake(path, mode="r") as r:
        check_exact(r, synth, 1, 60)


# ---------------------------------------------------------------------- Lakes written without chunk checksums
def test_lake_without_checksums_opens_and_keeps_its_format(tmp_path, monkeypatch):
    """A Lake written before checksums (no `chunk_checksum` in its manifest or sealed files) reads as before,
    and a writer appends on to it without checksums; a new Lake has them, and says so."""
    path = tmp_path / "old"
    with monkeypatch.context() as m:
        m.setattr(lake_module, "CHUNK_CHECKSUM", "none")
        synth = make_lake(path)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest.pop("chunk_checksum") == "none"
    (path / "manifest.json").write_text(json.dumps(manifest))
    sealed, _ = segment(path, sealed=True)
    with h5py.File(sealed, "r+") as h5:
        assert h5.attrs["chunk_checksum"] == "none"
        del h5.attrs["chunk_checksum"]
        offset, size = h5["chunk_index"][0, 0].tolist()
    assert not has_crc(sealed.read_bytes()[offset : offset + size])
    with Lake(path, mode="r") as r:
        for n in range(2):
            check_exact(r, synth, n, 60)
    with Lake(path, frame_shape=(8, 8), segment_bytes=SEGMENT_BYTES) as lake:  # CHUNK_CHECKSUM is True again
        for t in range(0, 40, 4):
            lake.append("g", *synth.batch(2, t, 4))
    assert json.loads((path / "manifest.json").read_text())["chunk_checksum"] == "none"
    with Lake(path, mode="r") as r:
        for n in range(2):
            check_exact(r, synth, n, 60, more=((2, 40),))
        newest = max((s for s in r._segments if s.sealed), key=lambda s: s.index)
    with h5py.File(newest.path, "r") as h5:
        assert h5.attrs["chunk_checksum"] == "none"
        offset, size = h5["chunk_index"][0, 0].tolist()
    assert not has_crc(newest.path.read_bytes()[offset : offset + size])

    new = tmp_path / "new"
    make_lake(new)
    assert json.loads((new / "manifest.json").read_text())["chunk_checksum"] == "crc32c"
    sealed, _ = segment(new, sealed=True)
    with h5py.File(sealed, "r") as h5:
        assert h5.attrs["chunk_checksum"] == "crc32c"
        offset, size = h5["chunk_index"][0, 0].tolist()
        frames = h5["frames"][0, :16]  # HDF5's zstd filter skips the CRC's skippable frame
    chunk = sealed.read_bytes()[offset : offset + size]
    assert has_crc(chunk)
    assert frames.tobytes() == zstandard.ZstdDecompressor().decompress(chunk)
    shutil.rmtree(new)


# ---------------------------------------------------------------------- moved from test_lake.py
@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe\x00garbage",
        b'{"format": "pqn-lake", "format_vers',
        b"[1, 2, 3]",
        b'{"hello": "world"}',
        b'{"format": "pqn-lake", "format_version": 1}',
        b'{"format": "pqn-lake", "format_version": 99}',
    ],
    ids=["empty", "binary", "truncated-json", "json-list", "json-not-lake", "missing-fields", "future-version"],
)
def test_damaged_manifest(tmp_path, content):
    path = tmp_path / "lake"
    synth = small_lake(path)
    good = (path / "manifest.json").read_bytes()
    files = segment_files(path)
    (path / "manifest.json").write_bytes(content)
    for mode in ("r", "a"):
        with pytest.raises(LakeError, match="manifest|format"):
            Lake(path, mode=mode, frame_shape=(6, 6))
    assert segment_files(path) == files, "a failed open must not delete segment files"
    (path / "manifest.json").write_bytes(good)
    with Lake(path, mode="r") as r:
        verify_group(r, synth, "g", [(1, 40, 40)])


def test_truncated_or_missing_segment(tmp_path):
    path = tmp_path / "lake"
    synth = small_lake(path)
    seg = path / "segment_000001.h5"
    saved = seg.read_bytes()
    os.truncate(seg, len(saved) // 2)
    res = run_proc("tryopen", dict(path=str(path), frame_shape=[6, 6]))  # a writer (in another process)
    assert res.stdout.startswith("LakeCorruptError") and seg.name in res.stdout, res.stdout + res.stderr[-2000:]
    with pytest.raises(LakeCorruptError, match=re.escape(str(seg))):
        Lake(path, mode="r")
    seg.unlink()
    res = run_proc("tryopen", dict(path=str(path), frame_shape=[6, 6]))
    assert res.stdout.startswith("LakeCorruptError") and seg.name in res.stdout, res.stdout + res.stderr[-2000:]
    with pytest.raises(LakeCorruptError, match=re.escape(str(path))):
        Lake(path, mode="r")
    seg.write_bytes(saved[: len(saved) // 3])
    with pytest.raises(LakeCorruptError, match=re.escape(str(seg))):
        Lake(path, mode="a")
    seg.write_bytes(saved)
    with Lake(path, mode="r") as r:
        verify_group(r, synth, "g", [(1, 40, 40)])
