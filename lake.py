"""lake.py: a crash-safe, RAM-flat replay store on disk whose frames are compressed along time (format v2).

The Lake holds the transitions of groups of env streams (one group per agent, one stream per env of its
vectorised env). Frames are stored once, and in chunks of `chunk_frames` consecutive frames of one stream
compressed with zstd: consecutive frames of one env are nearly identical, so a chunk of 16 Atari frames
takes 34-138x less than raw (benchmarks/frame_codec_bench.py). A 100M-frame Lake is then a few GB and lives
in the page cache, and decoding a chunk (~7-14 us, in C, without the GIL) replaces a disk read. A
transition's stacked observation and next observation are rebuilt on read, bit-for-bit as the agent saw them.

Layout of a Lake directory
--------------------------
    manifest.json             the committed state; replaced atomically (write tmp, flush, os.replace)
    writer.lock               flock'ed by the one writer process (released by the kernel if it dies)
    segment_000000.h5         a sealed segment: steps of every stream of one group (up to `segment_bytes` of
    segment_000001.h5         raw frames), an ordinary HDF5 file; deleted whole when evicted (FIFO)
    segment_000002.journal    the open segment of a group: raw, append-only, sealed into a .h5 when full
                              (a writer that reopens the Lake, after a close or a crash, appends on to it)

A sealed segment opens in plain h5py (`import hdf5plugin` registers the zstd filter; nothing of ours):

    h5py.File("segment_000000.h5")["frames"][stream, a:b]     frames a..b-1 of a stream

Root attributes: `format` ("pqn-lake"), `format_version` (2), `frame_shape`, `frame_dtype`, `stack_size`,
`chunk_frames`, `codec` ("zstd"), `env_id`, `group`, `segment_index`, `num_streams`, `steps`, `flag_bits`,
`chunk_checksum` ("crc32c"; "crc32" in Lakes written before it; "none", or absent, in Lakes older still). Datasets:

    frames       (num_streams, F, *frame_shape) frame_dtype, chunked (1, chunk_frames, *frame_shape), filter
                 32015 (zstd, hdf5plugin.Zstd, level -1): each stream's frames in order, F a multiple of the
                 chunk length (frames past a stream's last `frame_end` are padding)
    records      (num_streams, steps) compound, contiguous: one record per step of the stream
                   frame_end  int64    end (exclusive) of this step's frames in the stream's frame row
                   action     int32    action taken on this step's observation
                   reward     float32  reward returned by that step (as given; the Lake never clips)
                   flags      uint8    bit 0 terminated, 1 truncated, 2 episode_start (obs is a reset obs),
                                       3 boundary (full stack stored; no transition leads into this step),
                                       4 carry (copy of the previous segment's last step)
    chunk_index  (num_streams, F / chunk_frames) compound, contiguous: byte offset and size of each frames
                 chunk in the file (size 0: not stored), so that the Lake reads chunks without HDF5's B-tree

A chunk is one zstd frame of `chunk_frames` frames (C order), its decoded size in its header; where the manifest's
and the file's `chunk_checksum` is "crc32c" or "crc32", it ends with a 12-byte zstd skippable frame
(little-endian uint32 magic 0x184D2A50, uint32 size 4, then the CRC-32C (Castagnoli; "crc32": zlib's CRC-32) of
every byte of the chunk before these 4) that zstd decoders skip, HDF5's filter too. The Lake checks it before every
decode.

The stacked observation of step t is `frames[stream, frame_end[t] - stack_size : frame_end[t]]`. A step
stores one frame (its newest) unless it is a boundary, which stores its whole stack. Step t is a valid
transition when step t+1 is committed and not a boundary; then its next observation is the same slice
shifted by one frame, so a transition is `stack_size + 1` consecutive frames: one or two chunks. Streams
follow next-step autoreset (ale-py, envpool, gymnasium>=1.0): after a terminated/truncated step the next
observation is the final one, and the step after it is a reset obs (`episode_start`), so the final
transition keeps its true next observation and the autoreset step never becomes a transition. Each
segment starts with a carry copy (full stack) of the stream's last step in the previous segment, so no
transition spans two files.

A journal (the open segment) is a raw file that its entry in `manifest.json` describes (`num_streams`,
`steps_cap`, `chunks_cap`, `records_offset`, `index_offset`, `steps`, `tails`); all integers little-endian:

    records      at records_offset (0): num_streams x steps_cap records of 17 bytes, packed, C order (stream-major):
                 the record of step t of stream n at records_offset + (n * steps_cap + t) * 17, bytes
                   0-7 frame_end (int64), 8-11 action (int32), 12-15 reward (float32), 16 flags (uint8)
                 as in a sealed segment. steps_cap = max(16, segment_bytes // (num_streams * frame bytes))
    chunk index  at index_offset = records' end rounded up to 4096: num_streams x chunks_cap entries of 16 bytes,
                 C order: entry (n, c) at index_offset + (n * chunks_cap + c) * 16 is two int64, the byte offset
                 of chunk c of stream n in the journal, then its size in bytes.
                 chunks_cap = ceil((2 * steps_cap + 2 * stack_size) / chunk_frames)
    chunks       from the index's end rounded up to 4096: chunks (zstd frames, as above) appended as they fill,
                 streams interleaved; at each commit, every stream's unfinished chunk too (fewer frames)

Only the committed part is read: the first `steps` (manifest) records of each stream. Stream n's frames are
F = frame_end[n, steps - 1]; chunks c < F // chunk_frames are where the index says; if F is not a multiple of
chunk_frames, its last frames are in the unfinished chunk `tails[n]` = [chunk F // chunk_frames, byte offset,
bytes] (`null` when there is none). Records, index entries and bytes past the committed part may be anything
(zeros where never written: the file is sparse). A sealed segment's entry has `tails` null, `steps_cap` = steps,
`chunks_cap` = its chunks per stream, and the byte offsets of its `records` and `chunk_index` datasets.

Nothing written is ever overwritten while it is committed, and HDF5 metadata is only written into files not
yet published: a sealed segment is built whole in memory, written under a temporary name, closed, renamed,
and only then named by the manifest (the journal goes after). A step is committed when `manifest.json`,
which holds every segment's committed step count, is atomically replaced after the data was written. The
page cache survives the death of the process, so a committed step survives SIGKILL; `fsync_every` adds
node-crash durability. A full disk is LakeDiskFullError, and what was committed before stays readable.

Every value read from a file is checked before it is used: records (a step's frames end within its row,
`stack_size` after the previous step's at a boundary, else 1 after; a stream's step 0 is a boundary), chunk
index entries and tails (inside the file, at most a chunk's compressed bound), a chunk's decoded size and its
checksum, and on open each sealed file's attributes against the manifest. Damage is LakeCorruptError naming
the file (and the stream and step, or chunk), never an allocation sized by a damaged value.

Writing happens on the Lake's writer thread (`append` only copies what is stored and queues it); chunks are
compressed there and on the reader threads. Reading: records, chunk index entries and chunk bytes with `pread`
(the Lake is small: it stays in the page cache, and segments the cache lost are read back whole), then chunks
decoded by zstd on the calling and reader threads, which release the GIL while they compress or decode.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import queue
import re
import resource
import struct
import sys
import threading
import time
import traceback
import weakref
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import google_crc32c
import numpy as np
import tyro
import zstandard

FORMAT = "pqn-lake"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
LOCK = "writer.lock"
RECORD_DTYPE = np.dtype([("frame_end", "<i8"), ("action", "<i4"), ("reward", "<f4"), ("flags", "u1")])
INDEX_DTYPE = np.dtype([("offset", "<i8"), ("nbytes", "<i8")])
_TWO_RECORDS = struct.Struct("<" + "qifB" * 2)  # RECORD_DTYPE twice: steps t and t+1 of a draw
TERMINATED, TRUNCATED, EPISODE_START, BOUNDARY, CARRY = 1, 2, 4, 8, 16
FLAG_BITS = "0 terminated, 1 truncated, 2 episode_start, 3 boundary, 4 carry"
CHUNK_FRAMES = 16  # frames per chunk: 47-191 B/frame on Atari at zstd level 1 (vs 7,056 raw). Against 8: 20-29% fewer
#                    bytes and ~30% less decoding per frame of a BigPond fill, for 16-28% more decoding per sampled
#                    transition; 32: little smaller, ~1.5x the decoding (benchmarks/frame_codec_bench.py)
ZSTD_LEVEL = -1  # zstd's fast mode: against level 1, 8% more bytes, 6-21% faster to compress, 13-16% faster to
#                  decode (benchmarks/frame_codec_bench.py --level -1 against --level 1, chunks of 16)
CHUNK_CHECKSUM = "crc32c"  # new Lakes (only: it is stored) end each chunk with its CRC in a zstd skippable frame,
#                           checked before every decode; "none" only to measure its cost (benchmarks/lake_bench.py).
#                           Not zstd's own content checksum: it hashes a chunk's decoded bytes (113 KB at 84x84) at
#                           every decode; the CRC hashes the compressed ones, 34-138x fewer (frame_codec_bench: 51-208
#                           B a frame). CRC-32C, not zlib's CRC-32: the CPU's crc32 instruction makes it ~5x cheaper a
#                           chunk, and zlib's cost MsPacman's cold sampling 5.4-5.7% (benchmarks/RESULTS.md)
_CRC_FRAME = struct.pack("<II", 0x184D2A50, 4)  # a zstd skippable frame's header: magic, 4 bytes of content (the CRC)


def _crc32c(blob: bytes | memoryview) -> int:
    return google_crc32c.value(blob if type(blob) is bytes else bytes(blob))  # it takes bytes only (a copy: ~0.1 us)


# Per checksum: the CRC of some bytes, and the CRC of any bytes followed by their own CRC (little-endian): a constant
_CRCS = {"crc32c": (_crc32c, 0x48674BC7), "crc32": (zlib.crc32, 0x2144DF1C)}
READ_AHEAD_S = 1.0  # how often samplers ask the kernel to bring back segment pages the page cache dropped
READ_BACK_PROBES = 8  # pages probed per segment file: one not in the page cache and the file is read back
IOV_MAX = 1024  # Linux's limit on iovecs per pwritev call
OWN_FILE = re.compile(r"(segment_\d{6}\.(h5|journal)|segment_\d{6}\.h5\.tmp|manifest\.json\.tmp)")
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a full disk, the process's file-size limit, a quota
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)  # Linux >= 4.14: a read that fails rather than wait for the disk
_PROBE = bytearray(1)
_RAM_BYTES = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
_INT32 = np.iinfo(np.int32)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class LakeError(Exception):
    """Base class of the Lake's errors."""


class LakeLockedError(LakeError):
    """Another process is writing this Lake."""


class LakeMismatchError(LakeError):
    """The Lake on disk was made with other settings, or the data does not fit them."""


class LakeCorruptError(LakeError):
    """The path is not a Lake, or a file of it is truncated or damaged."""


class LakeDiskFullError(LakeError):
    """The disk (or the process's file-size limit) is full; everything committed before stays readable."""


@dataclass
class Batch:
    """Transitions as uint8 stacks `(B, stack, *frame_shape)` and scalars; numpy arrays or torch tensors."""

    obs: Any
    next_obs: Any
    actions: Any
    rewards: Any
    terminated: Any
    truncated: Any
    where: np.ndarray  # (B, 3) int64: segment index, stream, step of each transition (for debugging and tests)


@dataclass
class Slices:
    """Whole contiguous stream slices, frames stored once: transition i is
    `obs = frames[obs_start[i] : obs_start[i] + stack]`, `next_obs` the same shifted by one frame."""

    frames: np.ndarray  # (F, *frame_shape)
    obs_start: np.ndarray  # (M,) int64
    actions: np.ndarray  # (M,) int64
    rewards: np.ndarray  # (M,) float32
    terminated: np.ndarray  # (M,) bool
    truncated: np.ndarray  # (M,) bool
    group: np.ndarray  # (M,) str: the group (the agent) whose stream each transition comes from


