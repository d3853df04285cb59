"""Benchmark the Lake (lake.py) against the raw v1 layout and naive replay stores, side by side, on real Atari frames.

    python benchmarks/lake_bench.py                                      # default sizes: a few minutes on 2 cores
    python benchmarks/lake_bench.py --transitions 1000000 --rss-sizes 100000 1000000 10000000 \\
        --baseline-sizes 100000 --rgb-transitions 100000 --seconds 2    # the full run (the FINDINGS table)

The full run takes tens of minutes and up to 20 GB of disk at once (v1 raw of 256x256 RGB at 100k); add 1000000 to
--baseline-sizes for the stacked stores' RSS at 1M too (56 GB of disk each, minutes per store and game).

Frames, one table per kind:
  84x84 grayscale stacks of 4 of each of --env-ids: random play in ale-py's AtariVectorEnv (--pool-envs envs), real
    episode starts under next-step autoreset. Stream n of the (T, N) appends replays --feed-steps consecutive steps
    of pool env n % pool_envs (a chunk of its own), then the appends cycle back to the first step, marked an episode
    start so that stacks stay valid: compression along time sees a stream's real consecutive frames.
  256x256 RGB (AtariVectorEnv's img_height=256, img_width=256, grayscale=False) of the same games; Lake and v1 raw
    only (stacked s and s' would take 1.6 MB per transition).

Stores, each in a fresh process (no number leans on another's page cache or heap), files removed after each:
  Lake     lake.py (format v2: each stream's frames zstd-compressed in chunks of consecutive frames)
  v1 raw   the v1 Lake's layout: each stream's frames once, raw, in a preallocated file (a whole stack where a stream
           (re)starts), a 17-byte record per step; one os.preadv per sampled transition (on --read-threads threads,
           so that cold reads overlap), one per slice for bulk fills
  h5py     naive HDF5: s and s' as (n, stack, 84, 84) uint8 in chunked resizable datasets, one transition per chunk
  memmap   the same s and s' rows in np.memmap files
  TorchRL  LazyMemmapStorage + ReplayBuffer (s and s' memory-mapped by tensordict); needs `pip install torchrl`
The stacked stores (h5py, memmap, TorchRL) run only when --stores names them (the README's table: `--stores lake v1raw
h5py memmap torchrl`).

Metrics:
  B/transition    allocated blocks (st_blocks * 512) of every file / transitions appended
  append/s        from the first append until committed to the page cache (the Lake: an append and a `commit()` per
                  rollout, as the agents do, then `commit(wait=True)`; no fsync)
  cold sample/s   uniform `sample(batch)` right after the store's files were dropped from the page cache (fsync, then
                  POSIX_FADV_DONTNEED, mapped pages unmapped first; the Lake: `drop_page_cache()`); median of
                  --cold-passes passes, each --cold-fraction of the store or --seconds, whichever ends first
  BigPond fill/s  `sample_slices((1 << 12) // slice_steps, slice_steps)` as pqn_lake.py's fill_big_pond calls it (at
                  most --fill-mb of frames per call), for --seconds, with the files in the page cache (where the Lake
                  lives); the stacked stores copy out as many contiguous rows per call
  RSS MB @ n      peak RSS (VmHWM) while sampling a store of n transitions, counted from the first cold pass: after
                  the appends, with the feed (the agent's memory, not the store's) freed

"""

import ctypes
import gc
import importlib.util
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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Literal

import h5py
import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # lake.py lives at the repository root
from lake import Lake


