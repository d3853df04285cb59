"""Would LZ4-compressed frames let the Lake sample faster cold? Raw frames (the Lake's format) against LZ4 blocks, on
real Atari frames, on this machine's disk.

    python benchmarks/frame_codec_bench.py                # three games, 1M frames each, a few minutes here
    python benchmarks/frame_codec_bench.py --env-ids Gravitar-v5 --frames 10000000

Not a benchmark of lake.py: a what-if for its format, which stores each frame raw (the files show their frames in
plain h5py, and nothing but numpy is needed to read them). Cold uniform sampling of a Lake is bound by the disk:
one random read of a transition's `stack + 1` frames (35 KB at 84x84), by Linux AIO with O_DIRECT, 128 in flight,
as lake.py reads cold frames (benchmarks/lake_bench.py shows the Lake at the disk's rate). Compressed frames make
that read smaller, and cost CPU to compress on append and to decompress on every sample.

For each game, a pool of frames from random play (ale-py, 84x84 grayscale; 8 envs x 1,000 steps by default) is
cycled into a file of `--frames` frames as LZ4 blocks, each after a 4-byte length, back to back, offsets kept in RAM:
what a compressed Lake's frame rows would hold. One `raw` file of the first game's frames (7,056 bytes each, as the
Lake's frame rows) serves every game: reading raw bytes does not depend on what they show. Then, with the page cache
dropped before each pass and the passes of the two files alternating:

  bytes/frame           on disk (the lz4 figure includes the 4-byte length)
  compress, decompress  microseconds per frame, one frame per call as a writer and a sampler would make them
                        (python-lz4's block API, on this thread)
  cold reads            random transitions (stack_size + 1 consecutive frames) read per second: bytes only
  cold samples          the same with each transition's frames rebuilt into a (stack_size + 1, 84, 84) array: raw
                        frames copied out of the AIO slots by a copier thread, as lake.py does; LZ4 blocks
                        decompressed by a second thread while the next batch is read

Needs `pip install lz4` (not in requirements.txt: lake.py does not use it). The lz4 file of a game is smaller than
the raw file, which a disk or its host may serve faster (as a compressed Lake would be).
"""

import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # lake.py lives at the repository root
from lake import AIO_DEPTH, PAGE, _AsyncReads

try:
    import lz4.block
except ImportError:
    sys.exit("frame_codec_bench.py needs python-lz4: pip install lz4")


@dataclass
class Args:
    env_ids: tuple[str, ...] = ("Breakout-v5", "Gravitar-v5", "MsPacman-v5")
    """Atari games whose frames are compared (they compress from ~18x to ~4x)"""
    frames: int = 1_000_000
    """frames in each file (the raw file takes 7 GB at the default)"""
    pool_envs: int = 8
    """envs that generate a game's frame pool"""
    pool_steps: int = 1000
    """steps of each pool env (the files cycle through the pool)"""
    stack_size: int = 4
    batch_size: int = 512
    """transitions per batch of reads, as a Lake's `sample(512)`"""
    seconds: float = 2.0
    """duration of each timed pass"""
    passes: int = 3
    """passes of each kind; figures are their median"""
    path: str | None = None
    """parent of the scratch directory (default: the system's temp dir); its files are removed at exit"""
    seed: int = 0


def frame_pool(env_id: str, args: Args) -> list[np.ndarray]:
    from ale_py.vector_env import AtariVectorEnv

    game = "".join("_" + c.lower() if c.isupper() else c for c in env_id.split("-")[0]).lstrip("_")
    envs = AtariVectorEnv(game, args.pool_envs, stack_num=1, episodic_life=False, reward_clipping=False)
    envs.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    pool = []
    for _ in range(args.pool_steps):
        obs, *_ = envs.step(rng.integers(0, envs.single_action_space.n, args.pool_envs))
        pool += [np.ascontiguousarray(o[-1]) for o in obs]
    envs.close()
    return pool


