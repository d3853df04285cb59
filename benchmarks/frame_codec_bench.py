"""Which codec and chunk length should the Lake store frames with? A chunk-codec study on real Atari frames.

    OMP_NUM_THREADS=1 python benchmarks/frame_codec_bench.py                 # 3 games x 8 envs x 2,000 steps, ~1 min
    OMP_NUM_THREADS=1 python benchmarks/frame_codec_bench.py --steps 10000   # 5x the frames and the time

The Lake (lake.py, format v2) stores each env stream's 84x84 uint8 frames in chunks of `CHUNK_FRAMES` consecutive
frames, each chunk compressed with zstd at `ZSTD_LEVEL` (the `zstandard` package; hdf5plugin's Zstd filter reads
the same bytes in a sealed segment). Those two choices come from this study. Consecutive frames of one env are
nearly identical, so a longer chunk compresses better; but a chunk is decoded whole, and a uniformly sampled
transition (`stack_size + 1` consecutive frames) needs one chunk or two, so a longer chunk costs more decoding per
sample. A bulk slice read decodes runs of chunks, and only the cost per frame matters there.

For each game, random play (ale-py `AtariVectorEnv`, 84x84 grayscale, `--num-envs` x `--steps`) gives one stream
per env: the newest frame of each step's observation. Every stream is cut into chunks of K frames (the same frames
for every K: the streams are cut to a multiple of the largest K), and for each codec and K:

  B/frame     compressed chunk bytes / frames (raw: 7,056)
  ratio       raw bytes / compressed bytes
  comp GB/s   raw bytes compressed per second, one chunk per call, on one thread (median of `--passes` // 2)
  dec us/chk  microseconds to decode one chunk, one call per chunk as the Lake makes them (median of `--passes`)
  us/sample   decoding per sampled transition: dec us/chk x the chunks a window of `stack_size + 1` frames
              touches, averaged over every start position in the streams (1 + stack_size / K)
  ns/slice-f  decoding per frame of a bulk slice: dec us/chk / K

Codecs: zstd (`zstandard`, level `--level`), and Blosc2's zstd codec at level 1 (typesize 1, no filter) when
`blosc2` is installed (its default shuffle filter is measured too when it changes the bytes).
"""

import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # lake.py lives at the repository root
from lake import CHUNK_FRAMES, ZSTD_LEVEL

try:
    import blosc2
except ImportError:
    blosc2 = None


@dataclass
class Args:
    env_ids: tuple[str, ...] = ("Breakout-v5", "Gravitar-v5", "MsPacman-v5")
    """Atari games whose frames are compressed (as in the scripts, e.g. MsPacman-v5)"""
    num_envs: int = 8
    """envs of the random-play vector env: the streams of a game"""
    steps: int = 2000
    """steps of every env (one frame per step and stream)"""
    seed: int = 1
    """seed of the envs and of the random actions"""
    chunk_frames: tuple[int, ...] = (1, 4, 8, 16, 32, 64)
    """chunk lengths K to try, in frames (lake.py's CHUNK_FRAMES is always added)"""
    level: int = ZSTD_LEVEL
    """zstd level (default: lake.py's ZSTD_LEVEL)"""
    stack_size: int = 4
    """frames stacked in an observation: a sampled transition reads stack_size + 1 consecutive frames"""
    passes: int = 5
    """timed passes over all chunks; the median is reported"""
    max_bytes_per_frame: float = 400.0
    """the per-game summary picks the least decoding per sampled transition among rows at or under this size"""


def record(env_id: str, num_envs: int, steps: int, seed: int) -> np.ndarray:
    """Random play of one game: (num_envs, steps, 84, 84) uint8, each env's newest frame of every step."""
    from ale_py.vector_env import AtariVectorEnv

    game = "".join("_" + c.lower() if c.isupper() else c for c in env_id.split("-")[0]).lstrip("_")  # as lake.py fill
    envs = AtariVectorEnv(game, num_envs, episodic_life=False, reward_clipping=False)
    envs.reset(seed=seed)
    rng = np.random.default_rng(seed)
    frames = np.empty((num_envs, steps, *envs.single_observation_space.shape[1:]), np.uint8)
    for t in range(steps):
        obs = envs.step(rng.integers(0, envs.single_action_space.n, num_envs))[0]
        frames[:, t] = obs[:, -1]
    envs.close()
    return frames


def make_codecs(level: int) -> dict:
    """name -> (compress, decompress), each taking and returning one chunk's bytes, on this thread."""
    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
    codecs = {f"zstd-{level}": (cctx.compress, dctx.decompress)}
    if blosc2 is not None:
        blosc2.set_nthreads(1)
        for name, filters in (("", [blosc2.Filter.NOFILTER]), ("+shuffle", blosc2.CParams().filters)):
            cp = blosc2.CParams(codec=blosc2.Codec.ZSTD, clevel=1, typesize=1, nthreads=1, filters=filters)
            codecs[f"blosc2-zstd-1{name}"] = (lambda b, cp=cp: blosc2.compress2(b, cparams=cp), blosc2.decompress2)
    return codecs