# ---------------------------------------------------------------------- the manifest, checked
_TOP_KEYS = {
    "format": str,
    "format_version": int,
    "frame_shape": list,
    "frame_dtype": str,
    "stack_size": int,
    "chunk_frames": int,
    "env_id": str,
    "capacity": int,
    "groups": dict,
    "segments": list,
    "next_segment": int,
    "evicted_steps": int,
    "commits": int,
}
_SEGMENT_KEYS = {
    "file": str,
    "index": int,
    "group": str,
    "num_streams": int,
    "steps": int,
    "steps_cap": int,
    "chunks_cap": int,
    "records_offset": int,
    "index_offset": int,
    "tails": (list, type(None)),
}


def _is(value: Any, kind) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def _check_manifest(m: Any, where: Path) -> dict:
    """Every field of a manifest, or LakeCorruptError naming the segment and the field (and
    LakeMismatchError for another format_version)."""

    def bad(what: str) -> LakeCorruptError:
        return LakeCorruptError(f"{where} is damaged: {what}")

    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise LakeCorruptError(f"{where} is not a Lake manifest (no format={FORMAT!r})")
    if m.get("format_version") != FORMAT_VERSION:
        if _is(m.get("format_version"), int):
            raise LakeMismatchError(
                f"{where.parent} has format_version={m['format_version']} "
                f"({'raw frames, lake.py before v2' if m['format_version'] == 1 else 'unknown'}); "
                f"this lake.py reads format_version={FORMAT_VERSION}: write a new Lake (a new --lake-path)"
            )
        raise bad(f"field 'format_version' is {m.get('format_version')!r}, not an integer")
    _check_fields(
        m, _TOP_KEYS, ("capacity", "next_segment", "evicted_steps", "commits"), ("stack_size", "chunk_frames"), bad, ""
    )
    if not m["frame_shape"] or not all(_is(s, int) and s >= 1 for s in m["frame_shape"]):
        raise bad(f"field 'frame_shape' is {m['frame_shape']!r}, not a list of sizes >= 1")
    try:
        np.dtype(m["frame_dtype"])
    except TypeError:
        raise bad(f"field 'frame_dtype' is {m['frame_dtype']!r}, not a numpy dtype") from None
    if m.setdefault("chunk_checksum", "none") not in ("none", *_CRCS):  # absent: a Lake written before checksums
        raise bad(f"field 'chunk_checksum' is {m['chunk_checksum']!r}, not 'crc32c', 'crc32' or 'none'")
    for name, g in m["groups"].items():
        if not isinstance(g, dict) or not _is(g.get("num_streams"), int) or g["num_streams"] < 1:
            raise bad(f"field 'groups' entry {name!r} is {g!r}, not {{'num_streams': n >= 1}}")
    last = -1
    for i, s in enumerate(m["segments"]):
        if not isinstance(s, dict):
            raise bad(f"segments[{i}] is {s!r}, not a segment entry")
        seg = f"segments[{i}] ({s.get('file', '?')})"
        _check_fields(
            s,
            _SEGMENT_KEYS,
            ("index", "steps", "records_offset", "index_offset"),
            ("num_streams", "steps_cap", "chunks_cap"),
            bad,
            seg + " ",
        )
        if not last < s["index"] < m["next_segment"]:
            raise bad(
                f"{seg} field 'index' is {s['index']}: segments go in increasing order below "
                f"next_segment={m['next_segment']}"
            )
        last = s["index"]
        if s["file"] not in (_segment_name(s["index"], True), _segment_name(s["index"], False)):
            raise bad(f"{seg} field 'file' is {s['file']!r}, not segment_{s['index']:06d}.h5 or .journal")
        if s["group"] not in m["groups"] or m["groups"][s["group"]]["num_streams"] != s["num_streams"]:
            raise bad(f"{seg} fields 'group' {s['group']!r} and 'num_streams' {s['num_streams']} do not match 'groups'")
        if s["steps"] > s["steps_cap"]:
            raise bad(f"{seg} field 'steps' is {s['steps']}, more than its steps_cap={s['steps_cap']}")
        if (s["tails"] is None) != s["file"].endswith(".h5"):
            raise bad(
                f"{seg} field 'tails' is {'missing' if s['tails'] is None else 'set'} for a "
                f"{'journal' if s['tails'] is None else 'sealed segment'}"
            )
        if s["tails"] is not None and (
            len(s["tails"]) != s["num_streams"]
            or not all(
                t is None
                or (
                    isinstance(t, list)
                    and len(t) == 3
                    and all(_is(v, int) for v in t)
                    and 0 <= t[0] < s["chunks_cap"]
                    and t[1] >= 0
                    and t[2] >= 1
                )
                for t in s["tails"]
            )
        ):
            raise bad(f"{seg} field 'tails' is not one [chunk, offset, bytes] or null per stream")
    return m


def _check_fields(entry: dict, kinds: dict, zero_or_more: tuple, one_or_more: tuple, bad, where: str) -> None:
    """Each field of a manifest entry is there, of its type, and within its lower bound."""
    for key, kind in kinds.items():
        if key not in entry:
            raise bad(f"{where}has no field {key!r}")
        if not _is(entry[key], kind):
            raise bad(f"{where}field {key!r} is {entry[key]!r}, of the wrong type")
    for key, least in [(k, 0) for k in zero_or_more] + [(k, 1) for k in one_or_more]:
        if entry[key] < least:
            raise bad(f"{where}field {key!r} is {entry[key]}, must be >= {least}")


def _segment_name(index: int, sealed: bool) -> str:
    return f"segment_{index:06d}.{'h5' if sealed else 'journal'}"