@dataclass
class Args:
    env_ids: tuple[str, ...] = ("Breakout-v5", "Gravitar-v5", "MsPacman-v5")
    transitions: int = 100_000
    """size at which the Lake and v1 raw are compared (the FINDINGS table: 1,000,000)"""
    rss_sizes: tuple[int, ...] = (20_000, 100_000)
    """sizes at which the Lake's RSS is measured (v1 raw: those up to --transitions)"""
    baseline_sizes: tuple[int, ...] = (20_000,)
    """sizes of the stacked stores (h5py, memmap, TorchRL: 56 KB per transition on disk); rates at the largest"""
    rgb_transitions: int = 8_192
    """size of the 256x256 RGB Lake and v1 raw (0: no RGB)"""
    stores: tuple[Literal["lake", "v1raw", "h5py", "memmap", "torchrl"], ...] = ("lake", "v1raw")
    """the stores to measure; the stacked ones (h5py, memmap, torchrl: 56 KB per transition, 100-400x slower to
    sample than the Lake in every run so far) only when named"""
    num_envs: int = 128
    """N, streams per append at 84x84 (the PQN rollout's)"""
    rgb_num_envs: int = 8
    """N at 256x256 RGB"""
    num_steps: int = 32
    """T, steps per append"""
    feed_steps: int = 128
    """steps of each stream before the appends cycle (the feed holds feed_steps x N stacks: 462 MB at 84x84)"""
    pool_envs: int = 16
    """envs of random play per game at 84x84 (they play feed_steps x ceil(N / pool_envs) steps)"""
    rgb_pool_envs: int = 4
    batch_size: int = 512
    """transitions per `sample` at 84x84"""
    rgb_batch_size: int = 64
    slice_steps: int = 64
    """steps per BigPond slice (pqn_lake.py --big-pond-slice-steps)"""
    fill_mb: int = 512
    """most frame bytes per bulk read (1024 RGB slices would be 13 GB)"""
    cold_passes: int = 3
    cold_fraction: float = 0.1
    """a cold pass ends after sampling this fraction of the store (the cache stays mostly cold) ..."""
    seconds: float = 1.0
    """... or after this long; also the length of a fill measurement"""
    chunk_frames: int | None = None
    """passed to the Lake when given (default: the Lake's)"""
    read_threads: int = 16
    """v1 raw's reader threads"""
    path: str | None = None
    """parent of the scratch directory (default: the system's temp dir); everything written there is removed"""
    seed: int = 0


FEED_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "episode_start")
NAMES = {"lake": "Lake", "v1raw": "v1 raw", "h5py": "h5py", "memmap": "memmap", "torchrl": "TorchRL"}


# ---------------------------------------------------------------------- frame pools
def atari_trajectories(env_id: str, num_envs: int, steps: int, seed: int, **frame_kw) -> dict[str, np.ndarray]:
    """Random play: arrays (steps, num_envs, ...) of obs stacks and scalars, episode starts as the agents mark them."""
    from ale_py.vector_env import AtariVectorEnv  # only here: the store processes need no emulator

    game = "".join("_" + c.lower() if c.isupper() else c for c in env_id.split("-")[0]).lstrip("_")
    envs = AtariVectorEnv(game, num_envs, episodic_life=False, life_loss_info=True, reward_clipping=False, **frame_kw)
    obs, _ = envs.reset(seed=seed)
    rng = np.random.default_rng(seed)
    traj = {
        "obs": np.empty((steps, *obs.shape), obs.dtype),
        "actions": np.empty((steps, num_envs), np.int64),
        "rewards": np.empty((steps, num_envs), np.float32),
        **{k: np.empty((steps, num_envs), bool) for k in FEED_KEYS[3:]},
    }
    # Next-step autoreset, as the agents run it: after a game over the env returns the final obs, and the step
    # after it a reset obs (an episode start) whose transition is never stored.
    episode_start, game_over = np.ones(num_envs, bool), np.zeros(num_envs, bool)
    for p in range(steps):
        actions = rng.integers(0, envs.single_action_space.n, num_envs)
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
        for k, v in zip(FEED_KEYS, (obs, actions, rewards, terminated, truncated, episode_start)):
            traj[k][p] = v
        episode_start, game_over = game_over, truncated | (terminated & (info["lives"] == 0))
        obs = next_obs
    envs.close()
    return traj


