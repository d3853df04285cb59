"""Benchmark the Lake (lake.py) against two naive stores of stacked s and s', side by side, on real Atari frames.

    python benchmarks/lake_bench.py                       # default sizes, a few minutes on a 2-core machine
    python benchmarks/lake_bench.py --transitions 10000000 --rss-sizes 1000000 10000000 --baseline-transitions 200000

Stores:
  Lake    lake.py: frames stored once, contiguous preallocated HDF5 datasets read and written with preadv/pwritev
  h5py    the naive HDF5 store: s and s' as uint8 (n, 4, 84, 84) in chunked resizable datasets (one transition
          per chunk, the best chunking for random reads), appended in batches, sampled with h5py point selections
  memmap  the same s and s' layout in np.memmap files (TorchRL's memory-mapped storage does this)

Metrics, each store in a fresh process so that no number leans on another's page cache or heap:
  append         transitions/s and MB/s (bytes the store put on disk / time), end to end: from the first append
                 until the data is committed to the page cache (the Lake: `commit(wait=True)`; no fsync anywhere)
  bytes/trans.   allocated blocks (st_blocks * 512) of every file, divided by the transitions appended
  sample         uniform batches of transitions (obs, next_obs, scalars), warm (after one sequential read pass
                 over all files) and cold (after fsync + posix_fadvise(DONTNEED) of all files)
  bulk fill      transitions/s of the store's best bulk read, as used to fill a GPU BigPond: the Lake's
                 `sample_slices` (whole contiguous stream slices), the baselines' contiguous row ranges
  RSS            VmRSS while sampling (the target: RAM must not grow with the Lake), as measured and after
                 malloc_trim(0) (glibc keeps freed batch buffers for reuse, tens of MB more in some processes than
                 in others: the target is judged on what is left), and peak VmHWM of the process

The frames come from a pool generated once with ale-py (random play, real pixels and episode starts) and are cycled
to feed every store, so a million transitions do not need a million emulator steps. All files are removed at exit.
"""

import ctypes
import gc
import math
import mmap
import multiprocessing
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # lake.py lives at the repository root
from lake import RECORD_DTYPE, Lake, _AsyncReads


@dataclass
class Args:
    transitions: int = 1_000_000
    """Lake size of the headline column (rounded up to whole appends)"""
    rss_sizes: tuple[int, ...] = (100_000, 1_000_000)
    """Lake sizes whose RSS is compared (each in a fresh process; all metrics are measured at each)"""
    baseline_transitions: int = 20_000
    """size of the h5py and memmap stores (they spend ~56 KB per transition)"""
    num_envs: int = 128
    """N, streams per append (the PQN rollout shape)"""
    num_steps: int = 32
    """T, steps per append"""
    batch_size: int = 512
    """transitions per uniform sample batch"""
    bulk_slices: int = 64
    """slices per bulk read (`Lake.sample_slices(bulk_slices, bulk_steps)`; the baselines read as many row ranges)"""
    bulk_steps: int = 256
    """steps per bulk slice"""
    seconds: float = 2.0
    """minimum duration of each timed read measurement"""
    cold_fraction: float = 0.1
    """a cold pass stops after drawing this fraction of the store's transitions, so the cache stays mostly cold"""
    cold_passes: int = 3
    """cold measurements (the stores' and the machine's) are the median of this many passes, each after the
    page cache was dropped: a VM's disk swings by tens of percent from one second to the next"""
    env_id: str = "Breakout-v5"
    """Atari game of the frame pool"""
    pool_envs: int = 16
    """envs that generate the frame pool"""
    pool_steps: int = 512
    """steps of each pool env (the feed cycles through them)"""
    read_threads: int = 16
    """the Lake's reader threads (and the threads of the machine's cold-read ceiling)"""
    ceiling_mb: int = 1024
    """MB written through the page cache to measure how fast new data enters it (the O_DIRECT file whose cold
    random reads bound sampling is as big as the headline Lake's frames)"""
    path: str | None = None
    """parent of the scratch directory (default: the system's temp dir); everything written there is removed"""
    seed: int = 0