def median_time(fn, chunks: list, passes: int) -> float:
    """Median over passes of the seconds one call of fn per chunk takes, for all chunks."""
    times = []
    for _ in range(passes):
        t0 = time.perf_counter()
        for c in chunks:
            fn(c)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def split(frames: np.ndarray, K: int) -> list:
    """Every stream's chunks of K frames, as contiguous views."""
    return [frames[s, i : i + K] for s in range(len(frames)) for i in range(0, frames.shape[1], K)]


def total_bytes(compress, frames: np.ndarray, K: int) -> int:
    return sum(len(compress(c)) for c in split(frames, K))


def measure(frames: np.ndarray, K: int, compress, decompress, passes: int, window: int) -> dict:
    """One (codec, K) row over all streams of a game."""
    streams, n = frames.shape[:2]
    chunks = split(frames, K)
    blobs = [compress(c) for c in chunks]
    for i in range(0, len(chunks), max(1, len(chunks) // 64)):
        assert decompress(blobs[i]) == chunks[i].tobytes(), "round trip failed"
    starts = np.arange(n - window + 1)
    touched = ((starts + window - 1) // K - starts // K + 1).mean()  # chunks a uniformly placed window decodes
    raw = frames.nbytes
    comp_s = median_time(compress, chunks, max(1, passes // 2))
    dec_us = median_time(decompress, blobs, passes) / len(blobs) * 1e6
    size = sum(len(b) for b in blobs)
    return {
        "bpf": size / (streams * n),
        "ratio": raw / size,
        "gbps": raw / comp_s / 1e9,
        "dec_us": dec_us,
        "us_sample": dec_us * touched,
        "ns_frame": dec_us * 1e3 / K,
    }


def main(args: Args) -> None:
    ks = sorted(set(args.chunk_frames) | {CHUNK_FRAMES})
    if min(ks) < 1 or args.steps < max(ks) or args.num_envs < 1 or args.stack_size < 1 or args.passes < 1:
        raise SystemExit(
            "frame_codec_bench.py: error: need chunk lengths >= 1, --steps >= the largest, "
            "--num-envs, --stack-size and --passes >= 1"
        )
    codecs = make_codecs(args.level)
    if blosc2 is None:
        print("blosc2 not importable: skipped (pip install blosc2 to include it)")
    window, default = args.stack_size + 1, f"zstd-{args.level}"
    print(
        f"zstd {zstandard.__version__}"
        + (f", blosc2 {blosc2.__version__}" if blosc2 else "")
        + f"; window of {window} frames per sampled transition; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    default_bpf = []
    for env_id in args.env_ids:
        t0 = time.time()
        frames = record(env_id, args.num_envs, args.steps, args.seed)
        n = args.steps - args.steps % max(ks)
        frames = np.ascontiguousarray(frames[:, :n])
        frame_bytes = frames[0, 0].nbytes
        print(
            f"\n{env_id}: {args.num_envs} streams x {n:,} frames ({frames.nbytes / 1e6:.0f} MB raw, "
            f"{frame_bytes:,} B/frame), played in {time.time() - t0:.1f}s"
        )
        names = list(codecs)
        shuffled = codecs.get("blosc2-zstd-1+shuffle", (None,))[0]
        # typesize 1: the shuffle filter may be a no-op
        if shuffled and all(
            total_bytes(shuffled, frames, K) == total_bytes(codecs["blosc2-zstd-1"][0], frames, K) for K in ks
        ):
            names.remove("blosc2-zstd-1+shuffle")
            print("blosc2-zstd-1 with its default shuffle filter: the same bytes at every K (typesize 1), not shown")
        print(
            f"{'codec':<22}{'K':>4}{'B/frame':>10}{'ratio':>8}{'comp GB/s':>11}{'dec us/chk':>12}"
            f"{'us/sample':>11}{'ns/slice-f':>12}"
        )
        rows = []
        for name in names:
            for K in ks:
                r = measure(frames, K, *codecs[name], args.passes, window)
                rows.append((name, K, r))
                print(
                    f"{name:<22}{K:>4}{r['bpf']:>10.0f}{r['ratio']:>8.1f}{r['gbps']:>11.2f}{r['dec_us']:>12.1f}"
                    f"{r['us_sample']:>11.1f}{r['ns_frame']:>12.0f}"
                )
                if name == default and K == CHUNK_FRAMES:
                    default_bpf.append(r["bpf"])
        fit = [row for row in rows if row[2]["bpf"] <= args.max_bytes_per_frame]
        if fit:
            name, K, r = min(fit, key=lambda row: row[2]["us_sample"])
            print(
                f"{env_id}: least decoding per sampled transition at <= {args.max_bytes_per_frame:.0f} B/frame: "
                f"{name} K={K} ({r['us_sample']:.1f} us/sample, {r['bpf']:.0f} B/frame)"
            )
        else:
            print(f"{env_id}: no codec and K at <= {args.max_bytes_per_frame:.0f} B/frame")
    print(
        f"\nlake.py's default, {default} K={CHUNK_FRAMES} (CHUNK_FRAMES={CHUNK_FRAMES}, ZSTD_LEVEL={ZSTD_LEVEL}): "
        f"{statistics.mean(default_bpf):.0f} B/frame averaged over {len(default_bpf)} games "
        f"({', '.join(f'{b:.0f}' for b in default_bpf)})"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))
