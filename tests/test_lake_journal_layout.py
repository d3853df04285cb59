"""A reader written from the layout in lake.py's docstring alone: journals with numpy and
zstandard, sealed segments with plain h5py (hdf5plugin's zstd filter). It must equal `Lake.read_stream`."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import h5py
import hdf5plugin  # noqa: F401  (registers the zstd filter)
import numpy as np
import zstandard

from lake import Lake
from lake_synth import Synth


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF), bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


RECORD = np.dtype([("frame_end", "<i8"), ("action", "<i4"), ("reward", "<f4"), ("flags", "u1")])  # 17 bytes, packed
BOUNDARY, TERMINATED, TRUNCATED = 8, 1, 2


def read_segment(path: Path, seg: dict, stream: int, m: dict) -> tuple[np.ndarray, np.ndarray]:
    """(records, frames) of one stream's committed steps in one segment."""
    K, shape, dtype, steps = m["chunk_frames"], tuple(m["frame_shape"]), np.dtype(m["frame_dtype"]), seg["steps"]
    if seg["tails"] is None:  # sealed: plain HDF5
        with h5py.File(path / seg["file"], "r") as h5:
            records = h5["records"][stream, :steps]
            return records, h5["frames"][stream, : records["frame_end"][-1]]
    raw = np.fromfile(path / seg["file"], np.uint8)
    at = seg["records_offset"] + stream * seg["steps_cap"] * RECORD.itemsize
    records = raw[at : at + steps * RECORD.itemsize].view(RECORD)
    F = int(records["frame_end"][-1])
    at = seg["index_offset"] + stream * seg["chunks_cap"] * 16
    index = raw[at : at + seg["chunks_cap"] * 16].view("<i8").reshape(-1, 2)  # offset, size
    where = [(int(o), int(n)) for o, n in index[: F // K]]
    if F % K:
        chunk, offset, size = seg["tails"][stream]
        assert chunk == F // K
        where.append((offset, size))
    d, data = zstandard.ZstdDecompressor(), []
    for o, n in where:
        chunk = raw[o : o + n].tobytes()
        if m["chunk_checksum"] != "none":  # a 12-byte skippable frame: magic, size 4, the CRC of the bytes before it
            assert chunk[-12:-4] == struct.pack("<II", 0x184D2A50, 4)
            crc = crc32c if m["chunk_checksum"] == "crc32c" else zlib.crc32
            assert crc(chunk[:-4]) == int.from_bytes(chunk[-4:], "little")
        data.append(d.decompress(chunk))  # (a zstd decoder skips a skippable frame)
    data = b"".join(data)
    return records, np.frombuffer(data, dtype).reshape(-1, *shape)[:F]


def read_stream(path: Path, group: str, stream: int) -> dict[str, np.ndarray]:
    m = json.loads((path / "manifest.json").read_text())
    S, out = (
        m["stack_size"],
        {k: [] for k in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated", "where")},
    )
    for seg in m["segments"]:
        if seg["group"] != group or seg["steps"] < 2:
            continue
        records, frames = read_segment(path, seg, stream, m)
        t = np.flatnonzero((records["flags"][1:] & BOUNDARY) == 0)  # step t+1 committed and not a boundary
        end = records["frame_end"][t]
        out["obs"].append(np.stack([frames[e - S : e] for e in end]))
        out["next_obs"].append(np.stack([frames[e - S + 1 : e + 1] for e in end]))
        out["actions"].append(records["action"][t])
        out["rewards"].append(records["reward"][t])
        out["terminated"].append((records["flags"][t] & TERMINATED) > 0)
        out["truncated"].append((records["flags"][t] & TRUNCATED) > 0)
        out["where"].append(np.stack([np.full(len(t), seg["index"]), np.full(len(t), stream), t], 1))
    return {k: np.concatenate(v) for k, v in out.items()}


def test_a_reader_from_the_documented_layout_equals_read_stream(tmp_path):
    """Two groups, sealed segments and journals, commits in the middle of chunks (tails), and a writer that
    reopens the Lake (its journal goes on after the tails of the earlier commits)."""
    path = tmp_path / "lake"
    a, b = Synth((6, 7), 3, episode_len=7, seed=1), Synth((6, 7), 2, episode_len=11, seed=2)
    settings = dict(frame_shape=(6, 7), segment_bytes=50 * 3 * 42)
    rng = np.random.default_rng(0)
    for session, steps in ((1, 130), (2, 37)):
        with Lake(path, **settings) as lake:
            t = 0
            while t < steps:
                T = int(min(rng.integers(1, 6), steps - t))
                lake.append("a", *a.batch(session, t, T))
                lake.append("b", *b.batch(session, t, T))
                t += T
                if rng.random() < 0.5:
                    lake.commit()
    m = json.loads((path / "manifest.json").read_text())
    assert m["chunk_checksum"] == "crc32c" and crc32c(b"123456789") == 0xE3069283  # the standard check value
    kinds = {(s["group"], s["tails"] is None) for s in m["segments"]}
    assert kinds == {("a", True), ("a", False), ("b", True), ("b", False)}, kinds
    assert any(t is not None for s in m["segments"] if s["tails"] for t in s["tails"]), "no unfinished chunk"
    with Lake(path, mode="r") as lake:
        for group, synth in (("a", a), ("b", b)):
            for n in range(synth.N):
                want, got = lake.read_stream(group, n), read_stream(path, group, n)
                assert len(got["actions"]) > 100
                for key, value in got.items():
                    np.testing.assert_array_equal(value, getattr(want, key), err_msg=f"{group} stream {n}: {key}")