def save_feed(traj: dict[str, np.ndarray], N: int, T: int, feed_steps: int, feed_dir: Path) -> tuple[int, ...]:
    """Cut trajectories (P, E, ...) into the feed (L, N, ...), L <= feed_steps a multiple of T: stream n replays L
    steps of pool stream n % E from step (n // E) * P / ceil(N / E) on: disjoint chunks where P is long enough,
    else windows that wrap to step 0 (an episode start: a reset)."""
    P, E = traj["actions"].shape
    copies = -(-N // E)
    L = min(P // copies if P // copies >= T else P, feed_steps) // T * T
    if L < T:
        raise SystemExit(f"a frame pool of {P} steps per stream cannot feed appends of {T} steps")
    n = np.arange(N)
    t_idx, e_idx = ((n // E) * (P // copies))[None] + np.arange(L)[:, None], (n % E)[None]
    feed_dir.mkdir()
    for k, v in traj.items():
        v = v[t_idx % P, e_idx]
        if k == "episode_start":
            v[0] = True  # the appends cycle back to each stream's first step: a jump in time, so an episode start
        np.save(feed_dir / f"{k}.npy", v)
    return traj["obs"].shape[2:]


# ---------------------------------------------------------------------- the stores
class LakeStore:
    """lake.py, fed as an agent feeds it: one append per rollout, then a commit that does not wait."""

    stacked = False  # frames stored once: a slice of L steps reads L + stack frames

    def __init__(self, path: Path, capacity: int, stack_shape: tuple, num_streams: int, args: Args, **kw):
        kw.update({} if args.chunk_frames is None else {"chunk_frames": args.chunk_frames})
        self.lake = Lake(path, frame_shape=stack_shape[1:], stack_size=stack_shape[0], seed=args.seed, **kw)

    def append(self, obs: np.ndarray, sc: dict, next_obs: np.ndarray) -> None:  # (next obs are in the Lake's frames)
        self.lake.append(0, obs, sc["actions"], sc["rewards"], sc["terminated"], sc["truncated"], sc["episode_start"])
        self.lake.commit()

    def flush(self) -> None:
        self.lake.commit(wait=True)

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        return len(self.lake.sample(batch_size, rng=rng).actions)

    def fill(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        return len(self.lake.sample_slices(num_slices, slice_steps, rng=rng).obs_start)

    def drop_cache(self) -> None:
        self.lake.drop_page_cache()

    def close(self) -> None:
        self.lake.close()


RECORD = np.dtype([("frame_end", "<i8"), ("action", "<i4"), ("reward", "<f4"), ("flags", "u1")])  # v1's 17 bytes
TERMINATED, TRUNCATED, BOUNDARY = 1, 2, 8


class RawStore:
    """The v1 Lake's layout: stream n's frames from frame n * frame_cap of one sparse file, a step's newest frame, or
    its whole stack at a boundary (an episode start or the stream's first step); transition t is the stack + 1
    frames ending at records[n, t]["frame_end"] + 1. The records are memory-mapped: they stay cached, as v1's did."""

    stacked = False

    def __init__(self, path: Path, capacity: int, stack_shape: tuple, num_streams: int, args: Args):
        path.mkdir(parents=True)
        self.path, self.S, self.frame_shape = path, stack_shape[0], stack_shape[1:]
        self.fb, self.N = int(np.prod(self.frame_shape)), num_streams
        max_steps = capacity // num_streams
        self.frame_cap = max_steps * self.S  # room for a whole stack at every step: only written blocks take disk
        self.fd = os.open(path / "frames.u8", os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self.fd, self.N * self.frame_cap * self.fb)
        self.records = np.memmap(path / "records.bin", RECORD, "w+", shape=(self.N, max_steps))
        self.frame_end, self.steps = np.zeros(self.N, np.int64), 0
        self.readers = ThreadPoolExecutor(args.read_threads)  # cold reads wait on the disk: overlap them

    def append(self, obs: np.ndarray, sc: dict, next_obs: np.ndarray) -> None:
        T = len(obs)
        boundary = sc["episode_start"].astype(bool)
        boundary[0] |= self.steps == 0
        ends = self.frame_end + np.cumsum(np.where(boundary, self.S, 1), 0)  # (T, N)
        for n in range(self.N):  # one pwritev per stream
            parts = [obs[t, n] if boundary[t, n] else obs[t, n, -1] for t in range(T)]
            if (
                os.pwritev(self.fd, parts, int(n * self.frame_cap + self.frame_end[n]) * self.fb)
                != (ends[-1, n] - self.frame_end[n]) * self.fb
            ):
                raise OSError("short write")
        rec = self.records[:, self.steps : self.steps + T]
        rec["frame_end"], rec["action"], rec["reward"] = ends.T, sc["actions"].T, sc["rewards"].T
        rec["flags"] = (sc["terminated"] * TERMINATED | sc["truncated"] * TRUNCATED | boundary * BOUNDARY).T
        self.frame_end, self.steps = ends[-1], self.steps + T

    def flush(self) -> None:
        pass  # pwritev and stores into a shared mapping are in the page cache already

    def _read(self, views: list, offsets: list[int]) -> None:
        def read(lo: int) -> None:
            for i in range(lo, min(lo + 32, len(views))):
                os.preadv(self.fd, [views[i]], offsets[i])

        list(self.readers.map(read, range(0, len(views), 32)))

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        n, t, todo = np.empty(batch_size, np.int64), np.empty(batch_size, np.int64), np.arange(batch_size)
        while len(todo):  # rejection keeps draws uniform: step t is a transition unless step t + 1 is a boundary
            n[todo], t[todo] = rng.integers(0, self.N, len(todo)), rng.integers(0, self.steps - 1, len(todo))
            todo = todo[(self.records["flags"][n[todo], t[todo] + 1] & BOUNDARY) > 0]
        rec = self.records[n, t]  # scalars of the batch
        out = np.empty((batch_size, self.S + 1, *self.frame_shape), np.uint8)  # obs = out[:, :-1], next = out[:, 1:]
        self._read(list(out), ((n * self.frame_cap + rec["frame_end"] - self.S) * self.fb).tolist())
        return batch_size

    def fill(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        n = rng.integers(0, self.N, num_slices)
        start = rng.integers(0, max(1, self.steps - slice_steps), num_slices)
        recs = [np.array(self.records[a, s : min(s + slice_steps, self.steps - 1) + 1]) for a, s in zip(n, start)]
        begin = np.array([r["frame_end"][0] - self.S for r in recs])
        bounds = np.concatenate([[0], np.cumsum([r["frame_end"][-1] for r in recs] - begin)])
        frames = np.empty((bounds[-1], *self.frame_shape), np.uint8)
        self._read(
            [frames[a:b] for a, b in zip(bounds[:-1], bounds[1:])], ((n * self.frame_cap + begin) * self.fb).tolist()
        )
        obs_start = [
            r["frame_end"][:-1][(r["flags"][1:] & BOUNDARY) == 0] - self.S - b + o
            for r, b, o in zip(recs, begin, bounds)
        ]
        return sum(map(len, obs_start))

    def drop_cache(self) -> None:
        drop_cache(self.path / "frames.u8")  # not the records: v1 kept them cached

    def close(self) -> None:
        self.readers.shutdown()
        os.close(self.fd)
        del self.records


SCALAR_DTYPES = {"actions": np.int64, "rewards": np.float32, "terminated": bool, "truncated": bool}


class MemmapStore:
    """s and s' in np.memmap files preallocated to capacity (sparse until written), read by fancy indexing."""

    stacked = True  # s and s' stored whole

    def __init__(self, path: Path, capacity: int, stack_shape: tuple, num_streams: int, args: Args):
        path.mkdir(parents=True)
        self.path, self.size = path, 0
        self.s, self.s2 = (
            np.memmap(path / f"{name}.u8", np.uint8, "w+", shape=(capacity, *stack_shape))
            for name in ("obs", "next_obs")
        )
        self.scalars = {k: np.memmap(path / f"{k}.bin", dt, "w+", shape=(capacity,)) for k, dt in SCALAR_DTYPES.items()}

    def append(self, obs: np.ndarray, sc: dict, next_obs: np.ndarray) -> None:
        """Rows t * N + n of s, s' and scalars; s' of the last step is the next rollout's first obs (with next-step
        autoreset the obs after a terminal step is its final obs, so s' is always the next obs)."""
        T, N = sc["actions"].shape
        rows, i = T * N, self.size
        self.size += rows
        self.resize(self.size)
        self.s[i : i + rows] = obs.reshape(rows, *obs.shape[2:])
        self.s2[i : i + rows - N] = obs[1:].reshape(rows - N, *obs.shape[2:])
        self.s2[i + rows - N : i + rows] = next_obs
        for key in SCALAR_DTYPES:
            self.scalars[key][i : i + rows] = sc[key].reshape(rows)

    def resize(self, size: int) -> None:
        pass

    def flush(self) -> None:
        pass  # stores into a shared mapping are in the page cache already; msync would write to disk (like fsync)

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        idx = rng.integers(0, self.size, batch_size)
        self.s[idx], self.s2[idx], [d[idx] for d in self.scalars.values()]
        return batch_size

    def fill(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        for a in rng.integers(0, self.size - slice_steps + 1, num_slices):
            [np.array(d[a : a + slice_steps]) for d in (self.s, self.s2, *self.scalars.values())]
        return num_slices * slice_steps

    def drop_cache(self) -> None:
        drop_cache(*files(self.path))

    def close(self) -> None:
        del self.s, self.s2, self.scalars


class H5Store(MemmapStore):
    """Naive HDF5: the same rows in chunked resizable datasets (a transition per chunk, the best chunking for random
    reads), read through h5py selections (which need sorted unique indices)."""

    def __init__(self, path: Path, capacity: int, stack_shape: tuple, num_streams: int, args: Args):
        path.mkdir(parents=True)
        self.path, self.size, self.file = path, 0, h5py.File(path / "replay.h5", "w")
        self.s, self.s2 = (
            self.file.create_dataset(
                name, shape=(0, *stack_shape), maxshape=(None, *stack_shape), chunks=(1, *stack_shape), dtype=np.uint8
            )
            for name in ("obs", "next_obs")
        )
        self.scalars = {
            k: self.file.create_dataset(k, shape=(0,), maxshape=(None,), chunks=(4096,), dtype=dt)
            for k, dt in SCALAR_DTYPES.items()
        }

    def resize(self, size: int) -> None:
        for d in (self.s, self.s2, *self.scalars.values()):
            d.resize(size, axis=0)

    def flush(self) -> None:
        self.file.flush()  # data and metadata handed to the OS (no fsync)

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        idx = np.unique(rng.integers(0, self.size, batch_size))
        self.s[idx], self.s2[idx], [d[idx] for d in self.scalars.values()]
        return len(idx)

    def drop_cache(self) -> None:
        self.file.flush()
        drop_cache(self.path / "replay.h5")

    def close(self) -> None:
        self.file.close()


class TorchRLStore(MemmapStore):
    """TorchRL's LazyMemmapStorage (a tensordict of memory-mapped tensors in `path`) behind a ReplayBuffer."""

    def __init__(self, path: Path, capacity: int, stack_shape: tuple, num_streams: int, args: Args):
        import logging

        import torch
        from torchrl.data import LazyMemmapStorage, ReplayBuffer

        logging.getLogger("torchrl").setLevel(logging.WARNING)
        torch.manual_seed(args.seed)  # the ReplayBuffer draws with torch's generator
        path.mkdir(parents=True)
        self.path, self.from_numpy = path, torch.from_numpy
        self.rb = ReplayBuffer(storage=LazyMemmapStorage(capacity, scratch_dir=path))

    def append(self, obs: np.ndarray, sc: dict, next_obs: np.ndarray) -> None:
        from tensordict import TensorDict

        T, N = sc["actions"].shape
        rows, th = T * N, self.from_numpy
        s2 = np.concatenate([obs[1:].reshape(rows - N, *obs.shape[2:]), next_obs])
        self.rb.extend(
            TensorDict(
                {
                    "observation": th(obs.reshape(rows, *obs.shape[2:])),
                    "action": th(sc["actions"].ravel()),
                    ("next", "observation"): th(s2),
                    ("next", "reward"): th(sc["rewards"].ravel()),
                    ("next", "terminated"): th(sc["terminated"].ravel()),
                    ("next", "truncated"): th(sc["truncated"].ravel()),
                },
                batch_size=[rows],
            )
        )

    def sample(self, batch_size: int, rng: np.random.Generator) -> int:
        return len(self.rb.sample(batch_size))

    def fill(self, num_slices: int, slice_steps: int, rng: np.random.Generator) -> int:
        for a in rng.integers(0, len(self.rb) - slice_steps + 1, num_slices).tolist():
            self.rb.storage[a : a + slice_steps].clone()  # a slice is a view of the mapped rows: copy it out
        return num_slices * slice_steps

    def close(self) -> None:
        del self.rb


STORES = {
    "lake": LakeStore,
    "v1raw": RawStore,
    "h5py": H5Store,
    "memmap": MemmapStore,
    "torchrl": TorchRLStore,
}


# ---------------------------------------------------------------------- measuring
def drop_cache(*paths: Path) -> None:
    """Drop files from the page cache: unmap what this process maps of them (mapped pages are not dropped; on a
    shared file mapping MADV_DONTNEED loses nothing: dirty pages go back to the page cache), fsync (dirty pages are
    not dropped either), then POSIX_FADV_DONTNEED."""
    libc, names = ctypes.CDLL(None, use_errno=True), {os.path.realpath(p) for p in paths}
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open("/proc/self/maps") as f:
        for fields in (line.split(maxsplit=5) for line in f):
            if len(fields) == 6 and fields[5].rstrip("\n") in names:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if libc.madvise(lo, hi - lo, 4) != 0:  # MADV_DONTNEED
                    raise OSError(ctypes.get_errno(), f"madvise {fields[5].strip()}")
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def files(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def read_files(path: Path) -> None:
    """One sequential read of every file's data (holes skipped), so that the store reads from the page cache."""
    buf = memoryview(bytearray(16 << 20))
    for p in files(path):
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
                    pos += os.preadv(fd, [buf[: min(len(buf), end - pos)]], pos)
        finally:
            os.close(fd)


def proc_status_mb(field: str) -> float:
    # /proc rather than getrusage: ru_maxrss survives execve, so a spawned child would inherit its parent's peak.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def forget_peak_rss() -> bool:
    """Hand freed heap back (glibc keeps freed blocks) and reset VmHWM to the current RSS; False where refused."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def load_feed(feed_dir: Path) -> tuple[np.ndarray, dict]:
    feed = {k: np.load(feed_dir / f"{k}.npy") for k in FEED_KEYS}
    return feed.pop("obs"), feed


def append_feed(store, obs: np.ndarray, feed: dict, appends: int, T: int) -> float:
    """Append `appends` rollouts of the feed (cycling through it) and commit; returns the seconds it took."""
    L = len(obs)
    t0 = time.perf_counter()
    for i in range(appends):
        t = slice(i % (L // T) * T, i % (L // T) * T + T)
        store.append(obs[t], {key: v[t] for key, v in feed.items()}, obs[t.stop % L])
    store.flush()
    return time.perf_counter() - t0


def slices_per_fill(store, obs: np.ndarray, args: Args) -> int:
    """Slices per bulk read as fill_big_pond asks for them (1 << 12 transitions), fewer where they exceed --fill-mb."""
    S, steps = obs.shape[2], args.slice_steps
    slice_bytes = (2 * S * steps if store.stacked else steps + S) * obs[0, 0, 0].nbytes
    return max(1, min((1 << 12) // steps, (args.fill_mb << 20) // slice_bytes))


def cold_pass(store, n: int, batch_size: int, rng: np.random.Generator, args: Args, poll=None) -> float:
    """Transitions/s of uniform sampling right after the store's files left the page cache."""
    t0, done = time.perf_counter(), 0
    while done < max(1, args.cold_fraction * n) and time.perf_counter() - t0 < args.seconds:
        done += store.sample(batch_size, rng)
        if poll:
            poll()
    return done / (time.perf_counter() - t0)


def fill_rate(store, store_dir: Path, num_slices: int, rng: np.random.Generator, args: Args) -> float:
    """Transitions/s of bulk slices for --seconds, with the store's files in the page cache."""
    read_files(store_dir)
    t0, done = time.perf_counter(), 0
    while done == 0 or time.perf_counter() - t0 < args.seconds:
        done += store.fill(num_slices, args.slice_steps, rng)
    return done / (time.perf_counter() - t0)


def bench_store(kind: str, transitions: int, store_dir: Path, feed_dir: Path, batch_size: int, args: Args) -> dict:
    """Runs in a fresh process: append `transitions` (rounded up to whole appends), then read; returns the figures."""
    obs, feed = load_feed(feed_dir)
    T, N = args.num_steps, obs.shape[1]
    appends = -(-transitions // (T * N))
    store = STORES[kind](store_dir, appends * T * N, obs.shape[2:], N, args)
    rng = np.random.default_rng(args.seed)
    num_slices = slices_per_fill(store, obs, args)
    write_s = append_feed(store, obs, feed, appends, T)
    n = appends * T * N
    disk = sum(p.stat().st_blocks * 512 for p in files(store_dir))
    out = {"transitions": n, "append": n / write_s, "bytes": disk / n, "peak_with_feed_mb": proc_status_mb("VmHWM")}
    del feed, obs
    gc.collect()

    rss_polled, passes, peak_reset = 0.0, [], False

    def poll() -> None:
        nonlocal rss_polled
        rss_polled = max(rss_polled, proc_status_mb("VmRSS"))

    for _ in range(args.cold_passes):
        store.drop_cache()
        # The peak counts from here: the feed is freed, and the first drop has unmapped what stores mapped to append.
        peak_reset = peak_reset or forget_peak_rss()
        passes.append(cold_pass(store, n, batch_size, rng, args, poll))
    out.update(
        cold_sample=statistics.median(passes),
        cold_passes=passes,
        rss_polled_mb=rss_polled,
        rss_mb=proc_status_mb("VmHWM") if peak_reset else rss_polled,
    )
    out["fill"] = fill_rate(store, store_dir, num_slices, rng, args)
    store.close()
    return out


def in_fresh_process(fn, *fn_args):
    # spawn, not fork: a fresh interpreter whose heap and peak RSS owe nothing to the parent or an earlier store
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *fn_args).result()


# ---------------------------------------------------------------------- the tables
@dataclass
class Row:
    label: str
    store: str
    sizes: list[int]  # each measured in a fresh process; all give RSS
    at: int  # the size whose figures the row shows
    ref: str  # the label of the v1 raw row its ratios are to
    results: dict = field(default_factory=dict)


@dataclass
class Table:
    title: str
    N: int
    batch_size: int
    rows: list[Row]
    trajectories: Callable[[], dict]  # the frame pool
    game: str | None = None  # an 84x84 game
    rgb: bool = False  # printed in one table with the other games' RGB rows


def plan(args: Args, stores: list[str]) -> list[Table]:
    T = args.num_steps
    rounded = lambda n, N: -(-n // (T * N)) * T * N  # noqa: E731  (whole appends)
    tables = []
    for env_id in args.env_ids:
        N, at = args.num_envs, rounded(args.transitions, args.num_envs)
        rows = []
        for s in stores:
            if s in ("lake", "v1raw"):  # v1 raw (7 KB per transition) only up to --transitions
                sizes = {rounded(n, N) for n in args.rss_sizes if s == "lake" or n <= args.transitions} | {at}
                rows.append(Row(NAMES[s], s, sorted(sizes), at, "v1 raw"))
            else:  # the stacked stores (56 KB per transition) at their own sizes
                sizes = sorted({rounded(n, N) for n in args.baseline_sizes})
                rows.append(Row(NAMES[s], s, sizes, sizes[-1], "v1 raw"))
        tables.append(
            Table(
                f"{env_id}, 84x84 grayscale stacks of 4, random play",
                N,
                args.batch_size,
                rows,
                partial(
                    atari_trajectories, env_id, args.pool_envs, args.feed_steps * -(-N // args.pool_envs), args.seed
                ),
                env_id,
            )
        )
    lakes = [s for s in stores if s in ("lake", "v1raw")]
    for env_id in args.env_ids if args.rgb_transitions else []:
        N, at = args.rgb_num_envs, rounded(args.rgb_transitions, args.rgb_num_envs)
        steps = args.feed_steps * -(-N // args.rgb_pool_envs)
        tables.append(
            Table(
                f"{env_id}, 256x256 RGB stacks of 4, random play",
                N,
                args.rgb_batch_size,
                [Row(f"{env_id} {NAMES[s]}", s, [at], at, f"{env_id} v1 raw") for s in lakes],
                partial(
                    atari_trajectories,
                    env_id,
                    args.rgb_pool_envs,
                    steps,
                    args.seed,
                    img_height=256,
                    img_width=256,
                    grayscale=False,
                ),
                rgb=True,
            )
        )
    return tables


def fmt(x: float | None, ratio: bool = False) -> str:
    if x is None:
        return ""
    return (f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x") if ratio else f"{x:,.0f}"


def print_table(table: Table, T: int) -> None:
    """Rows = stores (figures at the row's size), an RSS column per size measured, ratios to the row's v1 raw."""
    sizes = sorted({n for row in table.rows for n in row.results})
    refs = {row.label: row.results.get(row.at) for row in table.rows}
    lines = [
        [
            "store",
            "transitions",
            "B/transition",
            "append/s",
            "cold sample/s",
            "BigPond fill/s",
            *[f"RSS MB @{n:,}" for n in sizes],
            "vs v1 raw: B/tr.",
            "append",
            "cold sample",
            "fill",
            "RSS",
        ]
    ]
    for row in table.rows:
        r, ref = row.results.get(row.at), refs.get(row.ref)
        lines.append(
            [
                row.label,
                f"{row.at:,}",
                *[fmt(r and r[k]) for k in ("bytes", "append", "cold_sample", "fill")],
                *[fmt(row.results[n]["rss_mb"]) if n in row.results else "" for n in sizes],
                *[
                    fmt(r[k] / ref[k], ratio=True) if r and ref else ""
                    for k in ("bytes", "append", "cold_sample", "fill", "rss_mb")
                ],
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    print(f"\n{table.title} ({table.N} streams x {T} steps per append, sample batch {table.batch_size})")
    for i, line in enumerate(lines):
        print(
            "| " + " | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths))) + " |"
        )
        if i == 0:
            print("|" + "|".join("-" * (w + 1) + ("-" if j == 0 else ":") for j, w in enumerate(widths)) + "|")


if __name__ == "__main__":
    args = tyro.cli(Args)
    start = time.time()
    print("$ python " + shlex.join(sys.argv))
    print(
        f"machine: {os.cpu_count()} CPUs, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} "
        "GiB RAM, "
        f"Python {platform.python_version()}, numpy {np.__version__}, h5py {h5py.__version__}; lake.py format "
        f"v{getattr(sys.modules['lake'], 'FORMAT_VERSION', '?')}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    stores = list(dict.fromkeys(args.stores))
    if "torchrl" in stores and not (importlib.util.find_spec("torchrl") and importlib.util.find_spec("tensordict")):
        print("torchrl not installed: pip install torchrl to include it")
        stores.remove("torchrl")
    tables = plan(args, stores)

    scratch = Path(tempfile.mkdtemp(prefix="lake_bench_", dir=args.path))
    try:
        for table in tables:
            t0, feed_dir = time.time(), scratch / "feed"
            stack_shape = save_feed(table.trajectories(), table.N, args.num_steps, args.feed_steps, feed_dir)
            print(
                f"{table.title}: feed of {table.N} streams x {len(np.load(feed_dir / 'actions.npy'))} steps, "
                f"stacks {stack_shape}, made in {time.time() - t0:.0f}s",
                flush=True,
            )
            for row in table.rows:
                for n in row.sizes:
                    store_dir = scratch / "store"
                    try:
                        r = in_fresh_process(bench_store, row.store, n, store_dir, feed_dir, table.batch_size, args)
                    except Exception as e:  # one store failing must not cost the others' figures
                        print(f"  {row.label} @ {n:,}: failed: {type(e).__name__}: {e}", flush=True)
                        continue
                    finally:
                        shutil.rmtree(store_dir, ignore_errors=True)  # frees the disk and its page cache
                    row.results[n] = r
                    print(
                        f"  {row.label} @ {n:,}: {r['bytes']:,.0f} B/transition, append {r['append']:,.0f}/s, cold "
                        "sample "
                        f"{r['cold_sample']:,.0f}/s (passes {' '.join(f'{x:,.0f}' for x in r['cold_passes'])}), fill "
                        f"{r['fill']:,.0f}/s; peak RSS while sampling {r['rss_mb']:,.0f} MB (VmRSS polled "
                        f"{r['rss_polled_mb']:,.0f} MB; peak while appending, with the feed, "
                        f"{r['peak_with_feed_mb']:,.0f} MB)",
                        flush=True,
                    )
            shutil.rmtree(feed_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    shown, rgb = [t for t in tables if not t.rgb], [t for t in tables if t.rgb]
    if rgb:  # the games' RGB rows in one table
        shown.append(
            Table(
                "256x256 RGB stacks of 4, random play",
                rgb[0].N,
                rgb[0].batch_size,
                [r for t in rgb for r in t.rows],
                None,
            )
        )
    for table in shown:
        print_table(table, args.num_steps)
    print(
        f"\nratios: the store's figure / v1 raw's (B/transition and RSS: lower is better). Cold sample: median of "
        f"{args.cold_passes} passes of {args.cold_fraction:.0%} of the store or {args.seconds:g}s; fill: "
        f"{args.slice_steps}-step slices, (1 << 12) // {args.slice_steps} per call or --fill-mb {args.fill_mb} MB, "
        "warm."
    )
    print(f"\nwall time {time.time() - start:.0f}s; load average {os.getloadavg()[0]:.2f} at the end")