# ---------------------------------------------------------------------- segments
class _Segment:
    """One segment file, sealed (.h5) or open (.journal): where its records and chunk index live, and its
    committed state `(steps, tails)`, replaced whole at each commit so that a reader takes both at once.
    Every value read from the file is checked before it is used (`check_records`, `check_chunks`), and a sealed
    file's attributes against the manifest when it is opened: damage is LakeCorruptError naming the file."""

    def __init__(self, lake_dir: Path, meta: dict, writable: bool, manifest: dict):
        self.meta = dict(meta)
        self.path = lake_dir / meta["file"]
        self.index, self.group, self.num_streams = meta["index"], meta["group"], meta["num_streams"]
        self.steps_cap, self.chunks_cap = meta["steps_cap"], meta["chunks_cap"]
        self.records_offset, self.index_offset = meta["records_offset"], meta["index_offset"]
        self.sealed = meta["tails"] is None
        self.state = (meta["steps"], meta["tails"])
        self.S, K = manifest["stack_size"], manifest["chunk_frames"]
        self.frames_cap = self.chunks_cap * K  # frames a stream's row can hold
        self.chunk_raw = K * int(np.prod(manifest["frame_shape"])) * np.dtype(manifest["frame_dtype"]).itemsize
        # > zstd's bound (raw + raw/256 + 64 + 22) + CRC (12)
        self.chunk_max = self.chunk_raw + self.chunk_raw // 128 + 512
        self.checksum = manifest["chunk_checksum"]
        self.crc = _CRCS.get(self.checksum)  # (crc, residue), or None: a Lake without checksums
        try:
            self.fd = os.open(self.path, os.O_RDWR if writable and not self.sealed else os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise LakeCorruptError(f"cannot open segment {self.path}: {e}") from e
        # also when the last reference goes (a sampler may hold it)
        self.close = weakref.finalize(self, os.close, self.fd)
        try:
            self.size = os.fstat(self.fd).st_size  # a journal grows: read again before a chunk past it is refused
            for name, offset, end in (
                ("records_offset", self.records_offset, self.record_pos(self.num_streams, 0)),
                ("index_offset", self.index_offset, self.index_pos(self.num_streams, 0)),
            ):
                if end > self.size:
                    raise LakeCorruptError(
                        f"segment {self.path} is truncated or its manifest entry is damaged: {name}={offset}, "
                        f"num_streams={self.num_streams}, steps_cap={self.steps_cap}, chunks_cap={self.chunks_cap} "
                        f"end at byte {end}, the file has {self.size}"
                    )
            if self.sealed:
                self._check_attributes(manifest)
        except BaseException:
            self.close()
            raise

    def _check_attributes(self, manifest: dict) -> None:
        """A sealed file's root attributes and datasets are what the manifest says (read once, when it is opened)."""
        want = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "frame_shape": manifest["frame_shape"],
            "frame_dtype": manifest["frame_dtype"],
            "stack_size": self.S,
            "chunk_frames": manifest["chunk_frames"],
            "codec": "zstd",
            "env_id": manifest["env_id"],
            "group": self.group,
            "segment_index": self.index,
            "num_streams": self.num_streams,
            "steps": self.steps_cap,
            "chunk_checksum": manifest["chunk_checksum"],
        }
        datasets = {
            "records": (self.records_offset, [self.num_streams, self.steps_cap]),  # (byte offset, shape)
            "chunk_index": (self.index_offset, [self.num_streams, self.chunks_cap]),
        }
        try:  # through the descriptor already held, not the path: the writer may evict the file meanwhile (~0.5 ms)
            with h5py.File(io.FileIO(self.fd, closefd=False), "r") as h5:
                got = {key: _plain(h5.attrs.get(key, "none" if key == "chunk_checksum" else None)) for key in want}
                for name in datasets:
                    ds = h5.get(name)
                    got[name] = (ds.id.get_offset(), list(ds.shape)) if isinstance(ds, h5py.Dataset) else None
                    del ds  # released before its file closes
        except Exception as e:  # h5py: OSError, or whatever damaged metadata makes it raise
            raise LakeCorruptError(f"segment {self.path} is not a readable HDF5 file: {e}") from None
        for key, value in {**want, **datasets}.items():
            if got[key] != value:
                raise LakeCorruptError(
                    f"segment {self.path} does not match {MANIFEST}: the file's {key} is "
                    f"{got[key]!r}, the manifest's {value!r}"
                )

    def check_records(self, recs: np.ndarray, stream: int, start: int) -> np.ndarray:
        """Records start.. of a stream as read, or LakeCorruptError naming the first impossible step (`_bad_record`)."""
        i = _bad_record(recs, self.S, self.frames_cap, np.zeros(1, np.int64), np.array([start == 0]))
        if i >= 0:
            raise self.damaged_record(stream, start + i, recs[i])
        return recs

    def damaged_record(self, stream: int, step: int, rec) -> LakeCorruptError:
        return LakeCorruptError(
            f"{self.path}: the record of stream {stream} step {step} is damaged (frame_end={int(rec['frame_end'])}, "
            f"flags={int(rec['flags'])}; a step ends 1 frame after the previous one, {self.S} at a boundary, "
            f"within the {self.frames_cap} frames of its row)"
        )

    def check_chunks(self, loc: tuple | list, stream: int, c0: int) -> None:
        """Chunk index entries (offset, size, offset, size, ...) of chunks c0.. of a stream, as read: each chunk a
        chunk's size and inside the file, or LakeCorruptError naming it (before anything is allocated or read)."""
        for i in range(0, len(loc), 2):
            offset, size = loc[i], loc[i + 1]
            if (
                0 < size <= self.chunk_max
                and 0 <= offset
                and (offset + size <= self.size or offset + size <= self._grown())
            ):
                continue
            raise LakeCorruptError(
                f"{self.path}: chunk {c0 + i // 2} of stream {stream} is missing or its index entry is damaged: "
                f"{size} bytes at byte {offset}, in a file of {self.size} bytes (a chunk takes 1 to {self.chunk_max})"
            )

    def _grown(self) -> int:
        self.size = os.fstat(self.fd).st_size
        return self.size

    @property
    def committed(self) -> int:
        return self.state[0]

    def record_pos(self, stream: int, step: int) -> int:
        return self.records_offset + (stream * self.steps_cap + step) * RECORD_DTYPE.itemsize

    def index_pos(self, stream: int, chunk: int) -> int:
        return self.index_offset + (stream * self.chunks_cap + chunk) * INDEX_DTYPE.itemsize

    def read_records_all(self, steps: int) -> np.ndarray:
        """(num_streams, steps): the first `steps` records of every stream, checked; in one read when they are all
        the segment holds, else stream by stream (a journal of small frames has room for millions of steps)."""
        out = np.empty((self.num_streams, steps), RECORD_DTYPE)
        if steps == self.steps_cap:
            _pread_into(self.fd, out, self.records_offset, self.path)
        else:
            for n in range(self.num_streams):
                _pread_into(self.fd, out[n], self.record_pos(n, 0), self.path)
        i = (
            _bad_record(
                out.reshape(-1),
                self.S,
                self.frames_cap,
                np.arange(self.num_streams) * steps,
                np.ones(self.num_streams, bool),
            )
            if steps
            else -1
        )
        if i >= 0:
            raise self.damaged_record(i // steps, i % steps, out.reshape(-1)[i])
        return out

    def read_records(self, stream: int, start: int, stop: int) -> np.ndarray:
        out = np.empty(stop - start, RECORD_DTYPE)
        _pread_into(self.fd, out, self.record_pos(stream, start), self.path)
        return self.check_records(out, stream, start)

    def chunks(
        self, stream: int, tails: list | None, f0: int, f1: int, out: memoryview, frame_nbytes: int, K: int
    ) -> list[tuple]:
        """Read the compressed chunks that hold frames f0..f1-1 of a stream; returns the decode jobs that put
        those frames into `out` (see `_decode`). Called per sampled transition: plain ints and `struct`."""
        c0 = f0 // K
        n = (f1 - 1) // K + 1 - c0
        raw = os.pread(self.fd, 16 * n, self.index_offset + (stream * self.chunks_cap + c0) * 16)
        if len(raw) < 16 * n:
            raise LakeCorruptError(
                f"{self.path} is truncated: its chunk index ends before stream {stream}'s chunk {c0 + n - 1}"
            )
        loc = (_INDEX_ENTRIES.get(n) or _index_entries(n)).unpack(raw)  # offset, size of each chunk
        tail = -1
        if tails is not None and tails[stream] is not None and 0 <= tails[stream][0] - c0 < n:
            tail = tails[stream][0] - c0  # the unfinished chunk of the last commit (journal)
            loc = loc[: 2 * tail] + tuple(tails[stream][1:]) + loc[2 * tail + 2 :]
        self.check_chunks(loc, stream, c0)
        if n == 1:  # the common case of a sampled transition
            return [
                (
                    self,
                    stream,
                    c0,
                    os.pread(self.fd, loc[1], loc[0]),
                    tail < 0,
                    (f0 - c0 * K) * frame_nbytes,
                    (f1 - c0 * K) * frame_nbytes,
                    out[: (f1 - f0) * frame_nbytes],
                )
            ]
        # Chunks of a stream are mostly adjacent (HDF5 may put one in a hole): one read for all when they are.
        lo = loc[0]
        if all(loc[i] + loc[i + 1] == loc[i + 2] for i in range(0, 2 * n - 2, 2)):
            span = memoryview(os.pread(self.fd, loc[-2] + loc[-1] - lo, lo))
        else:
            span = None
        jobs, done = [], 0
        for i in range(n):
            offset, size = loc[2 * i], loc[2 * i + 1]
            blob = span[offset - lo : offset - lo + size] if span is not None else os.pread(self.fd, size, offset)
            c = (c0 + i) * K
            a, b = max(f0, c) - c, min(f1, c + K) - c
            jobs.append(
                (
                    self,
                    stream,
                    c0 + i,
                    blob,
                    i != tail,
                    a * frame_nbytes,
                    b * frame_nbytes,
                    out[done : done + (b - a) * frame_nbytes],
                )
            )
            done += (b - a) * frame_nbytes
        return jobs

    def read_frames(
        self, stream: int, tails: list | None, f0: int, f1: int, out: memoryview, frame_nbytes: int, K: int
    ) -> None:
        """Frames f0..f1-1 of a stream into `out` (bytes)."""
        _decode(self.chunks(stream, tails, f0, f1, out, frame_nbytes, K))


def _spread(pool: ThreadPoolExecutor | None, threads: int, fn, items: list) -> list:
    """fn(items), with items split evenly between this thread and the pool's, in order (fn maps a list to a list).
    zstd compresses and decodes without the GIL; the reads are done before (reading first, then decoding, measured
    faster than handing work over while reading: each hand-over of the GIL costs microseconds here). Every item is
    done before it returns, also when one raises (no write into a caller's buffer outlives the call)."""
    parts = min(threads, max(1, len(items) // 8)) if pool is not None else 1
    bounds = np.linspace(0, len(items), parts + 1).astype(int).tolist()
    futures = [pool.submit(fn, items[lo:hi]) for lo, hi in zip(bounds[1:-1], bounds[2:])]
    try:
        first = fn(items[: bounds[1]])
    finally:
        for future in futures:
            future.exception()  # waits
    return first + [r for future in futures for r in future.result()]


_INDEX_ENTRIES: dict[int, struct.Struct] = {}


def _index_entries(n: int) -> struct.Struct:
    """The struct of n chunk index entries (INDEX_DTYPE), made once per n."""
    return _INDEX_ENTRIES.setdefault(n, struct.Struct(f"<{2 * n}q"))


def _decode(jobs: list) -> list:
    """Decode each job's chunk (without the GIL) and copy the wanted bytes [a, b) of it into its `out`. Its CRC, where
    the Lake has them, is checked first; then its frame header, which says what the decoder allocates (a whole
    chunk holds `chunk_frames` frames, an unfinished one fewer)."""
    decompress = _decompressor().decompress
    for seg, stream, chunk, blob, whole, a, b, out in jobs:
        try:
            if seg.crc and seg.crc[0](blob) != seg.crc[1]:
                raise zstandard.ZstdError(f"its {seg.checksum} does not match its bytes")
            size = zstandard.frame_content_size(blob)
            if not (size == seg.chunk_raw if whole else b <= size <= seg.chunk_raw):
                want = seg.chunk_raw if whole else f"{b} to {seg.chunk_raw}"
                raise zstandard.ZstdError(f"its header says {size} bytes of frames, not {want}")
            out[:] = memoryview(decompress(blob))[a:b]
        except zstandard.ZstdError as e:
            raise LakeCorruptError(f"{seg.path}: chunk {chunk} of stream {stream} is damaged ({e})") from None
    return jobs


def _bad_record(recs: np.ndarray, S: int, frames_cap, runs: np.ndarray, at_step0: np.ndarray) -> int:
    """Index of the first record that cannot be, or -1. `recs` holds runs of consecutive steps of a stream, each
    beginning at its index in `runs` (at the stream's step 0 where `at_step0`); `frames_cap` (one, or one per
    record) is the frames of the record's row. A step's frames end within the row, `S` (its whole stack) after
    the previous step's at a boundary, else 1 after; a stream's step 0 is a boundary; flags are 5 bits."""
    end, flags = recs["frame_end"], recs["flags"]
    boundary = (flags & BOUNDARY) > 0
    bad = (flags >= 32) | (end < S) | (end > frames_cap)
    linked = np.ones(len(recs), bool)
    linked[runs] = False
    bad[1:] |= linked[1:] & (np.diff(end) != np.where(boundary[1:], S, 1))
    first = runs[at_step0]
    bad[first] |= (end[first] != S) | ~boundary[first]
    return int(np.argmax(bad)) if bad.any() else -1


def _plain(value: Any) -> Any:
    """An HDF5 attribute as JSON would hold it (a list, int, bool or str), for comparison with the manifest."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value.item() if isinstance(value, np.generic) else value


_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)  # one per thread: a context is not thread-safe
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def _compress(chunks: list, checksum: str) -> list[bytes]:
    """A zstd frame of each chunk (its decoded size in its header), followed (checksum "crc32c" or "crc32") by a
    skippable frame holding the CRC of the bytes before it: zstd decoders (HDF5's filter too) skip it."""
    c = getattr(_local, "cctx", None)  # one per thread, as for decoding
    if c is None:
        c = _local.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    blobs = [c.compress(chunk) for chunk in chunks]
    if checksum != "none":
        crc = _CRCS[checksum][0]
        blobs = [framed + crc(framed).to_bytes(4, "little") for framed in (blob + _CRC_FRAME for blob in blobs)]
    return blobs


def _pread(fd: int, size: int, offset: int, path: Path) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) < size:
        data += _pread_more(fd, size - len(data), offset + len(data), path)
    return data


def _pread_more(fd: int, size: int, offset: int, path: Path) -> bytes:
    parts = []
    while size:  # short reads only happen at EOF or on signals
        part = os.pread(fd, size, offset)
        if not part:
            raise LakeCorruptError(f"{path} is truncated: short read at byte {offset}")
        parts.append(part)
        size, offset = size - len(part), offset + len(part)
    return b"".join(parts)


def _pread_into(fd: int, out: np.ndarray | memoryview, offset: int, path: Path) -> None:
    view = memoryview(out).cast("B")
    got = os.preadv(fd, [view], offset)
    while got < len(view):
        more = os.preadv(fd, [view[got:]], offset + got)
        if more == 0:
            raise LakeCorruptError(f"{path} is truncated: short read at byte {offset + got}")
        got += more


def _pwrite_all(fd: int, buffers: list, offset: int, path: Path) -> None:
    for i in range(0, len(buffers), IOV_MAX):
        chunk = [memoryview(b).cast("B") for b in buffers[i : i + IOV_MAX]]
        want = sum(len(b) for b in chunk)
        done = 0
        while done < want:  # short write: go on from where it stopped
            flat = chunk if done == 0 else [memoryview(b"".join(bytes(b) for b in chunk))[done:]]
            try:
                done += os.pwritev(fd, flat, offset + done)
            except OSError as e:
                if e.errno in _DISK_FULL:
                    raise LakeDiskFullError(f"disk full while writing {path}: {e.strerror}") from e
                raise
        offset += want


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):  # torch tensor, possibly on an accelerator; the copy happens here, in the writer
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _check_stacking(obs: Any, episode_start: Any, rng: np.random.Generator) -> None:
    """Frames are stored once, so `obs[t]` must be `obs[t - 1]` shifted by one frame within an episode.
    Checked on one random step per append (a few frames per stream): cheap, and it catches a wrong
    stack axis or frame order before it silently corrupts the Lake."""
    T = obs.shape[0]
    if T < 2:
        return
    t = int(rng.integers(1, T))
    same = obs[t, :, :-1] == obs[t - 1, :, 1:]
    same = same.reshape(same.shape[0], -1).all(1)
    ok = _to_numpy(same) | _to_numpy(episode_start[t]).astype(bool)  # one host sync per append, not per step
    if not ok.all():
        n = int(np.flatnonzero(~ok)[0])
        raise LakeMismatchError(
            f"obs[{t}, {n}] is not obs[{t - 1}, {n}] shifted by one frame, and episode_start[{t}, {n}] is False: "
            "obs must be stacks (T, N, stack, *frame_shape) with the newest frame last, consecutive in time"
        )


def _check_values(actions: Any, rewards: Any) -> None:
    """Actions are stored as int32 and rewards as float32: refuse what would silently change (a float or
    wrapped action, a reward that overflows to inf) and rewards that are not finite (a NaN poisons a learner)."""
    a = actions if hasattr(actions, "dtype") else np.asarray(actions)
    if str(a.dtype).replace("torch.", "") not in (
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "bool",
    ):
        raise LakeMismatchError(f"actions must be integers that fit int32 (the stored dtype), got dtype {a.dtype}")
    if a.numel() if hasattr(a, "numel") else a.size:
        lo, hi = int(a.min()), int(a.max())  # (one sync for a tensor on an accelerator)
        if lo < _INT32.min or hi > _INT32.max:
            raise LakeMismatchError(f"actions must fit int32 (the stored dtype): got {hi if hi > _INT32.max else lo}")
    r = np.asarray(_to_numpy(rewards), np.float64)
    bad = ~np.isfinite(r) | (np.abs(r) > _FLOAT32_MAX)
    if bad.any():
        raise LakeMismatchError(f"rewards must be finite and fit float32 (the stored dtype): got {r[bad][0]!r}")


class _Open:
    """The writer's state of a group's open segment (a journal)."""

    def __init__(self, seg: _Segment, data_start: int, K: int, frame_shape, dtype):
        num_streams = seg.num_streams
        self.seg = seg
        self.written = 0  # steps written (committed or not)
        self.frames = np.zeros(num_streams, np.int64)  # frames written per stream
        self.pending = np.empty((num_streams, K, *frame_shape), dtype)  # each stream's unfinished chunk
        self.index = np.zeros((num_streams, seg.chunks_cap), INDEX_DTYPE)  # where the finished chunks are
        self.data_end = data_start  # the journal's end: chunks are appended here
        self.tails: list = [None] * num_streams
        self.tails_stale = False  # frames written since the tails were


class LakeReader:
    """A Lake opened for reading: `Lake(path, mode="r")`, in any process (the writer, `Lake`, is one too).

    `sample(batch_size)` draws transitions uniformly with replacement; `sample_slices(num_slices, slice_steps)`
    returns whole stream slices for bulk fills; `read_stream(group, stream)` one stream's committed steps in order;
    `refresh()` picks up a writer's newer commits (sealed and evicted segments too). Settings given (`frame_shape`,
    `stack_size`, ...) are checked against the Lake's; the writer's policies (`capacity`, `segment_bytes`, ...) are
    accepted and ignored."""

    writable = False

    def __init__(
        self,
        path: str | os.PathLike,
        mode: str = "r",
        *,
        frame_shape: tuple[int, ...] | None = None,
        frame_dtype: str | None = None,
        stack_size: int | None = None,
        env_id: str = "",
        capacity: int = 0,
        segment_bytes: int = 1 << 30,
        fsync_every: int = 0,
        queue_size: int = 8,
        read_threads: int | None = None,
        seed: int | None = None,
        chunk_frames: int | None = None,
    ):
        if mode != "r":
            raise ValueError(f"LakeReader opens a Lake with mode='r', got {mode!r} (Lake(path) writes)")
        self._start(path, read_threads, seed)
        if not (self.path / MANIFEST).exists():
            raise LakeCorruptError(f"{self.path} is not a Lake: it has no {MANIFEST}")
        try:
            self._load(frame_shape, frame_dtype, stack_size, env_id, chunk_frames)
            self._open_segments()
        except BaseException:
            self._release()
            raise

    def _start(self, path: str | os.PathLike, read_threads: int | None, seed: int | None) -> None:
        """The state every Lake has before its manifest is read."""
        self.path = Path(path)
        self._lock = threading.Lock()  # guards self._segments and their committed state
        self._segments: list[_Segment] = []
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = os.getpid()
        self._read_ahead_due = -np.inf
        self.rng = np.random.default_rng(seed)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.read_threads = max(1, int(read_threads or cores))
        _raise_nofile_limit()
        if self.path.exists() and not self.path.is_dir():
            raise LakeCorruptError(f"{self.path} is not a Lake: a Lake is a directory holding {MANIFEST}")

    def _load(self, frame_shape, frame_dtype, stack_size, env_id, chunk_frames) -> None:
        """The manifest, checked, and the given settings against it; the settings it holds as attributes."""
        self.manifest = self._read_manifest()
        self._check_settings(
            frame_shape=frame_shape,
            frame_dtype=frame_dtype,
            stack_size=stack_size,
            env_id=env_id,
            chunk_frames=chunk_frames,
        )
        self.frame_shape = tuple(self.manifest["frame_shape"])
        self.frame_dtype = np.dtype(self.manifest["frame_dtype"])
        self.stack_size = int(self.manifest["stack_size"])
        self.chunk_frames = int(self.manifest["chunk_frames"])
        self.frame_nbytes = int(np.prod(self.frame_shape)) * self.frame_dtype.itemsize

    def _read_manifest(self) -> dict:
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise LakeCorruptError(f"{manifest_path} is not a regular file: a Lake's manifest is a JSON file")
        try:
            manifest = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LakeCorruptError(f"{manifest_path} is damaged (not JSON: {e})") from e
        return _check_manifest(manifest, manifest_path)

    def _check_settings(self, **given: Any) -> None:
        for name, value in given.items():
            if value is None or (name == "env_id" and value == ""):
                continue
            stored = self.manifest[name]
            value = [int(v) for v in value] if name == "frame_shape" else value
            value = np.dtype(value).name if name == "frame_dtype" else value
            if value != stored:
                raise LakeMismatchError(
                    f"Lake {self.path} was made with {name}={stored!r}, not {value!r}: "
                    "use a new --lake-path, or the settings it was made with"
                )

    def _open_segments(self) -> None:
        segments = []
        try:
            for meta in self.manifest["segments"]:
                try:
                    segments.append(_Segment(self.path, meta, self.writable, self.manifest))
                except FileNotFoundError:
                    if self.writable:
                        raise LakeCorruptError(
                            f"{self.path / meta['file']} is listed in the manifest but missing"
                        ) from None
                    for seg in segments:
                        seg.close()
                    return self.refresh()  # a writer sealed or evicted it since we read the manifest
        except BaseException:
            for seg in segments:
                seg.close()
            raise
        with self._lock:
            self._segments = segments

    def refresh(self) -> None:
        """Re-read the manifest (for readers in other processes): newer commits, sealed and evicted segments."""
        for _ in range(100):
            self.manifest = self._read_manifest()
            old = {s.meta["file"]: s for s in self._segments}
            segments = []
            try:
                for meta in self.manifest["segments"]:
                    seg = old.get(meta["file"]) or _Segment(self.path, meta, False, self.manifest)
                    seg.state = (meta["steps"], meta["tails"])
                    segments.append(seg)
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            with self._lock:
                self._segments = segments
            return
        raise LakeCorruptError(f"{self.path}: segments listed in the manifest keep disappearing")

    def close(self) -> None:
        """Close every file. Idempotent."""
        if not self._closed:
            self._release()

    def _release(self) -> None:
        self._closed = True
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.shutdown()
        with self._lock:
            segments, self._segments = self._segments, []
        for seg in segments:
            seg.close()

    def __enter__(self) -> "LakeReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def append(self, *args: Any, **kwargs: Any) -> None:
        raise LakeError(f"Lake {self.path} is closed" if self._closed else f"Lake {self.path} was opened with mode='r'")

    commit = append

    # ------------------------------------------------------------------ reading
    @property
    def num_transitions(self) -> int:
        """Committed steps held now (each is a transition unless the next step is a boundary or missing)."""
        with self._lock:
            return sum(s.committed * s.num_streams for s in self._segments)

    def _snapshot(self) -> list[tuple[_Segment, int, list | None]]:
        """(segment, committed steps, tails) of every segment with a transition, taken together."""
        with self._lock:
            segments = list(self._segments)
        snap = [(s, *s.state) for s in segments]
        snap = [x for x in snap if x[1] >= 2]
        if not snap:
            raise LakeError(f"Lake {self.path} has no committed transition to sample yet")
        self._read_ahead(segments)
        return snap

    def _read_ahead(self, segments: list[_Segment]) -> None:
        """At most every READ_AHEAD_S: read back whole (sequentially) each segment file the page cache lost
        pages of, while the Lake fits in half the RAM. A cold Lake then costs one sequential read of a few
        hundred MB per million transitions instead of a random disk read per draw (POSIX_FADV_WILLNEED, the
        kernel's own read-ahead, brought nothing back here)."""
        now = time.monotonic()
        if now < self._read_ahead_due:
            return
        self._read_ahead_due = now + READ_AHEAD_S
        sizes = [os.fstat(seg.fd).st_size for seg in segments]
        if sum(sizes) <= _RAM_BYTES // 2:
            for seg, size in zip(segments, sizes):
                _read_back(seg, size)

    def _reader_pool(self) -> ThreadPoolExecutor | None:
        """The threads that decode beside the calling one (None with read_threads=1)."""
        if self.read_threads > 1 and (self._pool is None or self._pool_pid != os.getpid()):  # (a forked child has none)
            self._pool = ThreadPoolExecutor(self.read_threads - 1, thread_name_prefix="lake-reader")
            self._pool_pid = os.getpid()
        return self._pool if self.read_threads > 1 else None

    def sample(
        self, batch_size: int, *, rng: np.random.Generator | None = None, torch: bool = False, pin_memory: bool = False
    ) -> Batch:
        """`batch_size` transitions drawn uniformly with replacement from all committed, valid transitions
        (`sample(0)` returns an empty batch).

        Returns numpy arrays, or torch tensors with `torch=True` (in pinned memory with `pin_memory=True`,
        for fast non-blocking copies to the GPU). `obs` and `next_obs` are views of one
        `(batch, stack + 1, *frame_shape)` buffer."""
        if not _is(batch_size, (int, np.integer)) or batch_size < 0:
            raise ValueError(f"sample: batch_size must be an integer >= 0, got {batch_size!r}")
        rng = self.rng if rng is None else rng
        stack, batch, chunk, frame_bytes = self.stack_size, int(batch_size), self.chunk_frames, self.frame_nbytes
        snap = self._snapshot() if batch else []
        seg_index, stream, step = (np.zeros(batch, np.int64) for _ in range(3))
        actions, rewards, flags = [0] * batch, [0.0] * batch, [0] * batch
        buf = _alloc((batch, stack + 1, *self.frame_shape), self.frame_dtype, torch, pin_memory)
        out = _bytes(buf.numpy() if torch else buf)
        slot_bytes = (stack + 1) * frame_bytes
        jobs = []
        if batch:
            committed = np.array([c for _, c, _ in snap], np.int64)
            num_streams = np.array([seg.num_streams for seg, _, _ in snap], np.int64)
            p = (committed - 1) * num_streams / ((committed - 1) * num_streams).sum()
            records_offset = np.array([seg.records_offset for seg, _, _ in snap], np.int64)
            steps_cap = np.array([seg.steps_cap for seg, _, _ in snap], np.int64)
            # Rejection sampling keeps each draw uniform over valid transitions (step t is one unless step t+1
            # is a boundary). Draws and reads happen on this thread, in order, so a seed fixes the batch; the
            # reader threads only decode (without the GIL: ~7-14 us a chunk, against ~1 us a read).
            todo, rounds, add = np.arange(batch), 0, jobs.extend
            while len(todo):
                rounds += 1
                if rounds % 64 == 0 and len(todo) == batch and not self._has_valid(snap):
                    raise LakeError(f"Lake {self.path} has no valid transition to sample yet")
                drawn = rng.choice(len(snap), size=len(todo), p=p)
                uniforms = rng.random((len(todo), 2))
                seg_index[todo], stream[todo] = drawn, (uniforms[:, 0] * num_streams[drawn]).astype(np.int64)
                step[todo] = (uniforms[:, 1] * (committed[drawn] - 1)).astype(np.int64)
                pos = records_offset[drawn] + (stream[todo] * steps_cap[drawn] + step[todo]) * RECORD_DTYPE.itemsize
                rejected, pread, unpack, two = [], os.pread, _TWO_RECORDS.unpack, _TWO_RECORDS.size
                for b, i, n, at in zip(todo.tolist(), drawn.tolist(), stream[todo].tolist(), pos.tolist()):
                    segment, _, tails = snap[i]
                    raw = pread(segment.fd, two, at)
                    if len(raw) < two:
                        raise LakeCorruptError(f"{segment.path} is truncated: short read of the records at byte {at}")
                    end, actions[b], rewards[b], flags[b], next_end, _, _, next_flags = unpack(raw)
                    if not (
                        stack <= end < segment.frames_cap and next_end - end == (stack if next_flags & BOUNDARY else 1)
                    ):
                        # `_bad_record`'s rule, per draw
                        raise segment.damaged_record(n, int(step[b]), dict(frame_end=end, flags=flags[b]))
                    if next_flags & BOUNDARY:  # step t+1 starts anew: t is no transition, drawn again
                        rejected.append(b)
                    else:
                        add(
                            segment.chunks(
                                n,
                                tails,
                                end - stack,
                                end + 1,
                                out[b * slot_bytes : (b + 1) * slot_bytes],
                                frame_bytes,
                                chunk,
                            )
                        )
                todo = np.array(rejected, np.int64)
        _spread(self._reader_pool(), self.read_threads, _decode, jobs)
        flags = np.array(flags, np.uint8)
        scalars = dict(
            actions=np.array(actions, np.int64),
            rewards=np.array(rewards, np.float32),
            terminated=(flags & TERMINATED) > 0,
            truncated=(flags & TRUNCATED) > 0,
        )
        if torch:
            import torch as th

            scalars = {k: th.from_numpy(v) for k, v in scalars.items()}
            if pin_memory and th.cuda.is_available():
                scalars = {k: v.pin_memory() for k, v in scalars.items()}
        index = np.array([seg.index for seg, _, _ in snap], np.int64)
        where = np.stack([index[seg_index] if batch else seg_index, stream, step], axis=1)
        return Batch(obs=buf[:, :stack], next_obs=buf[:, 1:], where=where, **scalars)

    @staticmethod
    def _has_valid(snap: list) -> bool:
        return any(
            ((s.read_records(n, 1, c)["flags"] & BOUNDARY) == 0).any() for s, c, _ in snap for n in range(s.num_streams)
        )

    def sample_slices(self, num_slices: int, slice_steps: int, *, rng: np.random.Generator | None = None) -> Slices:
        """`num_slices` stream slices of up to `slice_steps` steps each: the fast way to fill a BigPond (a
        slice decodes a run of chunks). Every valid transition is equally likely to be in a slice: a slice
        starts uniformly at one of the `slice_steps - 1 + committed - 1` places of a stream whose steps
        [start, start + slice_steps) overlap the valid ones, and is cut to them (so it is shorter near a
        segment's ends)."""
        if not _is(slice_steps, (int, np.integer)) or slice_steps < 1:
            raise ValueError(f"sample_slices: slice_steps must be an integer >= 1, got {slice_steps!r}")
        if not _is(num_slices, (int, np.integer)) or num_slices < 0:
            raise ValueError(f"sample_slices: num_slices must be an integer >= 0, got {num_slices!r}")
        rng = self.rng if rng is None else rng
        stack, frame_bytes, chunk = self.stack_size, self.frame_nbytes, self.chunk_frames
        snap = self._snapshot() if num_slices else []
        places = np.array([s.num_streams * (c - 1 + slice_steps - 1) for s, c, _ in snap], np.float64)
        plan = []  # (snapshot entry, stream, first step, steps)
        for i in rng.choice(len(snap), size=num_slices, p=places / places.sum()) if num_slices else []:
            seg, committed, _ = snap[i]
            start = int(
                rng.integers(-(slice_steps - 1), committed - 1)
            )  # the last valid transition is step committed - 2
            first, stop = max(start, 0), min(start + slice_steps, committed - 1)
            plan.append((snap[i], int(rng.integers(0, seg.num_streams)), first, stop - first))
        # Records of steps start .. start+steps: one more than the slice, for validity and frame ends; then
        # every slice at once (numpy over all of them, not per slice), checked at once too.
        recs = np.empty(sum(steps + 1 for *_, steps in plan), RECORD_DTYPE)
        last = np.cumsum([steps + 1 for *_, steps in plan], dtype=np.int64) - 1  # each slice's extra record
        first = (last - [steps for *_, steps in plan]).astype(np.int64)
        for i, ((seg, _, _), stream, start, _) in enumerate(plan):
            _pread_into(seg.fd, recs[first[i] : last[i] + 1], seg.record_pos(stream, start), seg.path)
        caps = np.repeat([seg.frames_cap for (seg, _, _), *_ in plan], last - first + 1)
        bad = _bad_record(recs, stack, caps, first, np.array([start == 0 for _, _, start, _ in plan], bool))
        if bad >= 0:
            i = int(np.searchsorted(first, bad, "right")) - 1
            (seg, _, _), stream, start, _ = plan[i]
            raise seg.damaged_record(stream, start + bad - int(first[i]), recs[bad])
        begin = recs["frame_end"][first] - stack  # each slice's first frame
        counts = recs["frame_end"][last] - begin
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        frames = np.empty((int(offsets[-1]), *self.frame_shape), self.frame_dtype)
        views = _bytes(frames)
        jobs = []
        for i, ((seg, _, tails), stream, _, _) in enumerate(plan):
            jobs += seg.chunks(
                stream,
                tails,
                int(begin[i]),
                int(begin[i] + counts[i]),
                views[offsets[i] * frame_bytes : offsets[i + 1] * frame_bytes],
                frame_bytes,
                chunk,
            )
        _spread(self._reader_pool(), self.read_threads, _decode, jobs)
        # Step t is a transition unless it is its slice's extra record or step t+1 is a boundary.
        valid = np.ones(len(recs), bool)
        valid[last] = False
        valid[:-1] &= (recs["flags"][1:] & BOUNDARY) == 0
        slice_of = np.repeat(np.arange(num_slices), last - first + 1)
        obs_start = (recs["frame_end"] - stack - begin[slice_of] + offsets[slice_of])[valid]
        recs = recs[valid]
        group = np.array([seg.group for (seg, _, _), *_ in plan] or [""])[slice_of[valid]]
        return Slices(
            frames=frames,
            obs_start=obs_start.astype(np.int64),
            actions=recs["action"].astype(np.int64),
            rewards=recs["reward"].copy(),
            terminated=(recs["flags"] & TERMINATED) > 0,
            truncated=(recs["flags"] & TRUNCATED) > 0,
            group=group,
        )

    def read_stream(self, group: str | int, stream: int) -> Batch:
        """Every committed transition of one stream, in order (for tests and tools; reads all of it)."""
        group, S, K, frame_nbytes = str(group), self.stack_size, self.chunk_frames, self.frame_nbytes
        if group not in self.manifest["groups"]:
            raise ValueError(
                f"read_stream: Lake {self.path} has no group {group!r}; its groups: {sorted(self.manifest['groups'])}"
            )
        num_streams = self.manifest["groups"][group]["num_streams"]
        if not _is(stream, (int, np.integer)) or not 0 <= stream < num_streams:
            raise ValueError(
                f"read_stream: stream {stream!r} of group {group!r} is out of range: it has streams "
                f"0..{num_streams - 1}"
            )
        with self._lock:
            snap = [(s, *s.state) for s in self._segments if s.group == group]
        obs, nxt, recs, where = [], [], [], []
        for seg, committed, tails in snap:
            r = seg.read_records(stream, 0, committed)
            if len(r) < 2:
                continue
            frames = np.empty((int(r["frame_end"][-1]), *self.frame_shape), self.frame_dtype)
            seg.read_frames(stream, tails, 0, len(frames), _bytes(frames), frame_nbytes, K)
            steps = np.nonzero((r["flags"][1:] & BOUNDARY) == 0)[0]
            idx = r["frame_end"][steps, None] - S + np.arange(S + 1)[None]
            obs.append(frames[idx[:, :S]])
            nxt.append(frames[idx[:, 1:]])
            recs.append(r[steps])
            where.append(np.stack([np.full(len(steps), seg.index), np.full(len(steps), stream), steps], 1))
        empty = np.zeros((0, S, *self.frame_shape), self.frame_dtype)
        r = np.concatenate(recs) if recs else np.zeros(0, RECORD_DTYPE)
        return Batch(
            obs=np.concatenate(obs) if obs else empty,
            next_obs=np.concatenate(nxt) if nxt else empty,
            actions=r["action"].astype(np.int64),
            rewards=r["reward"].copy(),
            terminated=(r["flags"] & TERMINATED) > 0,
            truncated=(r["flags"] & TRUNCATED) > 0,
            where=np.concatenate(where) if where else np.zeros((0, 3), np.int64),
        )

    def drop_page_cache(self) -> None:
        """Ask the OS to forget this Lake's cached pages (for cold-read benchmarks)."""
        with self._lock:
            segments = list(self._segments)
        for seg in segments:
            os.posix_fadvise(seg.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self._read_ahead_due = -np.inf

    def stats(self) -> dict:
        """Size, compression, groups, streams, completed episodes (full games) and their returns; reads all records."""
        with self._lock:
            snap = [(s, s.committed) for s in self._segments]
        disk = 0
        for f in os.listdir(self.path):
            try:
                disk += os.stat(self.path / f).st_blocks * 512
            except FileNotFoundError:  # replaced or evicted by the writer meanwhile
                pass
        groups: dict[str, dict] = {}
        frames = 0
        for seg, committed in snap:
            g = groups.setdefault(seg.group, {"streams": seg.num_streams, "steps": 0, "returns": [], "running": {}})
            for n in range(seg.num_streams):
                r = seg.read_records(n, 0, committed)
                frames += int(r["frame_end"][-1]) if len(r) else 0
                r = r[(r["flags"] & CARRY) == 0]  # a carry repeats the previous segment's last step
                g["steps"] += len(r)
                ret = g["running"].get(n)
                for flags, reward in zip(r["flags"].tolist(), r["reward"].tolist()):
                    if flags & EPISODE_START:
                        if ret is not None and ret[1]:
                            g["returns"].append(ret[0])  # the previous game ended (the reset proves it)
                        ret = [0.0, True]
                    elif flags & BOUNDARY:
                        ret = [0.0, False]  # joined mid-game (e.g. after a resume): not a full game
                    if ret is not None:
                        ret[0] += float(reward)
                g["running"][n] = ret
        for g in groups.values():
            del g["running"]
        transitions = sum(g["steps"] for g in groups.values())
        raw = frames * self.frame_nbytes + transitions * RECORD_DTYPE.itemsize
        return {
            "path": str(self.path),
            "env_id": self.manifest["env_id"],
            "frame_shape": self.frame_shape,
            "frame_dtype": self.frame_dtype.name,
            "stack_size": self.stack_size,
            "chunk_frames": self.chunk_frames,
            "transitions": transitions,
            "segments": len(snap),
            "evicted_steps": self.manifest["evicted_steps"],
            "capacity": self.manifest["capacity"],
            "disk_bytes": disk,
            "raw_bytes": raw,
            "compression": raw / disk if disk else float("nan"),
            "groups": groups,
        }


class Lake(LakeReader):
    """A replay store on disk: `Lake(path, frame_shape=(84, 84))` creates or opens one to write it (and read it: a
    LakeReader); `Lake(path, mode="r")` opens it to read only (a LakeReader, in any process).

    One writer process at a time, guarded by a lock file: `append(group, obs, actions, rewards, terminated,
    truncated, episode_start)` queues a batch of steps for a background writer thread (blocking only when its bounded
    queue is full), `commit()` publishes everything appended before it, `close()` commits and joins."""

    writable = True

    def __new__(cls, path: str | os.PathLike, mode: str = "a", **settings: Any):
        if mode not in ("a", "r"):
            raise ValueError(f"mode must be 'a' (read and write) or 'r' (read only), got {mode!r}")
        return LakeReader(path, **settings) if mode == "r" else super().__new__(cls)

    def __init__(
        self,
        path: str | os.PathLike,
        mode: str = "a",
        *,
        frame_shape: tuple[int, ...] | None = None,
        frame_dtype: str | None = None,
        stack_size: int | None = None,
        env_id: str = "",
        capacity: int = 0,
        segment_bytes: int = 1 << 30,
        fsync_every: int = 0,
        queue_size: int = 8,
        read_threads: int | None = None,
        seed: int | None = None,
        chunk_frames: int | None = None,
    ):
        """`capacity` is in transitions (0: unbounded); past it the oldest segments are deleted.
        `segment_bytes` sizes a segment by its raw frames (a 1 GB segment is ~10-35 MB on disk);
        `fsync_every` makes every n-th commit fsync data and manifest (0: never; committed data then survives
        process death, not power loss). `read_threads` decode chunks in parallel (default: one per core).
        `chunk_frames` (new Lakes only; stored) is the number of consecutive frames compressed together."""
        self._lock_fd: int | None = None
        self._open: dict[str, _Open] = {}
        self._sealed: dict[int, _Segment] = {}  # journal index -> its sealed segment, published at the next commit
        self._start(path, read_threads, seed)
        self._writer: threading.Thread | None = None
        self._writer_start = threading.Lock()  # appends may come from several threads (one group each)
        self._error: BaseException | None = None
        if not (self.path / MANIFEST).exists():
            foreign = (
                sorted(p.name for p in self.path.iterdir() if p.name not in (LOCK, MANIFEST + ".tmp"))
                if self.path.exists()
                else []
            )
            if foreign:  # never make a Lake among a user's files (and never clean them up)
                raise LakeCorruptError(
                    f"{self.path} is not a Lake (no {MANIFEST}) and is not empty ({', '.join(foreign[:3])}"
                    f"{', ...' if len(foreign) > 3 else ''}): a new Lake needs a missing or empty directory"
                )
        self.path.mkdir(parents=True, exist_ok=True)
        self._take_writer_lock()
        try:
            if not (self.path / MANIFEST).exists():
                self._create(frame_shape, frame_dtype, stack_size, chunk_frames, env_id, capacity)
            self._load(frame_shape, frame_dtype, stack_size, env_id, chunk_frames)
            self.manifest["capacity"] = int(capacity)  # a policy, not a format: may change on reopen
            self._compress = partial(_compress, checksum=self.manifest["chunk_checksum"])  # the Lake's, kept
            self.segment_bytes = int(segment_bytes)
            self.fsync_every = int(fsync_every)
            self._remove_orphans()
            self._open_segments()
            self._queue: queue.Queue = queue.Queue(maxsize=max(1, queue_size))
            self._stack_check_rng = np.random.default_rng(0)
            self._session_groups: set[str] = set()  # groups appended to by this writer (caller side)
            self._group_streams: dict[str, int] = {}  # group -> streams, checked on the caller's thread
            # group -> (stacks, records) of a sealed segment's last steps, for the next
            self._carry: dict[str, tuple] = {}
            self._commits_since_fsync = 0
            self._touched: set[int] = set()  # fds written since the last fsync
            for seg in self._segments:
                if not seg.sealed:  # a group's open segment (left by a close or a crash): appending goes on in it
                    self._open[seg.group] = self._resume(seg)
        except BaseException:
            self._release()
            raise

    def _create(self, frame_shape, frame_dtype, stack_size, chunk_frames, env_id, capacity) -> None:
        """A new Lake's manifest, published."""
        if frame_shape is None:
            raise ValueError("frame_shape is required to create a new Lake (e.g. frame_shape=(84, 84))")
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "frame_shape": [int(s) for s in frame_shape],
            "frame_dtype": np.dtype(frame_dtype or "uint8").name,
            "stack_size": int(stack_size or 4),
            "chunk_frames": int(chunk_frames or CHUNK_FRAMES),
            "env_id": env_id,
            "capacity": int(capacity),
            "groups": {},
            "segments": [],
            "next_segment": 0,
            "evicted_steps": 0,
            "commits": 0,
            "chunk_checksum": CHUNK_CHECKSUM,
        }
        for name in ("stack_size", "chunk_frames"):
            if manifest[name] < 1:
                raise ValueError(f"{name} must be >= 1, got {manifest[name]}")
        if not manifest["frame_shape"] or min(manifest["frame_shape"]) < 1:
            raise ValueError(f"frame_shape must be sizes >= 1, got {tuple(frame_shape)}")
        self._publish(manifest)

    def refresh(self) -> None:
        """Nothing to do: the writer's view is always current."""

    def close(self) -> None:
        """Commit what was appended, stop the writer thread, close every file and release the lock; then
        raise the writer's error, if it met one. Idempotent."""
        if self._closed:
            return
        try:
            if self._writer is not None:
                if self._error is None:
                    self._put(("commit", threading.Event()))
                self._put(("stop",))
                self._writer.join()
        finally:
            self._release()
        self._raise_writer_error()

    def _release(self) -> None:
        super()._release()
        for seg in [open_seg.seg for open_seg in self._open.values()] + list(self._sealed.values()):
            seg.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "Lake":
        return self

    def drop_page_cache(self) -> None:
        """LakeReader's, after an fsync of each segment (dirty pages cannot be dropped)."""
        with self._lock:
            segments = list(self._segments)
        for seg in segments:
            os.fsync(seg.fd)
        super().drop_page_cache()

    def _take_writer_lock(self) -> None:
        self._lock_fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 64, 0).decode(errors="replace").strip()
            os.close(self._lock_fd)
            self._lock_fd = None
            raise LakeLockedError(
                f"Lake {self.path} is already being written by another process (pid {holder or '?'}); "
                "open it with mode='r' to read, or point --lake-path elsewhere"
            ) from None
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, str(os.getpid()).encode(), 0)

    def _remove_orphans(self) -> None:
        """Files of the Lake's own names that a crash left behind: segments created or evicted but not (or no
        longer) in the manifest, temporary files. Nothing else is touched."""
        listed = {s["file"] for s in self.manifest["segments"]}
        for p in self.path.iterdir():
            if OWN_FILE.fullmatch(p.name) and p.name not in listed:
                p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing (caller side)
    def append(
        self,
        group: str | int,
        obs: Any,
        actions: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        episode_start: Any,
    ) -> None:
        """Queue `T` steps of the `N` streams of `group` (leading dims `(T, N)` or `(N,)`). Appends of different groups
        may come from different threads (one agent each); the steps of one group, from one thread at a time.

        `obs[t, n]` is the stacked observation `(stack, *frame_shape)` the agent acted on, `actions[t, n]`
        the action taken (an integer that fits int32), `rewards`/`terminated`/`truncated` what that env step
        returned (rewards finite, within float32), and `episode_start[t, n]` whether `obs[t, n]` is a reset
        observation. Numpy arrays or torch tensors (on any device); the Lake copies what it needs before
        returning, so buffers may be reused. A batch that breaks a rule raises LakeMismatchError naming the
        field, and nothing of it is stored.
        """
        self._check_writable()
        group = str(group)
        fields = {
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "episode_start": episode_start,
        }
        obs_shape = tuple(obs.shape)
        stack_shape = (self.stack_size, *self.frame_shape)
        if obs_shape[-len(stack_shape) :] != stack_shape or len(obs_shape) not in (
            len(stack_shape) + 1,
            len(stack_shape) + 2,
        ):
            raise LakeMismatchError(
                f"obs has shape {obs_shape}, but this Lake stores stack_size={self.stack_size} frames of "
                f"frame_shape={self.frame_shape}: expected (T, N, {', '.join(map(str, stack_shape))}) or (N, ...)"
            )
        dtype = str(obs.dtype).replace("torch.", "")
        if np.dtype(dtype) != self.frame_dtype:
            raise LakeMismatchError(f"obs has dtype {dtype}, this Lake stores frame_dtype={self.frame_dtype.name}")
        lead = obs_shape[: len(obs_shape) - len(stack_shape)]
        for name, value in fields.items():
            if name != "obs" and tuple(value.shape) != lead:
                raise LakeMismatchError(
                    f"{name} has shape {tuple(value.shape)}, expected {lead} to match obs {obs_shape}"
                )
        known = self._group_streams.setdefault(
            group, self.manifest["groups"].get(group, {}).get("num_streams", lead[-1])
        )
        if known != lead[-1]:
            raise LakeMismatchError(
                f"group {group!r} has num_streams={known} in Lake {self.path}, this append has "
                f"{lead[-1]} streams (was the Lake made with another --num-envs?)"
            )
        _check_values(actions, rewards)
        if len(lead) == 1:
            fields = {k: v[None] for k, v in fields.items()}
        if hasattr(obs, "clone") and obs.device.type == "cpu":  # a CPU tensor is a numpy array without the copy
            fields = {k: _to_numpy(v) for k, v in fields.items()}
        obs = fields.pop("obs")
        _check_stacking(obs, fields["episode_start"], self._stack_check_rng)
        session_start = group not in self._session_groups  # this writer's first steps of these streams
        # accelerator: one cheap copy on its device; slicing and transfer on the writer thread
        if hasattr(obs, "clone"):
            payload = {
                "obs": obs.clone(),
                **{k: v.clone() if hasattr(v, "clone") else np.array(v, copy=True) for k, v in fields.items()},
            }
        else:  # numpy: copy only what is stored, the newest frames and whole stacks at boundaries
            payload = {k: np.array(_to_numpy(v), copy=True) for k, v in fields.items()}
            boundary = payload["episode_start"].astype(bool)
            boundary[0] |= session_start
            # newest frames stream-major (N, T, ...): each stream's run of frames is contiguous for the codec
            payload.update(
                boundary=boundary, newest=np.ascontiguousarray(obs[:, :, -1].swapaxes(0, 1)), stacks=obs[boundary]
            )
        self._session_groups.add(group)
        self._put(("append", group, session_start, payload))

    def commit(self, wait: bool = False) -> None:
        """Publish every step appended before this call (atomically, once written). `wait=True` returns
        only once they are committed and raises any error the writer met."""
        self._check_writable()
        done = threading.Event()
        self._put(("commit", done))
        if wait:
            while not done.wait(0.1):
                if self._error is not None or not self._writer.is_alive():
                    break
            self._raise_writer_error()

    def _check_writable(self) -> None:
        if self._closed:
            raise LakeError(f"Lake {self.path} is closed")
        self._raise_writer_error()

    def _raise_writer_error(self) -> None:
        # a fresh one each time: raising the stored one would chain the callers' frames to it
        if self._error is not None:
            raise type(self._error)(*self._error.args)

    def _put(self, item: tuple) -> None:
        with self._writer_start:
            if self._writer is None:
                self._writer = threading.Thread(target=self._writer_loop, name="lake-writer", daemon=True)
                self._writer.start()
        while True:  # bounded queue: backpressure on the trainer when the writer falls behind
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                if item[0] != "stop":
                    self._raise_writer_error()

    # ------------------------------------------------------------------ writing (writer thread)
    def _writer_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item[0] == "stop":
                return
            if self._error is not None:  # keep draining so the caller never blocks on a dead writer
                if item[0] == "commit":
                    item[1].set()
                continue
            try:
                if item[0] == "append":
                    self._write(item[1], self._host_payload(item[2], item[3]))
                else:
                    self._commit()
                    item[1].set()
            except BaseException as e:  # surfaced to the caller on its next call
                self._set_error(e)
                if item[0] == "commit":
                    item[1].set()

    def _set_error(self, e: BaseException) -> None:
        """Keep the writer's first error as its class and message only: its traceback would keep the writer's frames
        alive (their arrays, and HDF5 objects that must not outlive their file), as long as the error is kept."""
        if self._error is None:
            if isinstance(e, LakeError):
                self._error = type(e)(*e.args)
            else:
                full = isinstance(e, OSError) and e.errno in _DISK_FULL
                self._error = (LakeDiskFullError if full else LakeError)(
                    f"Lake {self.path}: writer failed: {type(e).__name__}: {e}"
                )

    def _host_payload(self, group_session_start: bool, fields: dict) -> dict[str, np.ndarray]:
        """Bring an append's tensors to host numpy, keeping only what is stored."""
        if "obs" not in fields:
            return fields
        obs = fields.pop("obs")
        fields = {k: _to_numpy(v) for k, v in fields.items()}
        boundary = fields["episode_start"].astype(bool)
        boundary[0] |= group_session_start
        import torch as th

        mask = th.from_numpy(boundary).to(obs.device)
        fields.update(
            boundary=boundary, newest=_to_numpy(obs[:, :, -1].transpose(0, 1).contiguous()), stacks=_to_numpy(obs[mask])
        )
        return fields

    def _write(self, group: str, payload: dict[str, np.ndarray]) -> None:
        steps, num_streams = payload["actions"].shape
        stack = self.stack_size
        if group not in self.manifest["groups"]:
            self.manifest["groups"][group] = {"num_streams": num_streams}
        boundary = payload["boundary"]
        # the row of payload["stacks"] that holds boundary (t, n)'s stack
        payload["stack_of"] = (np.cumsum(boundary.ravel()) - 1).reshape(steps, num_streams)
        t = 0
        while t < steps:
            open_seg = self._open.get(group)
            if open_seg is None:
                open_seg = self._new_segment(group, num_streams)
            # Steps that fit: records left, and frames left in every stream (a boundary needs a whole stack).
            frames_needed = np.cumsum(np.where(boundary[t:], stack, 1), axis=0)  # (steps - t, num_streams)
            fits = (frames_needed <= (open_seg.seg.chunks_cap * self.chunk_frames - open_seg.frames)[None]).all(axis=1)
            fit = min(steps - t if fits.all() else int(np.argmin(fits)), open_seg.seg.steps_cap - open_seg.written)
            if fit == 0:
                self._seal_open(group)
                continue
            self._write_steps(open_seg, payload, t, t + fit)
            t += fit

    def _write_steps(
        self, open_seg: _Open, payload: dict[str, np.ndarray], t0: int, t1: int, extra_flags: int = 0
    ) -> None:
        """Steps t0..t1-1 into the journal: records, then each stream's finished chunks, compressed."""
        boundary = payload["boundary"][t0:t1]
        newest, stacks, stack_of = payload["newest"], payload["stacks"], payload["stack_of"]
        seg, chunk, num_streams = open_seg.seg, self.chunk_frames, boundary.shape[1]
        n_frames = np.where(boundary, self.stack_size, 1)  # (k, num_streams)
        records = np.empty((num_streams, t1 - t0), RECORD_DTYPE)
        records["frame_end"] = (open_seg.frames[None] + np.cumsum(n_frames, axis=0)).T
        records["action"] = payload["actions"][t0:t1].T
        records["reward"] = payload["rewards"][t0:t1].T
        records["flags"] = (
            payload["terminated"][t0:t1].astype(np.uint8) * TERMINATED
            | payload["truncated"][t0:t1].astype(np.uint8) * TRUNCATED
            | payload["episode_start"][t0:t1].astype(np.uint8) * EPISODE_START
            | boundary.astype(np.uint8) * BOUNDARY
            | extra_flags
        ).T
        blobs, where = [], []  # finished chunks (compressed below, on all threads), and (stream, chunk) of each
        for n in range(num_streams):
            _pwrite_all(seg.fd, [records[n]], seg.record_pos(n, open_seg.written), seg.path)
            new = newest[n, t0:t1]  # the newest frame of each step, whole stacks at boundaries
            if boundary[:, n].any():
                parts, t = [], t0
                for b in (np.flatnonzero(boundary[:, n]) + t0).tolist():
                    parts += [newest[n, t:b], stacks[stack_of[b, n]]]
                    t = b + 1
                new = np.concatenate(parts + [newest[n, t:t1]])
            have = int(open_seg.frames[n] % chunk)
            if have + len(new) < chunk:  # the unfinished chunk grows
                open_seg.pending[n, have : have + len(new)] = new
            else:
                if have:
                    new = np.concatenate([open_seg.pending[n, :have], new])
                whole = len(new) // chunk * chunk
                for c in range(0, whole, chunk):
                    blobs.append(new[c : c + chunk])
                    where.append((n, (int(open_seg.frames[n]) - have + c) // chunk))
                open_seg.pending[n, : len(new) - whole] = new[whole:]
            open_seg.frames[n] += int(n_frames[:, n].sum())
        if blobs:  # chunk bytes first, then the index entries that point at them
            blobs = _spread(self._reader_pool(), self.read_threads, self._compress, blobs)
            sizes = np.array([len(b) for b in blobs], np.int64)
            offsets = open_seg.data_end + np.concatenate([[0], np.cumsum(sizes)[:-1]])
            _pwrite_all(seg.fd, blobs, open_seg.data_end, seg.path)
            open_seg.data_end += int(sizes.sum())
            for (n, c), offset, size in zip(where, offsets.tolist(), sizes.tolist()):
                open_seg.index[n, c] = (offset, size)
            streams = sorted({n for n, _ in where})
            for n in streams:
                cs = [c for m, c in where if m == n]
                _pwrite_all(seg.fd, [open_seg.index[n, cs[0] : cs[-1] + 1]], seg.index_pos(n, cs[0]), seg.path)
        open_seg.written += t1 - t0
        open_seg.tails_stale = True
        self._touched.add(seg.fd)

    def _new_segment(self, group: str, num_streams: int) -> _Open:
        S, K = self.stack_size, self.chunk_frames
        steps_cap = max(16, self.segment_bytes // (num_streams * self.frame_nbytes))
        chunks_cap = -(-(2 * steps_cap + 2 * S) // K)  # frames: a boundary stores a whole stack
        index = self.manifest["next_segment"]
        name = _segment_name(index, sealed=False)
        records_offset = 0
        index_offset = _round_up(num_streams * steps_cap * RECORD_DTYPE.itemsize)
        data_start = _round_up(index_offset + num_streams * chunks_cap * INDEX_DTYPE.itemsize)  # = _data_start
        try:
            fd = os.open(self.path / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, data_start)  # sparse: records and index cost blocks as they are written
            finally:
                os.close(fd)
        except OSError as e:
            (self.path / name).unlink(missing_ok=True)
            if e.errno in _DISK_FULL:
                raise LakeDiskFullError(f"disk full while creating {self.path / name}: {e.strerror}") from e
            raise
        meta = {
            "file": name,
            "index": index,
            "group": group,
            "num_streams": num_streams,
            "steps": 0,
            "steps_cap": steps_cap,
            "chunks_cap": chunks_cap,
            "records_offset": records_offset,
            "index_offset": index_offset,
            "tails": [None] * num_streams,
        }
        seg = _Segment(self.path, meta, writable=True, manifest=self.manifest)
        self.manifest["next_segment"] = index + 1
        open_seg = self._open[group] = _Open(seg, data_start, K, self.frame_shape, self.frame_dtype)
        with self._lock:
            self._segments = self._segments + [seg]  # sampled only once its steps are committed
        carry = self._carry.pop(group, None)
        if carry is not None:
            # Carry: the stream's last step with its whole stack, so that its transition lives in this
            # segment and no transition spans two files.
            stacks, last = carry
            flags = last["flags"]
            carry = {
                "actions": last["action"][None],
                "rewards": last["reward"][None],
                "terminated": (flags & TERMINATED)[None] > 0,
                "truncated": (flags & TRUNCATED)[None] > 0,
                "episode_start": (flags & EPISODE_START)[None] > 0,
                "boundary": np.ones((1, num_streams), bool),
                "newest": stacks[:, None, -1],
                "stacks": stacks,
                "stack_of": np.arange(num_streams)[None],
            }
            self._write_steps(open_seg, carry, 0, 1, extra_flags=CARRY)
        return open_seg

    def _write_tails(self, open_seg: _Open) -> None:
        """Each stream's unfinished chunk, compressed as it stands, appended; `tails` point at them."""
        K, N = self.chunk_frames, len(open_seg.frames)
        have = (open_seg.frames % K).tolist()
        blobs = _spread(
            self._reader_pool(),
            self.read_threads,
            self._compress,
            [open_seg.pending[n, : have[n]] for n in range(N) if have[n]],
        )
        offset = open_seg.data_end
        if blobs:
            _pwrite_all(open_seg.seg.fd, blobs, open_seg.data_end, open_seg.seg.path)
            open_seg.data_end += sum(len(b) for b in blobs)
        tails, i = [], 0
        for n in range(N):
            if have[n]:
                tails.append([int(open_seg.frames[n]) // K, offset, len(blobs[i])])
                offset, i = offset + len(blobs[i]), i + 1
            else:
                tails.append(None)
        open_seg.tails, open_seg.tails_stale = tails, False

    def _seal_open(self, group: str) -> None:
        """The group's segment is full: seal it now (published with the next commit) and keep the last step
        of each stream to carry into the next segment."""
        open_seg = self._open.pop(group)
        if open_seg.tails_stale:
            self._write_tails(open_seg)
        self._sealed[open_seg.seg.index] = self._seal(open_seg.seg, open_seg.written, open_seg.tails)
        last = np.stack(
            [
                open_seg.seg.read_records(n, open_seg.written - 1, open_seg.written)[0]
                for n in range(open_seg.seg.num_streams)
            ]
        )
        stacks = np.empty((open_seg.seg.num_streams, self.stack_size, *self.frame_shape), self.frame_dtype)
        for n, end in enumerate(last["frame_end"].tolist()):  # read back (from the page cache)
            open_seg.seg.read_frames(
                n, open_seg.tails, end - self.stack_size, end, _bytes(stacks[n]), self.frame_nbytes, self.chunk_frames
            )
        self._carry[group] = (stacks, last)

    def _seal(self, journal: _Segment, steps: int, tails: list) -> _Segment:
        """Build the sealed .h5 of a journal's first `steps` steps and write it under a temporary name, closed, then
        renamed. HDF5 builds it in memory (its compressed size: ~10-35 MB for 1 GB of Atari frames): a full disk
        then fails our own write, with the file's name, and never HDF5's close, after which freeing an h5py
        object of that file crashes the process (H5D_close)."""
        image, records_offset, index_offset, chunks = self._build_sealed(journal, steps, tails)
        name = _segment_name(journal.index, sealed=True)
        tmp, final = self.path / (name + ".tmp"), self.path / name
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                if e.errno in _DISK_FULL:
                    raise LakeDiskFullError(f"disk full while creating {tmp}: {e.strerror}") from None
                raise
            try:
                _pwrite_all(fd, [image], 0, tmp)
                if self.fsync_every > 0:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)  # a segment file under its final name always is complete
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        meta = {
            "file": name,
            "index": journal.index,
            "group": journal.group,
            "num_streams": journal.num_streams,
            "steps": steps,
            "steps_cap": steps,
            "chunks_cap": chunks,
            "records_offset": records_offset,
            "index_offset": index_offset,
            "tails": None,
        }
        return _Segment(self.path, meta, writable=False, manifest=self.manifest)

    def _build_sealed(self, journal: _Segment, steps: int, tails: list) -> tuple[memoryview, int, int, int]:
        """The bytes of a sealed segment, its records' and chunk index's offsets in them, and its chunks per stream."""
        buf = io.BytesIO()
        h5 = h5py.File(buf, "w", libver="latest")
        try:
            offsets = self._fill_sealed(h5, journal, steps, tails)
        except BaseException as e:
            traceback.clear_frames(e.__traceback__)  # the failed build's Datasets go before their File closes
            raise
        finally:
            h5.close()
        return buf.getbuffer(), *offsets

    def _fill_sealed(self, h5: h5py.File, journal: _Segment, steps: int, tails: list) -> tuple[int, int, int]:
        """Fill a sealed segment: its records, its finished chunks as stored, and the unfinished one of each stream
        padded to a whole chunk and compressed again. Its Datasets live in this frame only."""
        K, N, fs, frame_nbytes = self.chunk_frames, journal.num_streams, self.frame_shape, self.frame_nbytes
        records = journal.read_records_all(steps)
        index = np.empty((N, journal.chunks_cap), INDEX_DTYPE)
        _pread_into(journal.fd, index, journal.index_offset, journal.path)
        frames = records["frame_end"][:, -1]  # steps >= 1: a segment starts with a boundary (its whole stack)
        chunks = int(-(-int(frames.max()) // K))
        h5.attrs.update(
            {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "frame_shape": fs,
                "frame_dtype": self.frame_dtype.name,
                "stack_size": self.stack_size,
                "chunk_frames": K,
                "codec": "zstd",
                "env_id": self.manifest["env_id"],
                "group": journal.group,
                "segment_index": journal.index,
                "num_streams": N,
                "steps": steps,
                "flag_bits": FLAG_BITS,
                "chunk_checksum": self.manifest["chunk_checksum"],
            }
        )
        records_ds = _create_contiguous(h5, "records", (N, steps), RECORD_DTYPE)
        index_ds = _create_contiguous(h5, "chunk_index", (N, chunks), INDEX_DTYPE)
        records_ds[...] = records
        ds = h5.create_dataset(
            "frames",
            shape=(N, chunks * K, *fs),
            dtype=self.frame_dtype,
            chunks=(1, K, *fs),
            **hdf5plugin.Zstd(clevel=ZSTD_LEVEL),
        )
        zeros = (0,) * len(fs)
        for n in range(N):
            whole = int(frames[n]) // K
            journal.check_chunks(index[n, :whole].view(np.int64).ravel().tolist(), n, 0)
            for c in range(whole):
                offset, size = index[n, c].tolist()
                ds.id.write_direct_chunk((n, c * K, *zeros), _pread(journal.fd, size, offset, journal.path))
            if frames[n] % K:  # the unfinished chunk: decoded, padded, compressed whole
                block = np.zeros((K, *fs), self.frame_dtype)
                journal.read_frames(n, tails, whole * K, int(frames[n]), _bytes(block), frame_nbytes, K)
                ds.id.write_direct_chunk((n, whole * K, *zeros), self._compress([block])[0])
        table = np.zeros((N, chunks), INDEX_DTYPE)

        def where(info) -> None:
            table[info.chunk_offset[0], info.chunk_offset[1] // K] = (info.byte_offset, info.size)

        ds.id.chunk_iter(where)
        index_ds[...] = table
        return records_ds.id.get_offset(), index_ds.id.get_offset(), chunks

    def _resume(self, seg: _Segment) -> _Open:
        """The writer's state of a journal at its committed point: what was written past it is overwritten. What
        it reads is checked, as a sampler's reads are: it decides where the next bytes go."""
        steps, tails = seg.state
        K, N = self.chunk_frames, seg.num_streams
        open_seg = _Open(seg, _data_start(seg), K, self.frame_shape, self.frame_dtype)
        open_seg.written, open_seg.tails = steps, tails
        if steps:
            open_seg.frames = seg.read_records_all(steps)["frame_end"][:, -1].copy()
        ends = [open_seg.data_end]
        for n in range(N):
            whole, have = divmod(int(open_seg.frames[n]), K)
            # only the committed entries: a journal of small frames has millions of index entries per stream
            _pread_into(seg.fd, open_seg.index[n, :whole], seg.index_pos(n, 0), seg.path)
            seg.check_chunks(open_seg.index[n, :whole].view(np.int64).ravel().tolist(), n, 0)
            ends += (open_seg.index[n, :whole]["offset"] + open_seg.index[n, :whole]["nbytes"]).tolist()
            if have:  # the unfinished chunk, from its committed tail
                if tails[n] is None or tails[n][0] != whole:
                    raise LakeCorruptError(
                        f"{seg.path}: stream {n} has {have} frames past its last whole chunk, and "
                        f"{MANIFEST} names no unfinished chunk {whole} for it (tails: {tails[n]})"
                    )
                seg.read_frames(
                    n, tails, whole * K, whole * K + have, _bytes(open_seg.pending[n, :have]), self.frame_nbytes, K
                )
                ends.append(tails[n][1] + tails[n][2])
        open_seg.data_end = max(ends)
        return open_seg

    def _commit(self) -> None:
        for open_seg in self._open.values():
            if open_seg.tails_stale:
                self._write_tails(open_seg)
        self._commits_since_fsync += 1
        durable = self.fsync_every > 0 and self._commits_since_fsync >= self.fsync_every
        if durable:  # data first, then the manifest that points at it (sealed files were fsynced when built)
            for fd in self._touched:
                os.fsync(fd)
            self._touched.clear()
            self._commits_since_fsync = 0
        open_by_index = {open_seg.seg.index: open_seg for open_seg in self._open.values()}
        with self._lock:
            segments = list(self._segments)
        kept, gone = [], []
        for seg in segments:
            if seg.index in self._sealed:  # a journal gives way to its sealed segment
                gone.append(seg)
                kept.append(self._sealed[seg.index])
            else:
                if seg.index in open_by_index:
                    open_seg = open_by_index[seg.index]
                    seg.meta.update(steps=open_seg.written, tails=open_seg.tails)
                kept.append(seg)
        metas = [dict(seg.meta) for seg in kept]
        manifest = dict(self.manifest, segments=metas, commits=self.manifest["commits"] + 1)
        # FIFO eviction: drop the oldest sealed segments while the Lake holds more than `capacity` steps.
        evicted = set()
        if manifest["capacity"] > 0:
            total = sum(m["steps"] * m["num_streams"] for m in metas)
            for m in metas:
                if total <= manifest["capacity"] or m["tails"] is not None:
                    break
                evicted.add(m["index"])
                total -= m["steps"] * m["num_streams"]
                manifest["evicted_steps"] += m["steps"] * m["num_streams"]
            manifest["segments"] = [m for m in metas if m["index"] not in evicted]
        self._publish(manifest, fsync=durable)
        self.manifest = manifest
        with self._lock:
            for seg in kept:
                seg.state = (seg.meta["steps"], seg.meta["tails"])
            self._segments = [s for s in kept if s.index not in evicted]
        self._sealed.clear()
        # Unlinked once the manifest stops naming them; a crash here leaves orphans, removed on reopen.
        # Their fds close when the last reference goes: a sampler may still be reading them.
        for seg in gone + [s for s in kept if s.index in evicted]:
            seg.path.unlink(missing_ok=True)
            self._touched.discard(seg.fd)

    def _publish(self, manifest: dict, fsync: bool = False) -> None:
        tmp = self.path / (MANIFEST + ".tmp")
        data = json.dumps(manifest, separators=(",", ":")).encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _pwrite_all(fd, [data], 0, tmp)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path / MANIFEST)
            if fsync:
                dir_fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        except OSError as e:
            if e.errno in _DISK_FULL:
                raise LakeDiskFullError(f"disk full while writing {tmp}: {e.strerror}") from e
            raise


def _round_up(offset: int) -> int:
    return -(-offset // 4096) * 4096


def _data_start(journal: _Segment) -> int:
    """Where a journal's chunks begin: after its records and chunk index, page aligned."""
    return _round_up(journal.index_pos(journal.num_streams, 0))


def _bytes(a: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, writable (also when it is empty, which memoryview.cast refuses)."""
    return memoryview(a.reshape(-1).view(np.uint8))


def _read_back(seg: _Segment, size: int) -> None:
    """Read a segment file whole (into a scratch buffer, 1 MB at a time) if it misses one of its probed pages in
    the page cache. A probe is a 1-byte read with RWF_NOWAIT, which fails rather than wait for the disk."""
    try:
        for offset in range(0, size, max(4096, size // READ_BACK_PROBES)):
            os.preadv(seg.fd, [_PROBE], offset, _RWF_NOWAIT)
        return
    except BlockingIOError:
        pass
    except OSError:  # RWF_NOWAIT refused (an old kernel, another file system): reads stay random
        return
    buf, offset = bytearray(1 << 20), 0
    while offset < size:
        got = os.preadv(seg.fd, [buf], offset)
        if got <= 0:
            break
        offset += got


def _run_all(fn, jobs: list) -> None:
    for job in jobs:
        fn(job)


def _raise_nofile_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:  # a Lake keeps one fd per segment open
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
        except (ValueError, OSError):
            pass


def _create_contiguous(h5: h5py.File, name: str, shape: tuple, dtype: np.dtype) -> h5py.Dataset:
    # Contiguous and allocated at creation, so that its byte offset is known and fixed.
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return h5.create_dataset(name, shape=shape, dtype=dtype, fill_time="never", dcpl=dcpl)


def _alloc(shape: tuple, dtype: np.dtype, torch: bool, pin_memory: bool):
    if not torch:
        return np.empty(shape, dtype)
    import torch as th

    pin = pin_memory and th.cuda.is_available()
    return th.empty(shape, dtype=getattr(th, dtype.name), pin_memory=pin)


# ---------------------------------------------------------------------- command line
def inspect(path: tyro.conf.Positional[str]) -> None:
    """Print a Lake's size, compression, agents (groups), streams, episodes and returns.

    Args:
        path: the Lake's directory (e.g. runs/<run>/lake)
    """
    with Lake(path, mode="r") as lake:
        s = lake.stats()
    print(
        f"Lake {s['path']}  env_id={s['env_id'] or '?'}  frames {s['frame_shape']} {s['frame_dtype']}  stack "
        f"{s['stack_size']}"
        f"  zstd chunks of {s['chunk_frames']} frames"
    )
    print(
        f"  {s['transitions']:,} steps in {s['segments']} segments, {s['disk_bytes'] / 1e6:,.1f} MB on disk "
        f"({s['disk_bytes'] / max(1, s['transitions']):,.0f} B/step; {s['compression']:.1f}x smaller than its frames "
        f"and records raw); capacity {s['capacity'] or 'unbounded'}, {s['evicted_steps']:,} steps evicted"
    )
    for name, g in s["groups"].items():
        r = np.array(g["returns"])
        ret = f"return mean {r.mean():.2f} min {r.min():.2f} max {r.max():.2f}" if len(r) else "no complete episode"
        print(f"  agent {name}: {g['streams']} streams, {g['steps']:,} steps, {len(r)} episodes, {ret}")


def fill(
    path: tyro.conf.Positional[str],
    env_id: str = "Breakout-v5",
    num_envs: int = 8,
    steps: int = 500,
    seed: int = 1,
    segment_mb: int = 64,
) -> None:
    """Fill a Lake with random-policy Atari play (ale-py `AtariVectorEnv`), then inspect it: a smoke test.

    Args:
        path: the Lake's directory (created if missing; appended to if it is a Lake of the same game)
        env_id: the Atari game, as in the scripts (e.g. Breakout-v5, MsPacman-v5)
        num_envs: envs stepped together (the Lake's streams)
        steps: steps of every env
        seed: seed of the envs and of the random actions
        segment_mb: raw frame bytes per segment, in MB (compressed on disk to a few percent of it)
    """
    from ale_py.vector_env import AtariVectorEnv

    for name, value in (("num_envs", num_envs), ("steps", steps), ("segment_mb", segment_mb)):
        if value < 1:
            raise ValueError(f"fill: --{name.replace('_', '-')} {value}: must be >= 1")
    game = "".join("_" + c.lower() if c.isupper() else c for c in env_id.split("-")[0]).lstrip("_")
    try:
        envs = AtariVectorEnv(game, num_envs, episodic_life=False, life_loss_info=True, reward_clipping=False)
    except Exception as e:  # ale-py names no game it lacks in one line
        raise ValueError(f"fill: --env-id {env_id}: no such Atari game in ale-py ({e})") from None
    obs, info = envs.reset(seed=seed)
    episode_start, game_over = np.ones(num_envs, bool), np.zeros(num_envs, bool)
    rng = np.random.default_rng(seed)
    with Lake(
        path, frame_shape=obs.shape[2:], stack_size=obs.shape[1], env_id=env_id, segment_bytes=segment_mb << 20
    ) as lake:
        t0 = time.time()
        for _ in range(steps):
            actions = rng.integers(0, envs.single_action_space.n, num_envs)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            lake.append(0, obs, actions, rewards, terminated, truncated, episode_start)
            # Next-step autoreset: a game over returns the final obs; the step after it returns a reset obs.
            episode_start, game_over = game_over, truncated | (terminated & (info["lives"] == 0))
            obs = next_obs
        lake.commit(wait=True)
        print(f"wrote {steps * num_envs:,} steps in {time.time() - t0:.1f}s")
    envs.close()
    inspect(path)


def _usage_error(message: str) -> None:
    """A user's mistake: one line and exit code 2, as argparse (tyro) does for a malformed flag."""
    print(f"lake.py: error: {message}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    try:
        tyro.extras.subcommand_cli_from_dict({"inspect": inspect, "fill": fill}, description=__doc__.split("\n")[0])
    except (LakeError, ValueError) as e:  # not a Lake, locked, made with other settings, a bad flag value
        _usage_error(str(e))
