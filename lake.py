"""lake.py: a crash-safe, RAM-flat replay store on disk (HDF5 as the container, `preadv` as the access path).

The Lake holds the transitions of groups of env streams (one group per agent, one stream per env of its
vectorised env). Frames are stored once: a transition's stacked observation and next observation are
rebuilt on read from single frames, bit-for-bit as the agent saw them.

Layout of a Lake directory
--------------------------
    manifest.json        the committed state; replaced atomically (write tmp, flush, os.replace)
    writer.lock          flock'ed by the one writer process (released by the kernel if it dies)
    segment_000000.h5    one HDF5 file per segment; a segment holds `segment_steps` steps of every
    segment_000001.h5    stream of one group, and is deleted whole when evicted (FIFO)

Each segment file opens in plain h5py and describes itself (root attributes `format`, `format_version`,
`frame_shape`, `frame_dtype`, `stack_size`, `env_id`, `group`, `segment_index`, `num_streams`,
`segment_steps`, `frame_capacity`, `flag_bits`), with two contiguous, preallocated datasets:

    frames   (num_streams, frame_capacity, *frame_shape)  frame_dtype   each stream's frames, in order
    records  (num_streams, segment_steps)  compound:      one record per step of the stream
               frame_end  int64    end (exclusive) of this step's frames in the stream's frame row
               action     int32    action taken on this step's observation
               reward     float32  reward returned by that step (as given; the Lake never clips)
               flags      uint8    bit 0 terminated, 1 truncated, 2 episode_start (obs is a reset obs),
                                   3 boundary (full stack stored; no transition leads into this step),
                                   4 carry (copy of the previous segment's last step)

The stacked observation of step t is `frames[stream, frame_end[t] - stack_size : frame_end[t]]`. A step
writes one frame (its newest) unless it is a boundary, which writes its whole stack. Step t is a valid
transition when step t+1 is committed and not a boundary; then its next observation is the same slice
shifted by one frame, so a transition is `stack_size + 1` contiguous frames: one `preadv`. Streams follow
next-step autoreset (ale-py, envpool, gymnasium>=1.0): after a terminated/truncated step the next
observation is the final one, and the step after it is a reset obs (`episode_start`), so the final
transition keeps its true next observation and the autoreset step never becomes a transition. Each
segment starts with a carry copy (full stack) of the stream's last step in the previous segment, so no
transition spans two files.

Why this shape: chunked/resizable HDF5 datasets that are never flushed were unreadable after SIGKILL, and
h5py selections sample only hundreds of transitions/s. Here HDF5 metadata never changes after a segment
is created (created under a temporary name, then renamed); the data is written with `pwritev` at
`dataset.id.get_offset()`, and a step is committed only when `manifest.json`, which holds every segment's
committed step count, is atomically replaced after the data was written. The page cache survives the
death of the process, so a committed step survives SIGKILL; `fsync_every` adds node-crash durability.
Nothing is scanned on reopen: bytes past the committed counts are simply overwritten.

The I/O paths, measured on a 2-core VM (benchmarks/lake_bench.py prints what a machine allows any store):
appending is bound by how fast new data can enter the page cache (~300 MB/s there, as the page cache grows
by GBs and dirty pages pile up), so by default a drop-behind thread writes each stream's frames back with
`sync_file_range` and drops them with `POSIX_FADV_DONTNEED`, a chunk behind the writer: the page cache stays
flat and appends run near the disk's bandwidth (~1 GB/s there). Sampling reads the records buffered (they
are 0.25% of the data and stay cached) and a transition's frames in one read: from the page cache where
`cachestat(2)` finds all its pages there, else with `O_DIRECT` (a cold read through the page cache costs a
page allocation per 4 KB and readahead nobody asked for). Cold reads go out by Linux AIO from the sampling
thread, up to 128 in flight, as the draws are made, and a copier thread copies them out of their aligned
slots; where AIO is missing, reader threads do them. Either read is coherent with the writer's buffered
writes, in this process or another.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import mmap
import os
import queue
import resource
import threading
import time
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import tyro

FORMAT = "pqn-lake"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LOCK = "writer.lock"
RECORD_DTYPE = np.dtype([("frame_end", "<i8"), ("action", "<i4"), ("reward", "<f4"), ("flags", "u1")])
TERMINATED, TRUNCATED, EPISODE_START, BOUNDARY, CARRY = 1, 2, 4, 8, 16
FLAG_BITS = "0 terminated, 1 truncated, 2 episode_start, 3 boundary, 4 carry"
IOV_MAX = 1024  # Linux's limit on iovecs per pwritev/preadv call
PAGE = mmap.PAGESIZE
DROP_BEHIND_BYTES = 128 << 10  # per stream, written frames are flushed and dropped from the page cache in chunks of this
RECORDS_CHECK_S = 0.1  # how often a sampler checks that a segment's records are in the page cache
SAMPLE_CHUNK = 64  # draws whose frames go to the disk while the next ones are drawn
AIO_DEPTH, AIO_BYTES = 128, 64 << 20  # cold frame reads in flight at once, and their slots' bytes at most
BOUNCE_BYTES = 512 << 10  # per reader thread: the aligned buffer of O_DIRECT reads (larger reads go in pieces)
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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


class _Segment:
    """One segment file: where its datasets live and how many steps of each stream are committed."""

    def __init__(self, lake_dir: Path, meta: dict, writable: bool):
        self.meta = dict(meta)
        self.path = lake_dir / meta["file"]
        self.index, self.group = meta["index"], meta["group"]
        self.num_streams, self.steps_cap, self.frame_cap = meta["num_streams"], meta["segment_steps"], meta["frame_capacity"]
        self.frames_offset, self.records_offset = meta["frames_offset"], meta["records_offset"]
        self.committed = meta["steps"]  # committed steps per stream (all streams of a group move in lockstep)
        self._records_checked = -np.inf  # when keep_records_cached last looked
        self.sealed = meta["sealed"]
        try:
            self.fd = os.open(self.path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise LakeCorruptError(f"cannot open segment {self.path}: {e}") from e
        size = os.fstat(self.fd).st_size
        end = self.records_offset + self.num_streams * self.steps_cap * RECORD_DTYPE.itemsize
        if size < end:
            os.close(self.fd)
            raise LakeCorruptError(f"segment {self.path} is truncated: {size} bytes, its datasets end at {end}")
        # O_DIRECT descriptor for cold frame reads (None where the file system refuses O_DIRECT, or where
        # cachestat(2) is missing, so that warm reads could not be told from cold ones).
        self.dfd = None
        self.cachestat_ok = _cachestat is not None and self._cachestat_sees_cache()
        if self.cachestat_ok and hasattr(os, "O_DIRECT"):
            try:
                self.dfd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):  # refused by the file system: buffered reads
                    os.close(self.fd)
                    raise LakeCorruptError(f"cannot open segment {self.path}: {e}") from e
        # Close the fds when the last reference goes (a sampler may still hold an evicted segment).
        self._finalizer = weakref.finalize(self, _close_fds, self.fd, self.dfd)

    def _cachestat_sees_cache(self) -> bool:
        """Page 0 (HDF5's superblock) was just read, so it is cached; on overlayfs cachestat(2) looks at the
        upper file's empty cache and would call every read cold (correct, but every read would go to disk)."""
        os.pread(self.fd, 1, 0)
        return _cached_pages(self.fd, 0, 1) == 1

    def frame_pos(self, stream: int, frame: int, frame_nbytes: int) -> int:
        return self.frames_offset + (stream * self.frame_cap + frame) * frame_nbytes

    def record_pos(self, stream: int, step: int) -> int:
        return self.records_offset + (stream * self.steps_cap + step) * RECORD_DTYPE.itemsize

    def read_records(self, stream: int, start: int, stop: int) -> np.ndarray:
        out = np.empty(stop - start, RECORD_DTYPE)
        _pread_into(self.fd, out, self.record_pos(stream, start), self.path)
        return out

    def keep_records_cached(self) -> None:
        """Every draw reads records, which are 0.25% of the data: where the page cache lost some of this
        segment's, read them all back in the background (POSIX_FADV_WILLNEED, one sequential read) rather
        than one page per cold draw. Checked with cachestat(2) (~1 us), at most every RECORDS_CHECK_S."""
        now = time.monotonic()
        if not self.cachestat_ok or now < self._records_checked + RECORDS_CHECK_S:
            return
        self._records_checked = now
        size = self.num_streams * self.steps_cap * RECORD_DTYPE.itemsize
        cached = _cached_pages(self.fd, self.records_offset, size)
        if cached is not None and cached < 0.9 * (size // PAGE):
            os.posix_fadvise(self.fd, self.records_offset, size, os.POSIX_FADV_WILLNEED)


# ---------------------------------------------------------------------- Linux I/O the os module lacks
class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def _load_libc() -> tuple[Any, Any, Any]:
    """(libc, sync_file_range, cachestat), each None where the platform lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None, None, None
    if hasattr(libc, "syscall"):
        libc.syscall.restype = ctypes.c_long
    sfr = getattr(libc, "sync_file_range", None)
    if sfr is not None:
        sfr.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        sfr.restype = ctypes.c_int
    cachestat = None
    # cachestat(2) never blocks (~1 us): called with the GIL held (PyDLL), as a GIL release and re-acquire
    # among busy reader threads cost tens of microseconds a call.
    syscall = getattr(ctypes.PyDLL(None, use_errno=True), "syscall", None)
    if syscall is not None and os.uname().sysname == "Linux":
        syscall.restype = ctypes.c_long
        # cachestat(2), Linux >= 6.5 (451 on every architecture): probed with a bad fd, EBADF means it exists
        if syscall(ctypes.c_long(451), ctypes.c_long(-1), None, None, ctypes.c_long(0)) == -1 and ctypes.get_errno() == errno.EBADF:
            cachestat = syscall
    return libc, sfr, cachestat


_libc, _sync_file_range, _cachestat = _load_libc()
SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE, SYNC_FILE_RANGE_WAIT_AFTER = 1, 2, 4
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a full disk, the process's file-size limit, a quota
_thread_state = threading.local()  # per reader thread: cachestat arguments and the O_DIRECT bounce buffer
_dio_align = 512  # O_DIRECT alignment: the usual logical block size; raised to the page size on EINVAL


def _cached_pages(fd: int, offset: int, size: int) -> int | None:
    """Pages of the byte range in the page cache (cachestat(2), no I/O, ~1 us); None where it cannot tell."""
    if _cachestat is None:
        return None
    st = getattr(_thread_state, "cachestat", None)
    if st is None:
        rng, out = _CachestatRange(), _Cachestat()
        st = _thread_state.cachestat = (rng, out, ctypes.byref(rng), ctypes.byref(out), ctypes.c_long(451), ctypes.c_long(0))
    rng, out, rng_p, out_p, nr, zero = st
    rng.off, rng.len = offset, size
    if _cachestat(nr, ctypes.c_long(fd), rng_p, out_p, zero) != 0:
        return None
    return out.nr_cache


def _all_cached(fd: int, offset: int, size: int) -> bool:
    """Whether every page of the byte range is in the page cache; False where that cannot be told."""
    cached = _cached_pages(fd, offset, size)
    return cached is not None and cached >= (offset + size - 1) // PAGE - offset // PAGE + 1


_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


def _pread_cached(fd: int, view: memoryview, offset: int) -> bool:
    """Fill `view` from the page cache if it holds all of it; else False (the contents of `view` undefined).
    With RWF_NOWAIT a miss also starts reading the range in the background, which a blocking read that
    follows finds under way: for small buffered reads (records), not for frames (read with O_DIRECT)."""
    global _RWF_NOWAIT
    if _RWF_NOWAIT:
        try:
            return os.preadv(fd, [view], offset, _RWF_NOWAIT) == len(view)  # short: partly cached
        except BlockingIOError:
            return False
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _RWF_NOWAIT = 0  # not on this file system: ask cachestat
    return _all_cached(fd, offset, len(view)) and os.preadv(fd, [view], offset) == len(view)


def _read_span(fd: int, dfd: int | None, view: memoryview, offset: int, path: Path, known_cold: bool = False) -> None:
    """Fill `view` from byte `offset`: from the page cache when all its pages are there, else with O_DIRECT
    reads into an aligned bounce buffer. A cold random read through the page cache spends CPU on a page
    allocation per 4 KB (and on readahead nobody asked for), and leaves the page cache bigger: O_DIRECT reads
    of cold transitions are ~30% faster here and keep the page cache flat. O_DIRECT is coherent with this
    process's buffered writes: the kernel writes back dirty pages of the range before it reads it."""
    global _dio_align
    size = len(view)
    if dfd is None or size == 0 or (not known_cold and _all_cached(fd, offset, size)):
        _pread_into(fd, view, offset, path)
        return
    bounce = getattr(_thread_state, "bounce", None)
    if bounce is None or len(bounce) < BOUNCE_BYTES + 2 * PAGE:
        bounce = _thread_state.bounce = memoryview(mmap.mmap(-1, BOUNCE_BYTES + 2 * PAGE))  # page aligned
    done = 0
    while done < size:  # pieces of up to BOUNCE_BYTES, each read as the aligned range that covers it
        pos = offset + done
        n = min(size - done, BOUNCE_BYTES)
        start = pos - pos % _dio_align
        end = -(-(pos + n) // _dio_align) * _dio_align
        try:
            got = os.preadv(dfd, [bounce[: end - start]], start)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            if _dio_align < PAGE:  # the device wants larger blocks
                _dio_align = PAGE
                continue
            got = os.preadv(fd, [bounce[: end - start]], start)  # no O_DIRECT here after all
        if got < pos + n - start:
            raise LakeCorruptError(f"{path}: short read at byte {pos} (a segment file was truncated)")
        view[done : done + n] = bounce[pos - start : pos - start + n]
        done += n


def _sync_range(fd: int, offset: int, size: int, flags: int, path: Path) -> None:
    if _sync_file_range(fd, offset, size, flags) != 0:
        err = ctypes.get_errno()
        if err in _DISK_FULL:
            raise LakeDiskFullError(f"disk full while writing {path}: {os.strerror(err)}")
        raise OSError(err, f"sync_file_range on {path}: {os.strerror(err)}")


def _close_fds(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


def _pread_into(fd: int, out: np.ndarray | memoryview, offset: int, path: Path) -> None:
    view = memoryview(out).cast("B")
    got = os.preadv(fd, [view], offset)
    while got < len(view):  # short reads only happen at EOF or on signals
        more = os.preadv(fd, [view[got:]], offset + got)
        if more == 0:
            raise LakeCorruptError(f"{path} is truncated: short read at byte {offset + got}")
        got += more


def _pwritev_all(fd: int, buffers: list, offset: int, path: Path) -> None:
    for i in range(0, len(buffers), IOV_MAX):
        chunk = buffers[i : i + IOV_MAX]
        want = sum(len(b) for b in chunk)
        done = _pwritev_retry(fd, chunk, offset, path)
        if done < want:  # short write: finish byte by byte range
            flat = b"".join(bytes(b) for b in chunk)[done:]
            while flat:
                n = _pwritev_retry(fd, [flat], offset + done, path)
                done, flat = done + n, flat[n:]
        offset += want


def _pwritev_retry(fd: int, buffers: list, offset: int, path: Path) -> int:
    try:
        return os.pwritev(fd, buffers, offset)
    except OSError as e:
        if e.errno in _DISK_FULL:
            raise LakeDiskFullError(f"disk full while writing {path}: {e.strerror}") from e
        raise


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
            "obs must be stacks (T, N, stack, *frame_shape) with the newest frame last, consecutive in time")


def _host_payload(group_session_start: bool, f: dict, stack_size: int) -> dict[str, np.ndarray]:
    """On the writer thread: bring an append's tensors to host numpy, keeping only what is stored."""
    if "obs" not in f:
        return f
    obs = f.pop("obs")
    f = {k: _to_numpy(v) for k, v in f.items()}
    boundary = f["episode_start"].astype(bool)
    boundary[0] |= group_session_start
    import torch as th

    mask = th.from_numpy(boundary).to(obs.device)
    f.update(boundary=boundary, newest=_to_numpy(obs[:, :, -1]), stacks=_to_numpy(obs[mask]))
    return f


class _DropBehind:
    """Writes the frames the writer wrote back to disk and drops them from the page cache, a chunk behind the
    writer in each stream, on its own thread.

    Why: filling new page-cache pages is what bounds buffered appends (here ~300 MB/s at 1M transitions, where
    the page cache grows by GBs and dirty pages pile up), while pages that are written back and dropped are
    reused at once (~1.2 GB/s). Per stream, `sync_file_range(WRITE)` starts the writeback of each new chunk
    of `DROP_BEHIND_BYTES`, and the chunk before it is waited for (`WAIT_BEFORE | WRITE | WAIT_AFTER`) and
    dropped (`POSIX_FADV_DONTNEED`), so the page cache holds about two chunks per stream. Only whole pages
    are dropped: a page the writer will write again is never read back from disk. Crash safety is unchanged:
    a dropped page is on disk, one not yet dropped is in the page cache; both outlive the process."""

    def __init__(self, on_error):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._on_error = on_error
        self._state: dict[int, list] = {}  # segment index -> [segment, writeback started up to, dropped up to, written up to]
        self._group_segment: dict[str, int] = {}  # group -> index of the segment it writes
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="lake-drop-behind", daemon=True)
        self._thread.start()

    def written(self, seg: _Segment, starts: np.ndarray, ends: np.ndarray) -> None:
        """(writer thread) Each stream's frames of `seg` were written from byte `starts[n]` to `ends[n]`."""
        self._queue.put((seg, starts, ends))

    def wait(self) -> None:
        """Return once everything written before the call has been handled (for tests)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()

    def close(self) -> None:
        self._stopped = True  # what is left is written back by the kernel as usual
        self._queue.put(None)
        self._thread.join()
        self._state.clear()  # release the segments (and their fds) now, not at the next cyclic GC
        self._group_segment.clear()

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
                continue
            if self._stopped:
                continue
            try:
                self._advance(*item)
            except BaseException as e:
                self._stopped = True
                self._on_error(e)

    def _advance(self, seg: _Segment, starts: np.ndarray, ends: np.ndarray) -> None:
        state = self._state.get(seg.index)
        if state is None:
            old = self._group_segment.get(seg.group)
            if old is not None:  # the group moved on to a new segment: the old one is written no more
                self._finish(old)
            first = -(-starts // PAGE) * PAGE  # whole pages only
            state = self._state[seg.index] = [seg, first, first.copy(), first.copy()]
            self._group_segment[seg.group] = seg.index
        _, started, dropped, upto = state
        np.maximum(upto, ends // PAGE * PAGE, out=upto)
        for n in np.flatnonzero(upto - started >= DROP_BEHIND_BYTES).tolist():
            if started[n] > dropped[n]:  # the chunk started last time: written back by now, or soon
                self._drop(seg, int(dropped[n]), int(started[n]))
                dropped[n] = started[n]
            _sync_range(seg.fd, int(started[n]), int(upto[n] - started[n]), SYNC_FILE_RANGE_WRITE, seg.path)
            started[n] = upto[n]

    def _finish(self, index: int) -> None:
        seg, _, dropped, upto = self._state.pop(index)
        for n in np.flatnonzero(upto > dropped).tolist():
            self._drop(seg, int(dropped[n]), int(upto[n]))

    @staticmethod
    def _drop(seg: _Segment, lo: int, hi: int) -> None:
        flags = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER
        _sync_range(seg.fd, lo, hi - lo, flags, seg.path)
        os.posix_fadvise(seg.fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)


# Linux native AIO: io_setup, io_destroy, io_getevents, io_submit (x86-64 and the asm-generic table of arm64)
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}.get(os.uname().machine) if ctypes.sizeof(ctypes.c_void_p) == 8 else None
_IOCB = np.dtype([("data", "<u8"), ("key", "<u4"), ("rw_flags", "<i4"), ("opcode", "<u2"), ("reqprio", "<i2"),
                  ("fildes", "<u4"), ("buf", "<u8"), ("nbytes", "<u8"), ("offset", "<i8"), ("reserved2", "<u8"),
                  ("flags", "<u4"), ("resfd", "<u4")])  # struct iocb (linux/aio_abi.h), little-endian
_IO_EVENT = np.dtype([("data", "<u8"), ("obj", "<u8"), ("res", "<i8"), ("res2", "<i8")])


class _AsyncReads:
    """Cold frame reads of one call with Linux native AIO on O_DIRECT descriptors: the calling thread keeps
    up to `depth` reads in flight, with one `io_submit` per refill, and a copier thread copies each finished
    read out of its aligned slot (numpy, without the GIL) while the caller draws and submits. Reader threads
    do the same with 16 threads that each take the GIL back after every read, which on 2 cores left the disk
    idle for part of the time; so did copying on the calling thread. Not where the kernel or the
    architecture lacks AIO (`usable` False): the reader threads do it then. One caller at a time (`lock`):
    `begin`, `add`..., `finish` (or `abort`)."""

    def __init__(self, slot_bytes: int, depth: int):
        self.slot = -(-slot_bytes // PAGE) * PAGE
        self.depth = depth
        self.ctx = ctypes.c_ulong(0)
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.usable, self.closed = False, False
        if _AIO_SYSCALLS is None or _libc is None:
            return
        if _libc.syscall(ctypes.c_long(_AIO_SYSCALLS[0]), ctypes.c_long(depth), ctypes.byref(self.ctx)) != 0:
            return  # ENOSYS, EPERM (seccomp) or EAGAIN (fs.aio-max-nr reached)
        # The copier holds no reference to self, so that an unclosed reader is still collected (and stops it).
        self.copies: queue.SimpleQueue = queue.SimpleQueue()  # lists of (slot, byte in buf, view), or None: stop
        self.copied: queue.SimpleQueue = queue.SimpleQueue()  # slots copied out, free again
        self.copy_errors: list[BaseException] = []
        self.copier: list[threading.Thread] = []
        self._finalizer = weakref.finalize(self, _aio_destroy, self.ctx.value, self.pid, _AIO_SYSCALLS[1], self.copies, self.copier)
        self.buf = mmap.mmap(-1, self.slot * depth)  # page aligned, as O_DIRECT wants
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
        self.iocbs = np.zeros(depth, _IOCB)  # opcode 0: IOCB_CMD_PREAD
        self.events = np.zeros(depth, _IO_EVENT)
        self.copier.append(threading.Thread(target=_copy_out, name="lake-aio-copier", daemon=True,
                                            args=(self.copies, self.copied, np.frombuffer(self.buf, np.uint8), self.copy_errors)))
        self.copier[0].start()
        self.usable, self.dirty = True, False

    def close(self) -> None:
        """Destroy the context (io_destroy waits for the reads in flight), stop the copier once it has copied
        what it was given; the Lake makes a new reader when it needs one."""
        if self.usable:
            self.usable, self.closed = False, True
            self._finalizer()

    def begin(self, path: Path) -> None:
        """Start a call's reads (the caller holds `lock`). `dirty` until `finish` or `abort` completes: a
        reader left dirty (interrupted twice) is closed, not reused."""
        self.dirty = True
        self.path, self.pending, self.handed_back = path, deque(), []
        self.free, self.inflight, self.copying, self.submitted = list(range(self.depth)), 0, 0, 0
        self.requests: list[tuple | None] = [None] * self.depth  # the read each slot holds

    def add(self, requests: list[tuple]) -> None:
        """Queue reads (fd, dfd, view, offset) and submit what fits; hands reads that finished meanwhile to
        the copier, without waiting for any."""
        self.pending.extend(requests)
        self.submitted += len(requests)
        self._pump(block=False)

    def finish(self) -> list[tuple]:
        """Wait for every read queued and its copy. Returns the reads handed back, for the caller to read
        otherwise: those the kernel refused with EINVAL (an alignment this device does not take), and all not
        submitted when io_submit itself refuses (EAGAIN with nothing in flight, EINVAL, ...)."""
        while self.pending or self.inflight:
            self._pump(block=True)
        while self.copying:
            self.free.append(self.copied.get())
            self.copying -= 1
        if self.copy_errors:
            raise self.copy_errors[0]  # (the caller aborts)
        handed_back = self.handed_back
        self._forget()
        return handed_back

    def abort(self) -> None:
        """On an error: no read or copy may outlive the call. The context goes, as a read may be in flight
        that was never counted (an interrupt right after io_submit returned): io_destroy waits for them, and
        the copier is stopped once it has copied what it was given."""
        self.close()
        self._forget()

    def _forget(self) -> None:
        """Drop this call's references to the caller's buffers."""
        self.pending, self.handed_back, self.requests = deque(), [], [None] * self.depth
        self.dirty = False

    def _pump(self, block: bool) -> None:
        while self.copying and (not self.copied.empty() or (block and not self.inflight and not self.free)):
            self.free.append(self.copied.get())  # blocks only when every slot waits for its copy
            self.copying -= 1
        if self.pending and self.free:  # fill every free slot, with one io_submit for all of them
            k = min(len(self.free), len(self.pending))
            slots = np.array(self.free[:k], np.int64)
            reqs = [self.pending.popleft() for _ in range(k)]
            offsets = np.array([r[3] for r in reqs], np.int64)
            starts = offsets // _dio_align * _dio_align
            ends = -(-(offsets + np.array([len(r[2]) for r in reqs])) // _dio_align) * _dio_align
            cb = self.iocbs  # fields set in place (opcode stays IOCB_CMD_PREAD)
            cb["data"][slots], cb["fildes"][slots], cb["buf"][slots] = slots, [r[1] for r in reqs], self.base + slots * self.slot
            cb["nbytes"][slots], cb["offset"][slots] = ends - starts, starts
            for s, r, start in zip(slots.tolist(), reqs, starts.tolist()):
                self.requests[s] = (*r, start)
            ptrs = self.iocbs.ctypes.data + slots.astype(np.uint64) * _IOCB.itemsize
            got = _libc.syscall(ctypes.c_long(_AIO_SYSCALLS[3]), self.ctx, ctypes.c_long(k), ctypes.c_void_p(ptrs.ctypes.data))
            if got < 0:
                err, got = ctypes.get_errno(), 0
                if err in (errno.EBADF, errno.EFAULT):
                    raise OSError(err, f"io_submit on {self.path}: {os.strerror(err)}")
                if not (err in (errno.EAGAIN, errno.EINTR) and self.inflight):  # else: the queue is full, reap first
                    if err != errno.EINTR:  # this kernel or file system will not take these reads
                        self.handed_back += reqs + list(self.pending)
                        self.pending.clear()
                        reqs = []
            self.pending.extendleft(reversed(reqs[got:]))  # not submitted: first in line next time
            del self.free[:got]
            self.inflight += got
        if not self.inflight:
            return
        got = _libc.syscall(ctypes.c_long(_AIO_SYSCALLS[2]), self.ctx, ctypes.c_long(1 if block else 0),
                            ctypes.c_long(self.depth), ctypes.c_void_p(self.events.ctypes.data), None)
        if got < 0:
            err = ctypes.get_errno()
            if err != errno.EINTR:  # EINTR: a signal, whose Python handler runs now; the wait goes on
                raise OSError(err, f"io_getevents on {self.path}: {os.strerror(err)}")
            return
        self.inflight -= got
        copies = []
        try:
            for s, res in self.events[:got][["data", "res"]].tolist():
                fd, dfd, view, offset, start = self.requests[s]
                if res >= offset - start + len(view):
                    copies.append((s, s * self.slot + offset - start, view))
                    continue
                self.free.append(s)
                if res == -errno.EINVAL:
                    self.handed_back.append((fd, dfd, view, offset))
                elif res < 0:
                    raise OSError(-res, f"read of {self.path}: {os.strerror(-res)}")
                else:
                    raise LakeCorruptError(f"{self.path}: short read at byte {offset} (a segment file was truncated)")
        finally:
            if copies:
                self.copying += len(copies)  # before the put: an interrupt cannot fall between them
                self.copies.put(copies)


def _copy_out(copies: queue.SimpleQueue, copied: queue.SimpleQueue, buf: np.ndarray, errors: list) -> None:
    """The copier thread of an `_AsyncReads`: copies finished reads out of their slots, then frees the slots."""
    while (batch := copies.get()) is not None:
        for slot, lo, view in batch:
            try:
                if not errors:
                    dst = np.frombuffer(view, np.uint8)
                    np.copyto(dst, buf[lo : lo + len(dst)])
            except BaseException as e:  # raised by the caller's finish()
                errors.append(e)
            copied.put(slot)
        batch = view = dst = None  # hold no caller's buffer while waiting


def _aio_destroy(ctx: int, pid: int, io_destroy: int, copies: queue.SimpleQueue, copier: list) -> None:
    if os.getpid() != pid:  # a forked child owns neither its parent's context nor its copier
        return
    _libc.syscall(ctypes.c_long(io_destroy), ctypes.c_ulong(ctx))  # waits for the reads in flight
    copies.put(None)
    if copier and copier[0] is not threading.current_thread():
        copier[0].join()  # it copies what it was given first (microseconds a read)


def _raise_nofile_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:  # a Lake keeps one fd per segment open
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
        except (ValueError, OSError):
            pass


class _Reads:
    """The reads of one call, added as they become known (`add`) and all done when the `with` block ends:
    no read outlives it, as its buffers and fds are the caller's.

    Frames (`dfds` given) are told warm or cold by cachestat(2). Cold frames of a transition are read with
    O_DIRECT by Linux AIO on this thread (`_AsyncReads`: submitted as they are added, so that the disk works
    while the caller draws and reads the records of the next transitions), or where that is missing by the
    reader threads (`_read_span`), which start as cold reads are found, so that many disk reads are in flight
    at once. Warm frames are read at the end, shared between this thread and one reader thread per other core
    (more threads would only contend for the GIL). Records (`dfds` None), small and mostly cached, are read
    right here with RWF_NOWAIT, and those that miss on the reader threads."""

    def __init__(self, lake: Lake, frames: bool, read_bytes: int):
        self.path, self.frames, self.lake = lake.path, frames, lake
        self.threads = lake.read_threads
        self.aio: _AsyncReads | None = None
        self.aio_wanted = frames and self.threads > 1
        self.read_bytes = read_bytes
        self.cold: deque[tuple] = deque()  # taken by whichever thread is free, so none waits behind a slow read
        self.warm: list[tuple] = []
        self.tasks: list = []

    def add(self, fds: list[int], views: list[memoryview], offsets: list[int], dfds: list | None = None) -> None:
        dfds = [None] * len(views) if dfds is None else dfds
        if self.threads <= 1:
            for fd, dfd, view, offset in zip(fds, dfds, views, offsets):
                _read_span(fd, dfd, view, offset, self.path)
            return
        to_aio = []
        for req in zip(fds, dfds, views, offsets):
            fd, dfd, view, offset = req
            if not self.frames:
                if _pread_cached(fd, view, offset):  # a miss starts reading it meanwhile
                    continue
            elif _all_cached(fd, offset, len(view)):
                self.warm.append(req)
                continue
            if self.aio is not None and dfd is not None:
                to_aio.append(req)
                continue
            self.cold.append(req)
            if len(self.tasks) < self.threads:
                self.tasks.append(self.lake._reader_pool().submit(self._read_cold))
        if to_aio:
            self.aio.add(to_aio)

    def _read_cold(self) -> None:
        while True:
            try:
                fd, dfd, view, offset = self.cold.popleft()
            except IndexError:
                return
            _read_span(fd, dfd, view, offset, self.path, known_cold=self.frames)

    def _read_warm(self, reqs: list[tuple]) -> None:
        for fd, _, view, offset in reqs:
            _read_span(fd, None, view, offset, self.path)

    def __enter__(self) -> "_Reads":
        if self.aio_wanted:
            self.aio = self.lake._async_reads(self.read_bytes)  # locked for this call
        return self

    def __exit__(self, exc_type, *exc: Any) -> None:
        try:
            if exc_type is None:
                self._finish()
        except BaseException:
            exc_type = True
            raise
        finally:
            if exc_type is not None:
                self.cold.clear()  # the reader threads stop after the read they are in
                if self.aio is not None:
                    self.aio.abort()
            if self.aio is not None:
                self.aio.lock.release()
            wait(self.tasks)
        for task in self.tasks:
            task.result()

    def _finish(self) -> None:
        warm, here = self.warm, []
        busy = self.aio is not None and (self.aio.pending or self.aio.inflight)
        shares = max(1, min(_CORES, self.threads, len(warm) // 32))
        if not busy:  # else this thread waits on the disk, and the warm reads go to reader threads
            here, warm = warm[: len(warm) // shares], warm[len(warm) // shares:]
            shares -= 1
        bounds = np.linspace(0, len(warm), max(1, shares) + 1).astype(int).tolist()
        self.tasks += [self.lake._reader_pool().submit(self._read_warm, warm[lo:hi])
                       for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
        if self.aio is not None:
            sent = self.aio.submitted
            handed_back = self.aio.finish()
            if handed_back and len(handed_back) == sent and _dio_align == PAGE:
                self.lake._aio_refused = True  # the kernel takes no AIO read here: reader threads from now on
            self.cold.extend(handed_back)
            self.tasks += [self.lake._reader_pool().submit(self._read_cold) for _ in range(min(self.threads, len(handed_back) // 8))]
        self._read_warm(here)
        self._read_cold()  # what the reader threads have not taken (they may all have finished early)


class Lake:
    """A replay store on disk: `Lake(path, frame_shape=(84, 84))` creates or opens one.

    Writer side (one process, guarded by a lock file): `append(group, obs, actions, rewards, terminated,
    truncated, episode_start)` queues a batch of steps for a background writer thread (blocking only when
    its bounded queue is full), `commit()` publishes everything appended before it, `close()` commits and
    joins. Reader side (any process, `mode="r"`, or the writer itself): `sample(batch_size)` draws
    transitions uniformly with replacement; `sample_slices(num_slices, slice_steps)` returns whole stream
    slices for bulk fills; `refresh()` picks up a writer's newer commits.
    """

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
        read_threads: int = 16,
        seed: int | None = None,
        drop_behind: bool = True,
    ):
        """`capacity` is in transitions (0: unbounded); past it the oldest segments are deleted.
        `segment_bytes` sizes a segment's frames; `fsync_every` makes every n-th commit fsync data and
        manifest (0: never; committed data then survives process death, not power loss). `read_threads`
        read in parallel (cold reads wait on the disk, so more threads than cores pay). `drop_behind`
        writes appended frames back to disk and drops them from the page cache as the writer goes (see
        `_DropBehind`): appends run at disk speed and the page cache stays flat, and samples of them read
        from disk; `False` leaves them to the page cache (faster warm samples while the Lake fits in RAM)."""
        if mode not in ("a", "r"):
            raise ValueError(f"mode must be 'a' (read and write) or 'r' (read only), got {mode!r}")
        self.path = Path(path)
        self.writable = mode == "a"
        self._lock = threading.Lock()  # guards self._segments and the committed counts
        self._segments: list[_Segment] = []
        self._lock_fd: int | None = None
        self._closed = False
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._aio: _AsyncReads | None = None
        self._aio_refused = False  # set where the kernel refuses AIO reads even at page alignment
        self._records_due = -np.inf  # when samplers next check that the records are cached (`_keep_records_cached`)
        self._pool_pid = os.getpid()
        self.rng = np.random.default_rng(seed)
        self.read_threads = max(1, int(read_threads))
        self._drop_behind: _DropBehind | None = None  # started by the writer thread with its first write
        self._drop_behind_wanted = bool(drop_behind) and _sync_file_range is not None
        _raise_nofile_limit()

        manifest_path = self.path / MANIFEST
        if self.path.exists() and not self.path.is_dir():
            raise LakeCorruptError(f"{self.path} is not a Lake: a Lake is a directory holding {MANIFEST}")
        if self.writable:
            self.path.mkdir(parents=True, exist_ok=True)
            self._take_writer_lock()
        try:
            self._init_rest(manifest_path, frame_shape, frame_dtype, stack_size, env_id, capacity, segment_bytes, fsync_every, queue_size)
        except BaseException:
            self._segments = []
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            raise

    def _init_rest(self, manifest_path, frame_shape, frame_dtype, stack_size, env_id, capacity, segment_bytes, fsync_every, queue_size):
        if not manifest_path.exists():
            if not self.writable:
                raise LakeCorruptError(f"{self.path} is not a Lake: it has no {MANIFEST}")
            if any(self.path.glob("segment_*.h5")):
                raise LakeCorruptError(f"{self.path} has segment files but no {MANIFEST}: not a Lake this code made")
            if frame_shape is None:
                raise ValueError("frame_shape is required to create a new Lake (e.g. frame_shape=(84, 84))")
            self.manifest = {
                "format": FORMAT, "format_version": FORMAT_VERSION,
                "frame_shape": [int(s) for s in frame_shape], "frame_dtype": np.dtype(frame_dtype or "uint8").name,
                "stack_size": int(stack_size or 4), "env_id": env_id, "capacity": int(capacity),
                "groups": {}, "segments": [], "next_segment": 0, "evicted_steps": 0, "commits": 0,
            }
            self._publish(self.manifest)
        else:
            self.manifest = self._read_manifest()
            self._check_settings(frame_shape=frame_shape, frame_dtype=frame_dtype, stack_size=stack_size, env_id=env_id)
            if self.writable:
                self.manifest["capacity"] = int(capacity)  # a policy, not a format: may change on reopen
        self.frame_shape = tuple(self.manifest["frame_shape"])
        self.frame_dtype = np.dtype(self.manifest["frame_dtype"])
        self.stack_size = int(self.manifest["stack_size"])
        self.frame_nbytes = int(np.prod(self.frame_shape)) * self.frame_dtype.itemsize
        self.segment_bytes = int(segment_bytes)
        self.fsync_every = int(fsync_every)
        if self.writable:
            self._remove_orphans()
        self._open_segments()
        if self.writable:
            self._queue: queue.Queue = queue.Queue(maxsize=max(1, queue_size))
            # Writer-thread state: the open segment of each group and how far each stream has been written.
            self._stack_check_rng = np.random.default_rng(0)
            self._session_groups: set[str] = set()
            self._group_streams: dict[str, int] = {}  # group -> streams, checked on the caller's thread  # groups appended to by this writer (caller side)
            self._open: dict[str, _Segment] = {}
            self._written: dict[int, int] = {}  # segment index -> steps written (committed or not)
            self._frames_written: dict[str, np.ndarray] = {}  # group -> frames written per stream in its open segment
            self._sealed: dict[str, _Segment] = {}  # group -> segment sealed by this writer (source of the carry)
            self._commits_since_fsync = 0
            self._touched: set[_Segment] = set()
            self._resume_open_segments()

    # ------------------------------------------------------------------ opening and settings
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
                "open it with mode='r' to read, or point --lake-path elsewhere") from None
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, str(os.getpid()).encode(), 0)

    def _read_manifest(self) -> dict:
        manifest_path = self.path / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LakeCorruptError(f"{manifest_path} is damaged (not JSON: {e})") from e
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise LakeCorruptError(f"{manifest_path} is not a Lake manifest (no format={FORMAT!r})")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise LakeMismatchError(
                f"{self.path} has format_version={manifest.get('format_version')}, this lake.py reads {FORMAT_VERSION}")
        for key in ("frame_shape", "frame_dtype", "stack_size", "env_id", "capacity", "groups", "segments",
                    "next_segment", "evicted_steps", "commits"):
            if key not in manifest:
                raise LakeCorruptError(f"{manifest_path} is damaged: it has no {key!r}")
        return manifest

    def _check_settings(self, **given: Any) -> None:
        stored = {
            "frame_shape": tuple(self.manifest["frame_shape"]), "frame_dtype": self.manifest["frame_dtype"],
            "stack_size": self.manifest["stack_size"], "env_id": self.manifest["env_id"],
        }
        for name, value in given.items():
            if value is None or (name == "env_id" and value == ""):
                continue
            value = tuple(int(v) for v in value) if name == "frame_shape" else value
            value = np.dtype(value).name if name == "frame_dtype" else value
            if value != stored[name]:
                raise LakeMismatchError(
                    f"Lake {self.path} was made with {name}={stored[name]!r}, not {value!r}: "
                    "use a new --lake-path, or the settings it was made with")

    def _remove_orphans(self) -> None:
        """Files a crash left behind: segments created or evicted but not (or no longer) in the manifest."""
        listed = {s["file"] for s in self.manifest["segments"]}
        for p in list(self.path.glob("segment_*.h5")) + list(self.path.glob("*.tmp")):
            if p.name not in listed:
                p.unlink(missing_ok=True)

    def _open_segments(self) -> None:
        segments = []
        for meta in self.manifest["segments"]:
            try:
                segments.append(_Segment(self.path, meta, self.writable))
            except FileNotFoundError:
                if self.writable:
                    raise LakeCorruptError(f"{self.path / meta['file']} is listed in the manifest but missing") from None
                return self.refresh()  # a writer evicted it since we read the manifest
        with self._lock:
            self._segments = segments

    def refresh(self) -> None:
        """Re-read the manifest (for readers in other processes): newer commits and evictions."""
        if self.writable:
            return  # the writer's view is always current
        for _ in range(100):
            self.manifest = self._read_manifest()
            old = {s.index: s for s in self._segments}
            segments = []
            try:
                for meta in self.manifest["segments"]:
                    seg = old.get(meta["index"]) or _Segment(self.path, meta, False)
                    seg.committed, seg.sealed = meta["steps"], meta["sealed"]
                    segments.append(seg)
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            with self._lock:
                self._segments = segments
            return
        raise LakeCorruptError(f"{self.path}: segments listed in the manifest keep disappearing")

    # ------------------------------------------------------------------ writing (caller side)
    def append(self, group: str | int, obs: Any, actions: Any, rewards: Any, terminated: Any, truncated: Any,
               episode_start: Any) -> None:
        """Queue `T` steps of the `N` streams of `group` (leading dims `(T, N)` or `(N,)`).

        `obs[t, n]` is the stacked observation `(stack, *frame_shape)` the agent acted on, `actions[t, n]`
        the action taken, `rewards`/`terminated`/`truncated` what that env step returned, and
        `episode_start[t, n]` whether `obs[t, n]` is a reset observation. Numpy arrays or torch tensors
        (on any device); the Lake copies what it needs before returning, so buffers may be reused.
        """
        self._check_writable()
        group = str(group)
        fields = {"obs": obs, "actions": actions, "rewards": rewards, "terminated": terminated,
                  "truncated": truncated, "episode_start": episode_start}
        obs_shape = tuple(obs.shape)
        stack_shape = (self.stack_size, *self.frame_shape)
        if obs_shape[-len(stack_shape):] != stack_shape or len(obs_shape) not in (len(stack_shape) + 1, len(stack_shape) + 2):
            raise LakeMismatchError(
                f"obs has shape {obs_shape}, but this Lake stores stack_size={self.stack_size} frames of "
                f"frame_shape={self.frame_shape}: expected (T, N, {', '.join(map(str, stack_shape))}) or (N, ...)")
        dtype = str(obs.dtype).replace("torch.", "")
        if np.dtype(dtype) != self.frame_dtype:
            raise LakeMismatchError(f"obs has dtype {dtype}, this Lake stores frame_dtype={self.frame_dtype.name}")
        lead = obs_shape[: len(obs_shape) - len(stack_shape)]
        for name, value in fields.items():
            if name != "obs" and tuple(value.shape) != lead:
                raise LakeMismatchError(f"{name} has shape {tuple(value.shape)}, expected {lead} to match obs {obs_shape}")
        known = self._group_streams.setdefault(group, self.manifest["groups"].get(group, {}).get("num_streams", lead[-1]))
        if known != lead[-1]:
            raise LakeMismatchError(
                f"group {group!r} has num_streams={known} in Lake {self.path}, this append has "
                f"{lead[-1]} streams (was the Lake made with another --num-envs?)")
        if len(lead) == 1:
            fields = {k: v[None] for k, v in fields.items()}
        if hasattr(obs, "clone") and obs.device.type == "cpu":  # a CPU tensor is a numpy array without the copy
            fields = {k: _to_numpy(v) for k, v in fields.items()}
        obs = fields.pop("obs")
        _check_stacking(obs, fields["episode_start"], self._stack_check_rng)
        session_start = group not in self._session_groups  # this writer's first steps of these streams
        self._session_groups.add(group)
        if hasattr(obs, "clone"):  # accelerator: one cheap copy on its device; slicing and transfer on the writer thread
            payload = {"obs": obs.clone(), **{k: v.clone() if hasattr(v, "clone") else np.array(v, copy=True)
                                              for k, v in fields.items()}}
        else:  # numpy: copy only what is stored, the newest frames and whole stacks at boundaries
            payload = {k: np.array(_to_numpy(v), copy=True) for k, v in fields.items()}
            boundary = payload["episode_start"].astype(bool)
            boundary[0] |= session_start
            payload.update(boundary=boundary, newest=obs[:, :, -1].copy(), stacks=obs[boundary])
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

    def close(self) -> None:
        """Commit what was appended, stop the writer thread, release the lock. Idempotent."""
        if self._closed:
            return
        try:
            if self.writable and self._writer is not None:
                self._put(("commit", threading.Event()))
                self._put(("stop",))
                self._writer.join()
        finally:
            if self._drop_behind is not None:
                self._drop_behind.close()
            self._closed = True
            if self._pool is not None and self._pool_pid == os.getpid():
                self._pool.shutdown()
            if self._aio is not None and self._aio.pid == os.getpid():
                self._aio.close()
            with self._lock:
                self._segments = []
            if self.writable:
                self._open.clear()
                self._sealed.clear()
                self._touched.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
        self._raise_writer_error()

    def __enter__(self) -> "Lake":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self._closed:
            raise LakeError(f"Lake {self.path} is closed")
        if not self.writable:
            raise LakeError(f"Lake {self.path} was opened with mode='r'")
        self._raise_writer_error()

    def _raise_writer_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _put(self, item: tuple) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._writer_loop, name="lake-writer", daemon=True)
            self._writer.start()
        while True:  # bounded queue: backpressure on the trainer when the disk falls behind
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
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
                    self._write(item[1], _host_payload(item[2], item[3], self.stack_size))
                else:
                    self._commit()
                    item[1].set()
            except BaseException as e:  # surfaced to the caller on its next call
                self._set_error(e)
                if item[0] == "commit":
                    item[1].set()

    def _set_error(self, e: BaseException) -> None:
        if self._error is None:
            self._error = e if isinstance(e, LakeError) else LakeError(f"Lake writer failed: {e!r}")
            self._error.__cause__ = e

    def _write(self, group: str, f: dict[str, np.ndarray]) -> None:
        T, N = f["actions"].shape
        if group not in self.manifest["groups"]:
            self.manifest["groups"][group] = {"num_streams": N}
        boundary = f["boundary"]
        # stack_of[t, n]: the row of f["stacks"] holding the whole stack of boundary step (t, n)
        f["stack_of"] = (np.cumsum(boundary.ravel()) - 1).reshape(T, N)
        t = 0
        while t < T:
            seg = self._open.get(group)
            if seg is None:
                self._new_segment(group, N)
                continue
            fw = self._frames_written[group]
            # Steps that fit: records left, and frames left in every stream (a boundary needs a whole stack).
            frames_needed = np.cumsum(np.where(boundary[t:], self.stack_size, 1), axis=0)  # (T - t, N)
            fits = (frames_needed <= (seg.frame_cap - fw)[None]).all(axis=1)
            k = min(T - t if fits.all() else int(np.argmin(fits)), seg.steps_cap - self._written[seg.index])
            if k == 0:
                seg.sealed = True  # published with the next commit, together with the new segment's steps
                self._sealed[group] = self._open.pop(group)
                continue
            self._write_steps(seg, group, f, t, t + k)
            t += k

    def _write_steps(self, seg: _Segment, group: str, f: dict[str, np.ndarray], t0: int, t1: int, extra_flags: int = 0) -> None:
        boundary, newest, stacks, stack_of = f["boundary"], f["newest"], f["stacks"], f["stack_of"]
        N = boundary.shape[1]
        fw = self._frames_written[group]
        n_frames = np.where(boundary[t0:t1], self.stack_size, 1)  # (k, N)
        records = np.empty((N, t1 - t0), RECORD_DTYPE)
        records["frame_end"] = (fw[None] + np.cumsum(n_frames, axis=0)).T
        records["action"] = f["actions"][t0:t1].T
        records["reward"] = f["rewards"][t0:t1].T
        records["flags"] = (f["terminated"][t0:t1].astype(np.uint8) * TERMINATED
                            | f["truncated"][t0:t1].astype(np.uint8) * TRUNCATED
                            | f["episode_start"][t0:t1].astype(np.uint8) * EPISODE_START
                            | boundary[t0:t1].astype(np.uint8) * BOUNDARY | extra_flags).T
        written = self._written[seg.index]
        for n in range(N):
            # One scatter-gather write per stream: the newest frame of each step, whole stacks at boundaries.
            bufs = [memoryview(stacks[stack_of[t, n]] if boundary[t, n] else newest[t, n]).cast("B") for t in range(t0, t1)]
            _pwritev_all(seg.fd, bufs, seg.frame_pos(n, int(fw[n]), self.frame_nbytes), seg.path)
            _pwritev_all(seg.fd, [memoryview(records[n]).cast("B")], seg.record_pos(n, written), seg.path)
        added = n_frames.sum(axis=0)
        if self._drop_behind_wanted:
            if self._drop_behind is None:
                self._drop_behind = _DropBehind(self._set_error)
            starts = seg.frame_pos(np.arange(N), fw, self.frame_nbytes)
            self._drop_behind.written(seg, starts, starts + added * self.frame_nbytes)
        fw += added
        self._written[seg.index] = written + (t1 - t0)
        self._touched.add(seg)

    def _new_segment(self, group: str, num_streams: int) -> None:
        steps_cap = max(16, self.segment_bytes // (num_streams * self.frame_nbytes))
        frame_cap = 2 * steps_cap + 2 * self.stack_size  # sparse on disk: unused frames cost no blocks
        index = self.manifest["next_segment"]
        name = f"segment_{index:06d}.h5"
        tmp, final = self.path / (name + ".tmp"), self.path / name
        try:
            with h5py.File(tmp, "w", libver="latest") as h5:
                h5.attrs.update({
                    "format": FORMAT, "format_version": FORMAT_VERSION, "frame_shape": self.frame_shape,
                    "frame_dtype": self.frame_dtype.name, "stack_size": self.stack_size,
                    "env_id": self.manifest["env_id"], "group": group, "segment_index": index,
                    "num_streams": num_streams, "segment_steps": steps_cap, "frame_capacity": frame_cap,
                    "flag_bits": FLAG_BITS, "committed_steps": "in ../manifest.json, segments[].steps"})
                frames = _create_contiguous(h5, "frames", (num_streams, frame_cap, *self.frame_shape), self.frame_dtype)
                records = _create_contiguous(h5, "records", (num_streams, steps_cap), RECORD_DTYPE)
                frames_offset, records_offset = frames.id.get_offset(), records.id.get_offset()
            os.replace(tmp, final)  # a segment file under its final name always has complete metadata
        except (OSError, RuntimeError) as e:
            tmp.unlink(missing_ok=True)
            if isinstance(e, LakeError):
                raise
            raise LakeDiskFullError(f"cannot create segment {final} (disk full or file-size limit?): {e}") from e
        meta = {"file": name, "index": index, "group": group, "num_streams": num_streams,
                "segment_steps": steps_cap, "frame_capacity": frame_cap, "frames_offset": frames_offset,
                "records_offset": records_offset, "steps": 0, "sealed": False}
        seg = _Segment(self.path, meta, writable=True)
        self.manifest["next_segment"] = index + 1
        self._open[group] = seg
        self._written[index] = 0
        self._frames_written[group] = np.zeros(num_streams, np.int64)
        with self._lock:
            self._segments = self._segments + [seg]  # sampled only once its steps are committed
        prev = self._sealed.pop(group, None)
        if prev is not None and self._written.get(prev.index, 0) > 0:
            # Carry: the stream's last step, read back (from the page cache) with its whole stack, so that
            # its transition lives in this segment and no transition spans two files.
            last = np.stack([prev.read_records(n, self._written[prev.index] - 1, self._written[prev.index])[0]
                             for n in range(num_streams)])
            stacks = np.empty((num_streams, self.stack_size, *self.frame_shape), self.frame_dtype)
            for n in range(num_streams):
                _pread_into(prev.fd, stacks[n], prev.frame_pos(n, int(last["frame_end"][n]) - self.stack_size, self.frame_nbytes), prev.path)
            flags = last["flags"]
            carry = {"actions": last["action"][None], "rewards": last["reward"][None],
                     "terminated": (flags & TERMINATED)[None] > 0, "truncated": (flags & TRUNCATED)[None] > 0,
                     "episode_start": (flags & EPISODE_START)[None] > 0, "boundary": np.ones((1, num_streams), bool),
                     "newest": stacks[None, :, -1], "stacks": stacks, "stack_of": np.arange(num_streams)[None]}
            self._write_steps(seg, group, carry, 0, 1, extra_flags=CARRY)

    def _resume_open_segments(self) -> None:
        """Continue appending to each group's unsealed segment at its committed point."""
        for seg in self._segments:
            if not seg.sealed:
                self._open[seg.group] = seg
                self._written[seg.index] = seg.committed
                ends = [int(seg.read_records(n, seg.committed - 1, seg.committed)["frame_end"][0]) if seg.committed else 0
                        for n in range(seg.num_streams)]
                self._frames_written[seg.group] = np.array(ends, np.int64)

    def _commit(self) -> None:
        self._commits_since_fsync += 1
        durable = self.fsync_every > 0 and self._commits_since_fsync >= self.fsync_every
        if durable:  # data first, then the manifest that points at it
            if self._drop_behind is not None:  # its sync_file_range(WAIT) may have taken a writeback error that
                self._drop_behind.wait()       # fsync would no longer report: let it raise first
                self._raise_writer_error()
            for seg in self._touched:
                os.fsync(seg.fd)
            self._touched.clear()
            self._commits_since_fsync = 0
        with self._lock:
            segments = list(self._segments)
        metas = [dict(s.meta, steps=self._written.get(s.index, s.committed), sealed=s.sealed) for s in segments]
        manifest = dict(self.manifest, segments=metas, commits=self.manifest["commits"] + 1)
        # FIFO eviction: drop the oldest sealed segments while the Lake holds more than `capacity` steps.
        evicted = []
        if manifest["capacity"] > 0:
            total = sum(m["steps"] * m["num_streams"] for m in metas)
            for m in [m for m in metas if m["sealed"]]:
                if total <= manifest["capacity"]:
                    break
                evicted.append(m)
                total -= m["steps"] * m["num_streams"]
                manifest["evicted_steps"] += m["steps"] * m["num_streams"]
            manifest["segments"] = [m for m in metas if m not in evicted]
        self._publish(manifest, fsync=durable)
        self.manifest = manifest
        gone = {m["index"] for m in evicted}
        with self._lock:
            for seg, meta in zip(segments, metas):
                seg.committed = meta["steps"]
            self._segments = [s for s in segments if s.index not in gone]
        for meta in evicted:  # unlinked after the manifest stops listing them; a crash here leaves orphans, removed on reopen
            (self.path / meta["file"]).unlink(missing_ok=True)
            self._written.pop(meta["index"], None)
        self._touched = {s for s in self._touched if s.index not in gone}

    def _publish(self, manifest: dict, fsync: bool = False) -> None:
        tmp = self.path / (MANIFEST + ".tmp")
        data = json.dumps(manifest, indent=1).encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _pwritev_all(fd, [data], 0, tmp)
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

    # ------------------------------------------------------------------ reading
    @property
    def num_transitions(self) -> int:
        """Committed steps held now (each is a transition unless the next step is a boundary or missing)."""
        with self._lock:
            return sum(s.committed * s.num_streams for s in self._segments)

    def _candidates(self) -> tuple[list[_Segment], np.ndarray]:
        with self._lock:
            segments = [s for s in self._segments if s.committed >= 2]
        weights = np.array([(s.committed - 1) * s.num_streams for s in segments], np.float64)
        if weights.sum() == 0:
            raise LakeError(f"Lake {self.path} has no committed transition to sample yet")
        return segments, weights / weights.sum()

    def _read_many(self, fds: list[int], views: list[memoryview], offsets: list[int], dfds: list | None = None) -> None:
        """Fill `views[i]` from `fds[i]` at byte `offsets[i]`, for all i (see `_Reads`)."""
        with _Reads(self, frames=dfds is not None, read_bytes=max(map(len, views), default=0)) as reads:
            reads.add(fds, views, offsets, dfds)

    def _async_reads(self, read_bytes: int) -> _AsyncReads | None:
        """This Lake's AIO reader, locked for the caller: None where AIO is missing or refused, where the reads
        are larger than a transition (bulk slices: the reader threads read those in pieces), or while another
        thread uses it (that caller then uses the reader threads)."""
        if self._aio_refused or read_bytes > (self.stack_size + 1) * self.frame_nbytes:
            return None
        with self._lock:
            aio = self._aio
            if aio is None or aio.closed or aio.pid != os.getpid():  # (a forked child needs its own)
                slot = (self.stack_size + 1) * self.frame_nbytes + 2 * PAGE  # a transition, aligned for O_DIRECT
                aio = self._aio = _AsyncReads(slot, max(8, min(AIO_DEPTH, AIO_BYTES // slot)))
        if not aio.usable or not aio.lock.acquire(blocking=False):
            return None
        try:
            if aio.dirty:  # a call was interrupted while it aborted: its reads may still be in flight
                aio.close()
                aio.lock.release()
                return self._async_reads(read_bytes)
            aio.begin(self.path)
        except BaseException:
            aio.lock.release()
            raise
        return aio

    def _keep_records_cached(self, segments: list[_Segment]) -> None:
        now = time.monotonic()  # each segment looks at most every RECORDS_CHECK_S: so does this loop
        if now >= self._records_due:
            self._records_due = now + RECORDS_CHECK_S
            for seg in segments:
                seg.keep_records_cached()

    def _reader_pool(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pool_pid != os.getpid():  # a forked child has none of the parent's threads
            self._pool = ThreadPoolExecutor(self.read_threads, thread_name_prefix="lake-reader")
            self._pool_pid = os.getpid()
        return self._pool

    def sample(self, batch_size: int, *, rng: np.random.Generator | None = None, torch: bool = False,
               pin_memory: bool = False) -> Batch:
        """`batch_size` transitions drawn uniformly with replacement from all committed, valid transitions.

        Returns numpy arrays, or torch tensors with `torch=True` (in pinned memory with `pin_memory=True`,
        for fast non-blocking copies to the GPU). `obs` and `next_obs` are views of one
        `(B, stack + 1, *frame_shape)` buffer."""
        rng = self.rng if rng is None else rng
        segments, p = self._candidates()
        self._keep_records_cached(segments)
        S, B = self.stack_size, batch_size
        table = {k: np.array([getattr(s, k) for s in segments], np.int64) for k in
                 ("fd", "committed", "num_streams", "steps_cap", "frame_cap", "records_offset", "frames_offset")}
        seg = np.empty(B, np.int64)
        stream = np.empty(B, np.int64)
        step = np.empty(B, np.int64)
        recs = np.empty((B, 2), RECORD_DTYPE)  # steps t and t+1 of each draw
        rec_views = memoryview(recs).cast("B")
        rec_size = 2 * RECORD_DTYPE.itemsize
        buf = _alloc((B, S + 1, *self.frame_shape), self.frame_dtype, torch, pin_memory)
        frame_views = memoryview(buf.numpy() if torch else buf).cast("B")
        size = (S + 1) * self.frame_nbytes
        dfds = [s.dfd for s in segments]
        # Draws go in chunks: the frames of a chunk are being read from disk while the next chunk is drawn.
        # Rejection sampling keeps each draw uniform over valid transitions (step t is one unless step t+1
        # is a boundary); all draws happen on this thread, in order, so a seed fixes the batch.
        with _Reads(self, frames=True, read_bytes=size) as reads:
            for lo in range(0, B, SAMPLE_CHUNK):
                todo = np.arange(lo, min(B, lo + SAMPLE_CHUNK))
                rounds = 0
                while len(todo):
                    rounds += 1
                    if rounds % 64 == 0 and len(todo) == min(B - lo, SAMPLE_CHUNK) and not any(
                            ((seg_.read_records(n, 1, seg_.committed)["flags"] & BOUNDARY) == 0).any()
                            for seg_ in segments for n in range(seg_.num_streams)):
                        raise LakeError(f"Lake {self.path} has no valid transition to sample yet")
                    s = rng.choice(len(segments), size=len(todo), p=p)
                    u = rng.random((len(todo), 2))
                    seg[todo], stream[todo] = s, (u[:, 0] * table["num_streams"][s]).astype(np.int64)
                    step[todo] = (u[:, 1] * (table["committed"][s] - 1)).astype(np.int64)
                    offsets = table["records_offset"][s] + (stream[todo] * table["steps_cap"][s] + step[todo]) * RECORD_DTYPE.itemsize
                    self._read_many(table["fd"][s].tolist(), [rec_views[b * rec_size : (b + 1) * rec_size] for b in todo.tolist()],
                                    offsets.tolist())
                    todo = todo[(recs["flags"][todo, 1] & BOUNDARY) > 0]
                hi = min(B, lo + SAMPLE_CHUNK)
                first_frame = recs["frame_end"][lo:hi, 0] - S  # the transition is frames first_frame .. first_frame + S
                where = seg[lo:hi]
                offsets = table["frames_offset"][where] + (stream[lo:hi] * table["frame_cap"][where] + first_frame) * self.frame_nbytes
                reads.add(table["fd"][where].tolist(), [frame_views[b * size : (b + 1) * size] for b in range(lo, hi)],
                          offsets.tolist(), [dfds[i] for i in where.tolist()])
        flags = recs["flags"][:, 0]
        scalars = dict(actions=recs["action"][:, 0].astype(np.int64), rewards=recs["reward"][:, 0].copy(),
                       terminated=(flags & TERMINATED) > 0, truncated=(flags & TRUNCATED) > 0)
        if torch:
            import torch as th

            scalars = {k: th.from_numpy(v) for k, v in scalars.items()}
            if pin_memory and th.cuda.is_available():
                scalars = {k: v.pin_memory() for k, v in scalars.items()}
        where = np.stack([np.array([s.index for s in segments], np.int64)[seg], stream, step], axis=1)
        return Batch(obs=buf[:, :S], next_obs=buf[:, 1:], where=where, **scalars)

    def sample_slices(self, num_slices: int, slice_steps: int, *, rng: np.random.Generator | None = None) -> Slices:
        """`num_slices` stream slices of up to `slice_steps` steps each, read with one read per slice for frames
        and one for records: the fast way to fill a BigPond. Every valid transition is equally likely to be in a
        slice: a slice starts uniformly at one of the `slice_steps - 1 + committed - 1` places of a stream whose
        steps [start, start + slice_steps) overlap the valid ones, and is cut to them (so it is shorter near a
        segment's ends). Slices starting only where whole slices fit would cover the first and last steps of
        every segment less often (the very first and last slice_steps times less)."""
        if slice_steps < 1:
            raise ValueError(f"sample_slices: slice_steps must be >= 1, got {slice_steps}")
        rng = self.rng if rng is None else rng
        segments, _ = self._candidates()
        self._keep_records_cached(segments)
        S, nb, L = self.stack_size, self.frame_nbytes, slice_steps
        places = np.array([s.num_streams * (s.committed - 1 + L - 1) for s in segments], np.float64)
        plan = []  # (segment, stream, first step, steps)
        for i in rng.choice(len(segments), size=num_slices, p=places / places.sum()):
            seg = segments[i]
            start = int(rng.integers(-(L - 1), seg.committed - 1))  # the last valid transition is step committed - 2
            first, stop = max(start, 0), min(start + L, seg.committed - 1)
            plan.append((seg, int(rng.integers(0, seg.num_streams)), first, stop - first))
        # Records of steps start .. start+steps: one more than the slice, for validity and frame ends.
        rec_parts = [np.empty(steps + 1, RECORD_DTYPE) for (_, _, _, steps) in plan]
        self._read_many([seg.fd for seg, *_ in plan], [memoryview(r).cast("B") for r in rec_parts],
                        [seg.record_pos(stream, start) for seg, stream, start, _ in plan])
        begin = np.array([r["frame_end"][0] - S for r in rec_parts], np.int64)
        counts = np.array([r["frame_end"][-1] for r in rec_parts], np.int64) - begin
        offsets = np.concatenate([[0], np.cumsum(counts)])
        frames = np.empty((int(offsets[-1]), *self.frame_shape), self.frame_dtype)
        views = memoryview(frames).cast("B")
        self._read_many([seg.fd for seg, *_ in plan],
                        [views[offsets[i] * nb : offsets[i + 1] * nb] for i in range(num_slices)],
                        [seg.frame_pos(stream, int(begin[i]), nb) for i, (seg, stream, _, _) in enumerate(plan)],
                        [seg.dfd for seg, *_ in plan])
        parts, starts = [], []
        for i, recs in enumerate(rec_parts):
            r = recs[:-1][(recs["flags"][1:] & BOUNDARY) == 0]
            parts.append(r)
            starts.append(r["frame_end"] - S - begin[i] + offsets[i])
        recs = np.concatenate(parts)
        return Slices(frames=frames, obs_start=np.concatenate(starts).astype(np.int64),
                      actions=recs["action"].astype(np.int64), rewards=recs["reward"].copy(),
                      terminated=(recs["flags"] & TERMINATED) > 0, truncated=(recs["flags"] & TRUNCATED) > 0)

    def read_stream(self, group: str | int, stream: int) -> Batch:
        """Every committed transition of one stream, in order (for tests and tools; reads all of it)."""
        group, S = str(group), self.stack_size
        with self._lock:
            segments = [s for s in self._segments if s.group == group]
        obs, nxt, recs, where = [], [], [], []
        for seg in segments:
            r = seg.read_records(stream, 0, seg.committed)
            if len(r) < 2:
                continue
            frames = np.empty((int(r["frame_end"][-1]), *self.frame_shape), self.frame_dtype)
            _pread_into(seg.fd, frames, seg.frame_pos(stream, 0, self.frame_nbytes), seg.path)
            steps = np.nonzero((r["flags"][1:] & BOUNDARY) == 0)[0]
            idx = r["frame_end"][steps, None] - S + np.arange(S + 1)[None]
            obs.append(frames[idx[:, :S]])
            nxt.append(frames[idx[:, 1:]])
            recs.append(r[steps])
            where.append(np.stack([np.full(len(steps), seg.index), np.full(len(steps), stream), steps], 1))
        empty = np.zeros((0, S, *self.frame_shape), self.frame_dtype)
        r = np.concatenate(recs) if recs else np.zeros(0, RECORD_DTYPE)
        return Batch(obs=np.concatenate(obs) if obs else empty, next_obs=np.concatenate(nxt) if nxt else empty,
                     actions=r["action"].astype(np.int64), rewards=r["reward"].copy(),
                     terminated=(r["flags"] & TERMINATED) > 0, truncated=(r["flags"] & TRUNCATED) > 0,
                     where=np.concatenate(where) if where else np.zeros((0, 3), np.int64))

    def drop_page_cache(self) -> None:
        """Ask the OS to forget this Lake's cached pages (for cold-read benchmarks)."""
        with self._lock:
            segments = list(self._segments)
        for seg in segments:
            if self.writable:
                os.fsync(seg.fd)  # dirty pages cannot be dropped
            os.posix_fadvise(seg.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def stats(self) -> dict:
        """Size, groups, streams, completed episodes (full games) and their returns; reads all records."""
        with self._lock:
            segments = list(self._segments)
        disk = 0
        for f in os.listdir(self.path):
            try:
                disk += os.stat(self.path / f).st_blocks * 512
            except FileNotFoundError:  # replaced or evicted by the writer meanwhile
                pass
        groups: dict[str, dict] = {}
        for seg in segments:
            g = groups.setdefault(seg.group, {"streams": seg.num_streams, "steps": 0, "returns": [], "running": {}})
            for n in range(seg.num_streams):
                r = seg.read_records(n, 0, seg.committed)
                r = r[(r["flags"] & CARRY) == 0]  # a carry repeats the previous segment's last step
                g["steps"] += len(r)
                ret = g["running"].get(n)
                for flags, reward in zip(r["flags"], r["reward"]):
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
        return {"path": str(self.path), "env_id": self.manifest["env_id"], "frame_shape": self.frame_shape,
                "frame_dtype": self.frame_dtype.name, "stack_size": self.stack_size,
                "transitions": sum(g["steps"] for g in groups.values()), "segments": len(segments),
                "evicted_steps": self.manifest["evicted_steps"], "capacity": self.manifest["capacity"],
                "disk_bytes": disk, "groups": groups}


def _create_contiguous(h5: h5py.File, name: str, shape: tuple, dtype: np.dtype) -> h5py.Dataset:
    # Contiguous and allocated at creation so the metadata never changes again; never filled, so the
    # file is sparse until written.
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
    """Print a Lake's size, agents (groups), streams, episodes and returns."""
    with Lake(path, mode="r") as lake:
        s = lake.stats()
    print(f"Lake {s['path']}  env_id={s['env_id'] or '?'}  frames {s['frame_shape']} {s['frame_dtype']}  stack {s['stack_size']}")
    print(f"  {s['transitions']:,} steps in {s['segments']} segments, {s['disk_bytes'] / 1e6:,.1f} MB on disk "
          f"({s['disk_bytes'] / max(1, s['transitions']):,.0f} B/step); capacity {s['capacity'] or 'unbounded'}, "
          f"{s['evicted_steps']:,} steps evicted")
    for name, g in s["groups"].items():
        r = np.array(g["returns"])
        ret = f"return mean {r.mean():.2f} min {r.min():.2f} max {r.max():.2f}" if len(r) else "no complete episode"
        print(f"  agent {name}: {g['streams']} streams, {g['steps']:,} steps, {len(r)} episodes, {ret}")


def fill(path: tyro.conf.Positional[str], env_id: str = "Breakout-v5", num_envs: int = 8, steps: int = 500, seed: int = 1,
         segment_mb: int = 64) -> None:
    """Fill a Lake with random-policy Atari play (ale-py `AtariVectorEnv`), then inspect it: a smoke test."""
    from ale_py.vector_env import AtariVectorEnv

    game = "".join("_" + c.lower() if c.isupper() else c for c in env_id.split("-")[0]).lstrip("_")
    envs = AtariVectorEnv(game, num_envs, episodic_life=False, life_loss_info=True, reward_clipping=False)
    obs, info = envs.reset(seed=seed)
    episode_start, game_over = np.ones(num_envs, bool), np.zeros(num_envs, bool)
    rng = np.random.default_rng(seed)
    with Lake(path, frame_shape=obs.shape[2:], stack_size=obs.shape[1], env_id=env_id, segment_bytes=segment_mb << 20) as lake:
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


if __name__ == "__main__":
    tyro.extras.subcommand_cli_from_dict({"inspect": inspect, "fill": fill}, description=__doc__.split("\n")[0])