def write_file(path: Path, pool: list[bytes], n: int) -> np.ndarray:
    """`n` frames cycled from `pool` (bytes each), back to back; returns the n + 1 frame offsets. The file is synced and
    dropped from the page cache."""
    sizes = np.array([len(b) for b in pool], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes[np.arange(n) % len(pool)])])
    cycle = b"".join(pool)
    with open(path, "wb") as f:
        for _ in range(n // len(pool)):
            f.write(cycle)
        f.write(b"".join(pool[: n % len(pool)]))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return offsets


def per_call_us(fn, items: list) -> float:
    t = time.perf_counter()
    for x in items:
        fn(x)
    return (time.perf_counter() - t) / len(items) * 1e6


class ColdReads:
    """Random transitions of one file read with O_DIRECT by AIO, as lake.py reads cold frames: raw frames straight into
    their place in the batch (the AIO copier thread copies each read out of its aligned slot, as in lake.py); LZ4
    blocks into a staging buffer, decompressed by a second thread while the next batch is read (double-buffered)."""

    def __init__(self, path: Path, offsets: np.ndarray, compressed: bool, args: Args):
        self.path, self.offsets, self.compressed, self.args = path, offsets, compressed, args
        self.span = args.stack_size + 1
        self.max_read = int((offsets[self.span :] - offsets[: -self.span]).max())
        self.fd = os.open(path, os.O_RDONLY)
        self.dfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        self.aio = _AsyncReads(self.max_read + 2 * PAGE, AIO_DEPTH)
        if not self.aio.usable:
            sys.exit("frame_codec_bench.py needs Linux AIO (io_setup refused here)")
        self.stages = [memoryview(bytearray(args.batch_size * self.max_read)) for _ in range(2)]
        self.decoder = ThreadPoolExecutor(1)
        self.rng = np.random.default_rng(args.seed)

    def close(self) -> None:
        self.aio.close()
        self.decoder.shutdown()
        os.close(self.fd)
        os.close(self.dfd)

    def read(self, views: list[memoryview], offsets: list[int]) -> None:
        with self.aio.lock:
            self.aio.begin(self.path)
            self.aio.add([(self.fd, self.dfd, v, o) for v, o in zip(views, offsets)])
            if self.aio.finish():
                sys.exit(f"{self.path}: the kernel refused O_DIRECT AIO reads")

    def decode(self, stage: memoryview, first: np.ndarray, out: np.ndarray) -> None:
        """Rebuild each transition of a batch from its LZ4 blocks (each after a 4-byte length) into `out`."""
        dst, nbytes, span = memoryview(out).cast("B"), out[0, 0].nbytes, self.span
        for i, f in enumerate(first.tolist()):
            bounds = (self.offsets[f : f + span + 1] - self.offsets[f] + i * self.max_read).tolist()
            for k in range(span):
                at = (i * span + k) * nbytes
                dst[at : at + nbytes] = lz4.block.decompress(stage[bounds[k] + 4 : bounds[k + 1]], uncompressed_size=nbytes)

    def read_batch(self, stage: memoryview, out: np.ndarray | None) -> np.ndarray:
        """Read one batch of random transitions: raw frames straight into `out` where given, else each
        transition's bytes into its place in `stage`. Returns each transition's first frame."""
        offsets, span = self.offsets, self.span
        first = self.rng.integers(0, len(offsets) - span, self.args.batch_size)  # the last start is n - span
        if out is not None and not self.compressed:
            views = [memoryview(x).cast("B") for x in out]
        else:
            sizes = (offsets[first + span] - offsets[first]).tolist()
            views = [stage[i * self.max_read : i * self.max_read + m] for i, m in enumerate(sizes)]
        self.read(views, offsets[first].tolist())
        return first

    def check(self, pool: list[np.ndarray]) -> None:
        """A batch rebuilt as `rate` rebuilds it must hold the pool's frames (file frame j is pool frame j % len(pool))."""
        out = np.empty((self.args.batch_size, self.span, *pool[0].shape), np.uint8)
        first = self.read_batch(self.stages[0], out)
        if self.compressed:
            self.decode(self.stages[0], first, out)
        want = np.stack([np.stack([pool[(f + k) % len(pool)] for k in range(self.span)]) for f in first.tolist()])
        if not np.array_equal(out, want):
            sys.exit(f"{self.path}: rebuilt frames differ from the frames written")

    def rate(self, rebuild: bool, frame_shape: tuple) -> float:
        """Random transitions/s over `seconds`, from a cold page cache: bytes only, or rebuilt into arrays."""
        B = self.args.batch_size
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        outs = [np.empty((B, self.span, *frame_shape), np.uint8) for _ in range(2)]
        decoding = [None, None]
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < self.args.seconds:
            k = (n // B) % 2
            if decoding[k] is not None:
                decoding[k].result()  # this stage and output are free again
            first = self.read_batch(self.stages[k], outs[k] if rebuild else None)
            if rebuild and self.compressed:
                decoding[k] = self.decoder.submit(self.decode, self.stages[k], first, outs[k])
            n += B
        for job in decoding:
            if job is not None:
                job.result()
        return n / (time.perf_counter() - t)


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def main(args: Args) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="frame_codec_bench_", dir=args.path))
    t_start = time.perf_counter()
    print(f"$ python benchmarks/frame_codec_bench.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"machine: {os.cpu_count()} CPUs, lz4 {lz4.library_version_string()}; {args.frames:,} frames per file, "
          f"batches of {args.batch_size} transitions of {args.stack_size + 1} frames, {AIO_DEPTH} reads in flight")
    try:
        raw = None
        for env_id in args.env_ids:
            pool = frame_pool(env_id, args)
            frame_shape, frame_bytes = pool[0].shape, pool[0].nbytes
            packed = [len(c).to_bytes(4, "little") + c for c in (lz4.block.compress(f, store_size=False) for f in pool)]
            compress_us = per_call_us(lambda f: lz4.block.compress(f, store_size=False), pool)
            out = memoryview(bytearray(frame_bytes))
            decompress_us = per_call_us(lambda c: out.__setitem__(slice(None), lz4.block.decompress(
                memoryview(c)[4:], uncompressed_size=frame_bytes)), packed)
            for f, c in zip(pool[:64], packed):  # lossless, or the comparison means nothing
                assert lz4.block.decompress(c[4:], uncompressed_size=frame_bytes) == f.tobytes()
            if raw is None:  # raw reads do not depend on what the frames show: one raw file for all games
                raw_file = scratch / "raw.bin"
                raw = ColdReads(raw_file, write_file(raw_file, [f.tobytes() for f in pool], args.frames), False, args)
            lz4_file = scratch / f"{env_id}.lz4.bin"
            packed_reads = ColdReads(lz4_file, write_file(lz4_file, packed, args.frames), True, args)
            if env_id == args.env_ids[0]:
                raw.check(pool)  # the raw file holds the first game's frames
            packed_reads.check(pool)
            results = {k: [] for k in ("raw_reads", "lz4_reads", "raw_samples", "lz4_samples")}
            for p in range(args.passes):  # alternate, so that both see the disk in the same minutes
                order = [(raw, "raw"), (packed_reads, "lz4")]
                for store, name in order if p % 2 == 0 else order[::-1]:
                    results[f"{name}_reads"].append(store.rate(False, frame_shape))
                    results[f"{name}_samples"].append(store.rate(True, frame_shape))
            med = {k: statistics.median(v) for k, v in results.items()}
            lz4_bytes = packed_reads.offsets[-1] / args.frames
            packed_reads.close()
            lz4_file.unlink()
            rows = [["bytes/frame on disk", f"{frame_bytes:,}", f"{lz4_bytes:,.0f}", f"{lz4_bytes / frame_bytes:.2f}x"],
                    ["compress, us/frame", "", f"{compress_us:.1f}", ""],
                    ["decompress, us/frame", "", f"{decompress_us:.1f}", ""],
                    ["cold reads, transitions/s", f"{med['raw_reads']:,.0f}", f"{med['lz4_reads']:,.0f}", f"{med['lz4_reads'] / med['raw_reads']:.2f}x"],
                    ["cold samples (read + rebuilt), transitions/s", f"{med['raw_samples']:,.0f}", f"{med['lz4_samples']:,.0f}",
                     f"{med['lz4_samples'] / med['raw_samples']:.2f}x"]]
            print(f"\n{env_id} ({len(pool):,} pool frames); passes: " + "; ".join(
                f"{k} {' '.join(f'{x:,.0f}' for x in v)}" for k, v in results.items()))
            print(table(["metric", "raw (lake.py)", "lz4", "lz4 / raw"], rows))
        if raw is not None:
            raw.close()
    finally:
        for f in scratch.iterdir():
            f.unlink()
        scratch.rmdir()
    print(f"\nwall time {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main(tyro.cli(Args))