# ---------------------------------------------------------------------- the feed: real Atari frames
def make_feed(args: Args, feed_dir: Path) -> tuple[int, tuple[int, ...]]:
    """Play random actions in a pool of envs and cut the pool into rollouts of shape (T, N); save them as .npz.

    Stream n of the rollouts replays env n % pool_envs from its own chunk of pool steps, so its stacks are
    consecutive in time (the Lake checks this) within a rollout and from one rollout to the next; only the wrap
    from the last rollout back to the first is a jump. Returns the number of rollouts and (stack, *frame_shape)."""
    from ale_py.vector_env import AtariVectorEnv  # only here: the store processes need no emulator

    game = "".join("_" + c.lower() if c.isupper() else c for c in args.env_id.split("-")[0]).lstrip("_")
    envs = AtariVectorEnv(game, args.pool_envs, episodic_life=False, life_loss_info=True, reward_clipping=False)
    obs, _ = envs.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    P, E = args.pool_steps, args.pool_envs
    pool = {"obs": np.empty((P, *obs.shape), obs.dtype), "actions": np.empty((P, E), np.int64),
            "rewards": np.empty((P, E), np.float32), "terminated": np.empty((P, E), bool),
            "truncated": np.empty((P, E), bool), "episode_start": np.empty((P, E), bool)}
    # Next-step autoreset, as the agents run it: after a game over the env returns the final obs, and the
    # step after it a reset obs (an episode start) whose transition is never stored.
    episode_start, game_over = np.ones(E, bool), np.zeros(E, bool)
    for p in range(P):
        actions = rng.integers(0, envs.single_action_space.n, E)
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
        step = {"obs": obs, "actions": actions, "rewards": rewards, "terminated": terminated, "truncated": truncated,
                "episode_start": episode_start}
        for k, v in step.items():
            pool[k][p] = v
        episode_start, game_over = game_over, truncated | (terminated & (info["lives"] == 0))
        obs = next_obs
    envs.close()

    T, N = args.num_steps, args.num_envs
    chunk_steps = P // math.ceil(N / E)  # pool steps owned by each stream
    num_rollouts = chunk_steps // T
    if num_rollouts < 1:
        raise ValueError(f"--pool-steps {P} is too small for {N} streams of {T} steps from {E} envs: "
                         f"need at least {math.ceil(N / E) * T}")
    n = np.arange(N)
    for k in range(num_rollouts):
        t_idx = (n // E)[None] * chunk_steps + k * T + np.arange(T)[:, None]  # (T, N) pool steps
        np.savez(feed_dir / f"rollout_{k}.npz", **{key: v[t_idx, (n % E)[None]] for key, v in pool.items()})
    print(f"frame pool: {P} steps x {E} envs of {args.env_id}, {pool['episode_start'].sum()} episode starts; "
          f"fed as {num_rollouts} rollouts of (T={T}, N={N})", flush=True)
    return num_rollouts, obs.shape[1:]


def load_feed(feed_dir: Path, num_rollouts: int) -> list[dict[str, np.ndarray]]:
    feed = []
    for k in range(num_rollouts):
        with np.load(feed_dir / f"rollout_{k}.npz") as z:
            feed.append({key: z[key] for key in z.files})
    return feed


# ---------------------------------------------------------------------- the stores
class LakeStore:
    """Fed exactly as an agent feeds it: one append per rollout, then a commit that does not wait."""

    def __init__(self, path: Path, args: Args, stack_shape: tuple, capacity: int):
        self.lake = Lake(path, frame_shape=stack_shape[1:], stack_size=stack_shape[0], env_id=args.env_id, segment_bytes=1 << 30,
                         read_threads=args.read_threads, seed=args.seed)
        self.aio: _AsyncReads | None = None  # for `disk_reads`
        self.disk_segments: list = []
        self.disk_frames: list[np.ndarray] = []
        self.disk_p = np.zeros(0)

    def append(self, ro: dict, next_ro: dict) -> None:  # next_ro: the Lake rebuilds next obs from the frames
        self.lake.append(0, ro["obs"], ro["actions"], ro["rewards"], ro["terminated"], ro["truncated"], ro["episode_start"])
        self.lake.commit()

    def flush(self) -> None:
        self.lake.commit(wait=True)

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        return len(self.lake.sample(batch_size).actions)

    def bulk(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        return len(self.lake.sample_slices(num_slices, slice_steps).actions)

    def drop_cache(self) -> None:
        self.lake.drop_page_cache()

    def begin_disk_reads(self) -> bool:
        """Map the AIO slots of `disk_reads` (outside the timed pass); False where AIO or O_DIRECT is missing."""
        lake = self.lake
        self.aio = _AsyncReads((lake.stack_size + 1) * lake.frame_nbytes + 2 * mmap.PAGESIZE, 128)
        self.disk_segments = [s for s in lake._segments if s.committed > 1 and s.dfd is not None]
        # Frames each stream holds: its last committed step's frame end (episode starts store whole stacks).
        self.disk_frames = [np.array([s.read_records(n, s.committed - 1, s.committed)["frame_end"][0]
                                      for n in range(s.num_streams)]) for s in self.disk_segments]
        weights = np.array([s.num_streams * (s.committed - 1) for s in self.disk_segments], np.float64)
        self.disk_p = weights / weights.sum() if self.disk_segments else weights  # segments drawn as `sample` draws them
        return self.aio.usable and bool(self.disk_segments)

    def disk_reads(self, batch_size: int, rng: np.random.Generator) -> int:
        """The disk's side of a cold sample, in the same minutes as the Lake's: `batch_size` O_DIRECT reads by AIO
        (128 in flight, copied out by the copier thread, as the Lake's) of `stack + 1` frames at a random place
        in a random stream's committed frames of this Lake's files; no records, rejection draws or cache checks."""
        lake, segments = self.lake, self.disk_segments
        size = (lake.stack_size + 1) * lake.frame_nbytes
        view = memoryview(bytearray(size))  # every read lands here: only the disk's rate counts
        which = rng.choice(len(segments), batch_size, p=self.disk_p)
        u = rng.random((batch_size, 2))
        reads = []
        for i, (a, b) in zip(which.tolist(), u.tolist()):
            seg, stream = segments[i], int(a * segments[i].num_streams)
            frame = int(b * (self.disk_frames[i][stream] - lake.stack_size))  # the read ends at the last frame at most
            reads.append((seg.dfd, seg.dfd, view, seg.frame_pos(stream, frame, lake.frame_nbytes)))
        with self.aio.lock:
            self.aio.begin(lake.path)
            try:
                self.aio.add(reads)
                return batch_size - len(self.aio.finish())
            except BaseException:
                self.aio.abort()  # no read may go on into `view` (as the Lake does)
                raise

    def end_disk_reads(self) -> None:
        """Unmap the AIO slots of `disk_reads`: the bench's memory, not the Lake's, so not in its RSS."""
        if self.aio is not None:
            self.aio.close()
            self.aio = None

    def close(self) -> None:
        self.end_disk_reads()
        self.lake.close()


def _append_rows(store, ro: dict, next_ro: dict) -> None:
    """Write a rollout as rows t * N + n of s, s' and scalars; s' of the last step is the next rollout's first obs
    (with next-step autoreset the obs after a terminal step is its final obs, so s' is always the next obs)."""
    T, N = ro["actions"].shape
    rows = T * N
    i = store.size
    store.resize(i + rows)
    store.s[i : i + rows] = ro["obs"].reshape(rows, *ro["obs"].shape[2:])
    store.s2[i : i + rows - N] = ro["obs"][1:].reshape(rows - N, *ro["obs"].shape[2:])
    store.s2[i + rows - N : i + rows] = next_ro["obs"][0]
    for key in ("actions", "rewards", "terminated", "truncated"):
        store.scalars[key][i : i + rows] = ro[key].reshape(rows)
    store.size = i + rows


SCALAR_DTYPES = {"actions": np.int32, "rewards": np.float32, "terminated": bool, "truncated": bool}


class H5Store:
    """Naive HDF5: chunked resizable datasets, read through h5py selections (which need sorted unique indices)."""

    def __init__(self, path: Path, args: Args, stack_shape: tuple, capacity: int):
        path.mkdir(parents=True)
        self.file = h5py.File(path / "replay.h5", "w")
        self.s, self.s2 = (self.file.create_dataset(name, shape=(0, *stack_shape), maxshape=(None, *stack_shape),
                                                    chunks=(1, *stack_shape), dtype=np.uint8) for name in ("obs", "next_obs"))
        self.scalars = {k: self.file.create_dataset(k, shape=(0,), maxshape=(None,), chunks=(4096,), dtype=dt)
                        for k, dt in SCALAR_DTYPES.items()}
        self.size = 0

    def resize(self, size: int) -> None:
        for d in (self.s, self.s2, *self.scalars.values()):
            d.resize(size, axis=0)

    def append(self, ro: dict, next_ro: dict) -> None:
        _append_rows(self, ro, next_ro)

    def flush(self) -> None:
        self.file.flush()  # data and metadata handed to the OS: committed, like the Lake's commit (no fsync)

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        idx = np.unique(rng.integers(0, self.size, batch_size))
        self.s[idx], self.s2[idx], [d[idx] for d in self.scalars.values()]
        return len(idx)

    def bulk(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        for a in rng.integers(0, self.size - slice_steps + 1, num_slices):
            self.s[a : a + slice_steps], self.s2[a : a + slice_steps], [d[a : a + slice_steps] for d in self.scalars.values()]
        return num_slices * slice_steps

    def drop_cache(self) -> None:
        self.file.flush()
        _drop_files(self.file.filename)

    def close(self) -> None:
        self.file.close()


class MemmapStore:
    """s and s' in np.memmap files preallocated to capacity (sparse until written), read by fancy indexing."""

    def __init__(self, path: Path, args: Args, stack_shape: tuple, capacity: int):
        path.mkdir(parents=True)
        self.path, self.capacity, self.shape = path, capacity, stack_shape
        self.size = 0
        self._map("w+")

    def _map(self, mode: str) -> None:
        self.s, self.s2 = (np.memmap(self.path / f"{name}.u8", np.uint8, mode, shape=(self.capacity, *self.shape))
                           for name in ("obs", "next_obs"))
        self.scalars = {k: np.memmap(self.path / f"{k}.bin", dt, mode, shape=(self.capacity,)) for k, dt in SCALAR_DTYPES.items()}

    def resize(self, size: int) -> None:
        assert size <= self.capacity

    def append(self, ro: dict, next_ro: dict) -> None:
        _append_rows(self, ro, next_ro)

    def flush(self) -> None:
        pass  # stores into a shared mapping are in the page cache already; msync would write to disk (like fsync)

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        idx = rng.integers(0, self.size, batch_size)
        self.s[idx], self.s2[idx], [d[idx] for d in self.scalars.values()]
        return batch_size

    def bulk(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        for a in rng.integers(0, self.size - slice_steps + 1, num_slices):
            np.array(self.s[a : a + slice_steps]), np.array(self.s2[a : a + slice_steps])
            [np.array(d[a : a + slice_steps]) for d in self.scalars.values()]
        return num_slices * slice_steps

    def drop_cache(self) -> None:
        # Pages mapped into this process cannot be dropped: unmap, drop, map again.
        for m in (self.s, self.s2, *self.scalars.values()):
            m.flush()
        del self.s, self.s2, self.scalars
        gc.collect()
        _drop_files(*sorted(self.path.iterdir()))
        self._map("r+")

    def close(self) -> None:
        del self.s, self.s2, self.scalars


STORES = {"Lake": LakeStore, "h5py": H5Store, "memmap": MemmapStore}


# ---------------------------------------------------------------------- measuring
def _drop_files(*paths) -> None:
    """fsync (dirty pages cannot be dropped), then ask the OS to forget the files' cached pages."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_pass(path: Path) -> None:
    """One sequential read of every file's data (holes skipped: a sparse file's holes would only fill the page
    cache with zeros), so that the warm measurements read from the page cache."""
    buf = mmap.mmap(-1, 16 << 20)  # unmapped when it goes: the bench's memory must not stay in the store's RSS
    for p in path.rglob("*"):
        if not p.is_file():
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            pos, size = 0, os.fstat(fd).st_size
            while pos < size:
                try:
                    pos = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:  # ENXIO: no data past pos
                    break
                end = os.lseek(fd, pos, os.SEEK_HOLE)
                while pos < end:
                    pos += os.preadv(fd, [memoryview(buf)[: min(len(buf), end - pos)]], pos)
        finally:
            os.close(fd)


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def proc_status_mb(field: str) -> float:
    # /proc rather than getrusage: ru_maxrss survives execve, so a spawned child would inherit its parent's peak.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def rate(fn, seconds: float, limit: float = math.inf, after=lambda: None) -> float:
    """Items per second of repeated `fn()` (which returns the items it produced), over at least `seconds`
    (or until `limit` items); at least one call."""
    done, t0 = 0, time.perf_counter()
    while True:
        done += fn()
        after()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds or done >= limit:
            return done / elapsed


def bench_store(kind: str, transitions: int, store_dir: Path, feed_dir: Path, num_rollouts: int, args: Args) -> dict:
    """Runs in a fresh process: write `transitions` (rounded up to whole appends), then read; returns the figures."""
    feed = load_feed(feed_dir, num_rollouts)
    stack_shape = feed[0]["obs"].shape[2:]  # (stack, *frame_shape)
    per_append = args.num_steps * args.num_envs
    appends = math.ceil(transitions / per_append)
    store = STORES[kind](store_dir, args, stack_shape, appends * per_append)
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    for i in range(appends):
        store.append(feed[i % num_rollouts], feed[(i + 1) % num_rollouts])
    store.flush()
    write_s = time.perf_counter() - t0
    n = appends * per_append
    on_disk = disk_bytes(store_dir)
    del feed  # the rollout buffers are the agent's, not the store's: RSS while sampling is measured without them
    gc.collect()

    rss_max, rss_parts = 0.0, ""

    def poll_rss() -> None:
        nonlocal rss_max, rss_parts
        rss = proc_status_mb("VmRSS")
        if rss > rss_max:
            rss_max = rss
            rss_parts = ", ".join(f"{k[3:].lower()} {proc_status_mb(k):.0f}" for k in ("RssAnon", "RssFile", "RssShmem"))

    out = {"transitions": n, "write_s": write_s, "write_tps": n / write_s, "write_mbps": on_disk / write_s / 1e6,
           "bytes_per_transition": on_disk / n}
    warm_pass(store_dir)
    sample = partial(store.sample, args.batch_size, rng)
    bulk = partial(store.bulk, args.bulk_slices, args.bulk_steps, rng)
    out["sample_warm"] = rate(sample, args.seconds, after=poll_rss)
    out["bulk_warm"] = rate(bulk, args.seconds)
    cold_limit = max(1.0, args.cold_fraction * n)
    # A VM's disk swings by tens of percent from one minute to the next: where the store can say where its
    # transitions lie (the Lake), each cold pass is paired with a pass of bare disk reads of the same transitions'
    # bytes, in alternating order, so that the two figures see the same disk.
    cold, cold_disk = [], []

    def cold_pass() -> None:
        store.drop_cache()
        cold.append(rate(sample, args.seconds, cold_limit, after=poll_rss))

    def disk_pass() -> None:
        if store.begin_disk_reads():
            store.drop_cache()
            cold_disk.append(rate(partial(store.disk_reads, args.batch_size, rng), args.seconds, cold_limit))
        store.end_disk_reads()

    passes = [cold_pass, disk_pass] if hasattr(store, "disk_reads") else [cold_pass]
    for i in range(args.cold_passes):
        for one_pass in passes if i % 2 == 0 else passes[::-1]:
            one_pass()
    out["sample_cold"] = statistics.median(cold)
    out["sample_cold_passes"] = cold
    out["sample_cold_disk"] = statistics.median(cold_disk) if cold_disk else None
    out["sample_cold_disk_passes"] = cold_disk
    out["bulk_cold"] = statistics.median((store.drop_cache(), rate(bulk, args.seconds, cold_limit))[1] for _ in range(args.cold_passes))
    out["rss_sampling_mb"], out["rss_parts"] = rss_max, rss_parts
    out["peak_rss_mb"] = proc_status_mb("VmHWM")
    # glibc keeps freed blocks (here the batch buffers, once the writer's freed payloads have raised its mmap
    # threshold) for reuse, up to tens of MB more in one process than in another; the store's own memory is
    # what stays after malloc_trim. Measured last, when the cold bulk passes have had every reader thread map
    # its O_DIRECT bounce buffer (before, whether they have depends on what the page cache kept).
    malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None
    out["rss_live_mb"] = None
    if malloc_trim is not None:
        rss_max, rss_parts = 0.0, ""
        for _ in range(8):
            sample()
            malloc_trim(0)
            poll_rss()
        out["rss_live_mb"], out["rss_live_parts"] = rss_max, rss_parts
    store.close()
    return out


def bench_machine(path: Path, write_bytes: int, read_file_bytes: int, read_bytes: int, threads: int, seconds: float,
                  passes: int) -> dict:
    """Runs in a fresh process: what this machine allows any store, to read the Lake's figures against.

    write_mbps         buffered writes of `write_bytes` to a new file: new data entering the page cache (on a VM,
                       every page the guest freed a while ago may have to be faulted in from the host again); a
                       store that leaves what it writes in the page cache appends no faster
    write_direct_mbps  O_DIRECT writes of 1 MB blocks to a new file of `read_file_bytes` (as big as the Lake whose
                       cold reads it bounds: a disk or its host may serve a small file faster): the disk's write
                       bandwidth, which a store that writes its data back and drops it from the page cache (the
                       Lake's drop-behind) can approach
    cold_reads         random reads of one transition's bytes (`read_bytes`) from that file through the page
                       cache, after POSIX_FADV_DONTNEED, with the Lake's reader threads
    cold_reads_direct  the same with O_DIRECT (the 512-byte aligned range covering the transition)
    cold_reads_aio     the same O_DIRECT reads by Linux AIO, 128 in flight from one thread, as the Lake reads
                       cold frames; the better of the two O_DIRECT figures bounds cold uniform sampling
    The O_DIRECT figures are None where the file system refuses O_DIRECT, the AIO one where AIO is missing."""
    path.mkdir()
    chunk = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    aligned = mmap.mmap(-1, len(chunk))  # O_DIRECT buffers must be aligned
    aligned[:] = chunk.tobytes()
    out = {}
    for key, flags, size in (("write_mbps", 0, write_bytes), ("write_direct_mbps", getattr(os, "O_DIRECT", 0), read_file_bytes)):
        if key == "write_direct_mbps" and not flags:
            out[key] = None
            continue
        try:
            fd = os.open(path / f"{key}.bin", os.O_RDWR | os.O_CREAT | flags, 0o644)
        except OSError:
            out[key] = None
            continue
        try:
            t0 = time.perf_counter()
            for pos in range(0, size, len(chunk)):
                os.pwrite(fd, aligned if flags else chunk, pos)
            out[key] = size / (time.perf_counter() - t0) / 1e6
            os.fsync(fd)
        finally:
            os.close(fd)
        if key == "write_mbps":
            (path / f"{key}.bin").unlink()  # the direct write above all frees its page cache first
    data = path / "write_direct_mbps.bin"
    if not data.exists():  # no O_DIRECT: read back a buffered file
        data = path / "reads.bin"
        fd = os.open(data, os.O_RDWR | os.O_CREAT, 0o644)
        for pos in range(0, read_file_bytes, len(chunk)):
            os.pwrite(fd, chunk, pos)
        os.fsync(fd)
        os.close(fd)
    draw = np.random.default_rng(1)  # each pass reads other places: a host's cache must not serve a second pass

    def cold_reads(direct: bool) -> float | None:
        offsets = draw.integers(0, read_file_bytes - read_bytes - 4096, 1 << 20)
        try:
            fd = os.open(data, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        except (OSError, AttributeError):
            return None
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

            def reader(k: int) -> int:
                buf, i = memoryview(mmap.mmap(-1, read_bytes + 8192)), k
                while time.perf_counter() - t0 < seconds and i < len(offsets):
                    pos = int(offsets[i])
                    if direct:
                        start, end = pos & ~511, (pos + read_bytes + 511) & ~511
                        os.preadv(fd, [buf[: end - start]], start)
                    else:
                        os.preadv(fd, [buf[:read_bytes]], pos)
                    i += threads
                return (i - k) // threads

            t0 = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                reads = sum(pool.map(reader, range(threads)))
            return reads / (time.perf_counter() - t0)
        except OSError:
            return None
        finally:
            os.close(fd)

    def cold_reads_aio() -> float | None:
        offsets = draw.integers(0, read_file_bytes - read_bytes - 4096, 1 << 20)
        aio = _AsyncReads(read_bytes + 2 * mmap.PAGESIZE, 128)
        if not aio.usable or not hasattr(os, "O_DIRECT"):
            return None
        try:
            dfd = os.open(data, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            return None
        try:
            os.posix_fadvise(dfd, 0, 0, os.POSIX_FADV_DONTNEED)
            view = memoryview(bytearray(read_bytes))  # every read lands here: only the disk's rate counts
            done, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds and done < len(offsets):
                with aio.lock:
                    aio.begin(data)
                    aio.add([(dfd, dfd, view, int(pos)) for pos in offsets[done : done + 512]])
                    done += 512 - len(aio.finish())
            return done / (time.perf_counter() - t0)
        finally:
            aio.close()
            os.close(dfd)

    def median(probe, *probe_args) -> float | None:  # each pass starts cold (the probes drop the page cache)
        figures = [probe(*probe_args) for _ in range(passes)]
        return None if None in figures else statistics.median(figures)

    out["cold_reads"] = median(cold_reads, False)
    out["cold_reads_direct"] = median(cold_reads, True)
    out["cold_reads_aio"] = median(cold_reads_aio)
    return out


def _ceilings(machine: dict, threads: int) -> str:
    mbps = lambda v: "n/a (no O_DIRECT)" if v is None else f"{v:,.0f} MB/s"  # noqa: E731
    reads = lambda v: "n/a (no O_DIRECT)" if v is None else f"{v:,.0f}/s"  # noqa: E731
    aio = "n/a (no AIO)" if machine["cold_reads_aio"] is None else f"{machine['cold_reads_aio']:,.0f}/s"
    return (f"new data enters the page cache at {mbps(machine['write_mbps'])}, the disk takes O_DIRECT writes at "
            f"{mbps(machine['write_direct_mbps'])}; cold random reads of one transition: {reads(machine['cold_reads'])} "
            f"through the page cache and {reads(machine['cold_reads_direct'])} with O_DIRECT on {threads} threads, "
            f"{aio} with O_DIRECT by AIO (128 in flight)")


def _disk_note(r: dict) -> str:
    if r.get("sample_cold_disk") is None:
        return ""
    lake_passes, disk_passes = (" ".join(f"{x:,.0f}" for x in r[k]) for k in ("sample_cold_passes", "sample_cold_disk_passes"))
    return f" (passes {lake_passes}; the disk in the same minutes: {r['sample_cold_disk']:,.0f}/s, passes {disk_passes})"


def in_fresh_process(fn, *fn_args):
    # spawn, not fork: a fresh interpreter whose heap and peak RSS owe nothing to the parent or an earlier store
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *fn_args).result()


if __name__ == "__main__":
    args = tyro.cli(Args)
    start = time.time()
    print("$ python " + shlex.join(sys.argv))
    print(f"machine: {os.cpu_count()} CPUs, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB RAM, "
          f"Python {platform.python_version()}, numpy {np.__version__}, h5py {h5py.__version__}; "
          f"load average {os.getloadavg()[0]:.2f} (other processes skew every timing below)", flush=True)

    scratch = Path(tempfile.mkdtemp(prefix="lake_bench_", dir=args.path))
    results: dict[tuple[str, int], dict] = {}
    try:
        feed_dir = scratch / "feed"
        feed_dir.mkdir()
        num_rollouts, stack_shape = make_feed(args, feed_dir)
        frame_bytes = int(np.prod(stack_shape[1:]))
        read_file_bytes = max(64 << 20, math.ceil(args.transitions * frame_bytes / (1 << 20)) << 20)
        machine = in_fresh_process(bench_machine, scratch / "machine", args.ceiling_mb << 20, read_file_bytes,
                                   (stack_shape[0] + 1) * frame_bytes, args.read_threads, args.seconds, args.cold_passes)
        shutil.rmtree(scratch / "machine", ignore_errors=True)
        print(f"  this machine: {_ceilings(machine, args.read_threads)}", flush=True)
        lake_sizes = sorted(set(args.rss_sizes) | {args.transitions})
        runs = [("h5py", args.baseline_transitions), ("memmap", args.baseline_transitions)] + [("Lake", n) for n in lake_sizes]
        for kind, n in runs:
            store_dir = scratch / f"{kind}_{n}"
            try:
                r = in_fresh_process(bench_store, kind, n, store_dir, feed_dir, num_rollouts, args)
            finally:
                shutil.rmtree(store_dir, ignore_errors=True)  # frees the disk and its page cache for the next store
            results[kind, n] = r
            print(f"  {kind} at {r['transitions']:,} transitions: wrote in {r['write_s']:.1f}s, "
                  f"sampled {r['sample_warm']:,.0f}/s warm, {r['sample_cold']:,.0f}/s cold{_disk_note(r)}; RSS while sampling "
                  f"{r['rss_sampling_mb']:,.0f} MB ({r['rss_parts']})" +
                  ("" if r["rss_live_mb"] is None else f", {r['rss_live_mb']:,.0f} MB after malloc_trim ({r['rss_live_parts']})"),
                  flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # ------------------------------------------------------------------ the table
    per_append = args.num_steps * args.num_envs

    def rounded(n: int) -> int:
        return math.ceil(n / per_append) * per_append

    lake = results["Lake", args.transitions]
    others = [results["Lake", n] for n in lake_sizes if n != args.transitions]
    base = [results["h5py", args.baseline_transitions], results["memmap", args.baseline_transitions]]
    # What any store can do here, next to the Lake: it cannot append faster than the disk takes writes (a store
    # that leaves its data in the page cache: than new data enters it), nor sample cold faster than the disk
    # serves one random read of a transition's bytes.
    write_ceiling = machine["write_direct_mbps"] or machine["write_mbps"]
    read_ceiling = max(machine["cold_reads_direct"] or 0, machine["cold_reads_aio"] or 0) or machine["cold_reads"]
    same_minutes = lake.get("sample_cold_disk") is not None
    if same_minutes:  # the disk as the Lake's cold passes found it, not as the probe found it minutes before
        read_ceiling = lake["sample_cold_disk"]
    ceiling = {"write_tps": write_ceiling * 1e6 / lake["bytes_per_transition"], "write_mbps": write_ceiling,
               "sample_cold": read_ceiling}
    columns = [f"Lake @ {rounded(args.transitions):,}"] + [f"Lake @ {rounded(n):,}" for n in lake_sizes if n != args.transitions]
    columns += ["disk alone", f"h5py @ {rounded(args.baseline_transitions):,}",
                f"memmap @ {rounded(args.baseline_transitions):,}", "Lake / h5py", "Lake / memmap"]
    rows = [("append, transitions/s", "write_tps", "higher"), ("append, MB/s on disk", "write_mbps", ""),
            ("bytes/transition on disk", "bytes_per_transition", "lower"),
            ("uniform sample warm, transitions/s", "sample_warm", "higher"),
            ("uniform sample cold, transitions/s", "sample_cold", "higher"),
            ("bulk fill warm, transitions/s", "bulk_warm", "higher"), ("bulk fill cold, transitions/s", "bulk_cold", "higher"),
            ("RSS while sampling, MB", "rss_sampling_mb", "lower"),
            ("RSS while sampling, after malloc_trim, MB", "rss_live_mb", "lower"), ("peak RSS (VmHWM), MB", "peak_rss_mb", "lower")]
    table = [["metric", "better", *columns]]
    for label, key, better in rows:
        if lake[key] is None:  # (no malloc_trim outside glibc)
            continue
        figures = [f"{r[key]:,.0f}" for r in [lake, *others]]
        figures += [f"{ceiling[key]:,.0f}" if key in ceiling else ""] + [f"{r[key]:,.0f}" for r in base]
        ratios = [f"{lake[key] / b[key]:.2f}x" for b in base]
        table.append([label, better, *figures, *ratios])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print()
    for i, row in enumerate(table):
        cells = [c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))]
        print("| " + " | ".join(cells) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 1) + (":" if j >= 2 else "-") for j, w in enumerate(widths)) + "|")
    print(f"\nsample batch {args.batch_size}, bulk = {args.bulk_slices} slices x {args.bulk_steps} steps, "
          f"{args.read_threads} Lake reader threads; cold figures are the median of {args.cold_passes} passes, each stopping after {args.cold_fraction:.0%} of a store or "
          f"{args.seconds:g}s. RSS while sampling excludes the (T, N) rollout buffers; the peak includes them.")

    print(f"\nthis machine ({args.ceiling_mb:,} MB written through the page cache; {read_file_bytes >> 20:,} MB written "
          f"with O_DIRECT, then read cold at random): "
          f"{_ceilings(machine, args.read_threads)}.\n  disk alone column: appends at the disk's O_DIRECT write "
          f"bandwidth over the Lake's {lake['bytes_per_transition']:,.0f} B/transition (the Lake writes back and drops "
          f"behind, so the page-cache figure does not bound it); cold samples at one O_DIRECT read of a transition's "
          f"{(stack_shape[0] + 1) * frame_bytes:,} B each, " +
          ("by AIO from the headline Lake's own files, in passes that alternate with its cold sampling passes (the "
           "median of as many; the Lake can beat it, as the disk's rate moves between passes)" if same_minutes
           else "by threads or AIO, whichever was faster") + ". RSS is polled between sampling calls.\n")

    # ------------------------------------------------------------------ the targets (issue 2)
    scalar_bytes = RECORD_DTYPE.itemsize
    small, big = results["Lake", min(args.rss_sizes)], results["Lake", max(args.rss_sizes)]
    rss_key = "rss_live_mb" if small["rss_live_mb"] and big["rss_live_mb"] else "rss_sampling_mb"
    rss_ratio = big[rss_key] / small[rss_key]
    raw_ratio = big["rss_sampling_mb"] / small["rss_sampling_mb"]
    peak_ratio = big["peak_rss_mb"] / small["peak_rss_mb"]
    targets = [
        (lake["write_tps"] >= 100_000,
         (f"append >= 100,000 transitions/s: {lake['write_tps']:,.0f} "
          f"(the disk alone ~{ceiling['write_tps']:,.0f})")),
        (lake["sample_cold"] >= 30_000,
         (f"uniform sample cold >= 30,000 transitions/s: {lake['sample_cold']:,.0f} "
          + (f"(the disk served {ceiling['sample_cold']:,.0f} random reads of a transition/s from the Lake's files in the "
             f"same minutes: the Lake at {lake['sample_cold'] / ceiling['sample_cold']:.0%} of it)" if same_minutes
             else f"(the disk alone ~{ceiling['sample_cold']:,.0f})"))),
        (lake["bytes_per_transition"] <= 1.05 * (frame_bytes + scalar_bytes),
         (f"bytes/transition <= 1.05 x (frame {frame_bytes} + scalars {scalar_bytes}) = "
          f"{1.05 * (frame_bytes + scalar_bytes):,.1f}: {lake['bytes_per_transition']:,.1f}")),
        (rss_ratio <= 1.1,
         (f"RSS({rounded(max(args.rss_sizes)):,}) <= 1.1 x RSS({rounded(min(args.rss_sizes)):,}) while sampling"
          + (", after malloc_trim" if rss_key == "rss_live_mb" else "") +
          f": {big[rss_key]:,.0f} / {small[rss_key]:,.0f} MB = {rss_ratio:.3f}"
          + (f" (as measured, with glibc's free blocks: {big['rss_sampling_mb']:,.0f} / {small['rss_sampling_mb']:,.0f} MB"
             f" = {raw_ratio:.3f}; " if rss_key == "rss_live_mb" else " (") +
          f"peak VmHWM, with the rollout buffers and the writer's queue: {big['peak_rss_mb']:,.0f} / "
          f"{small['peak_rss_mb']:,.0f} MB = {peak_ratio:.3f})")),
    ]
    print(f"\ntargets (Lake @ {rounded(args.transitions):,} transitions):")
    for ok, text in targets:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    print(f"\nwall time {time.time() - start:.0f}s; load average {os.getloadavg()[0]:.2f} at the end")
