"""What the script tests share: run a script as a user runs it (a subprocess in the repo root), read its
run folder, and parse the animated PNGs that --capture-video writes."""

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
# One intra-op thread: the runs are tiny, and OpenMP's spinning threads collapse when the two cores are
# shared with the env threads and the Lake's writer.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(script: str, *flags: str, timeout: int = 300) -> str:
    """`python script flags...`; asserts it exits 0 (showing the end of its output if not); returns stdout."""
    proc = subprocess.run([sys.executable, script, *flags], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def start(script: str, *flags: str) -> subprocess.Popen:
    """The script in the background, stdout and stderr merged into proc.stdout (text lines)."""
    return subprocess.Popen([sys.executable, script, *flags], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def only_run_dir(runs: Path) -> Path:
    (run_dir,) = list(runs.iterdir())
    return run_dir


def metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def read_apng(path: Path) -> np.ndarray:
    """Parse an APNG as write_apng writes it (checks chunk CRCs and sequence numbers): (frames, H, W[, 3])."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, frames, seq, shape, num_frames = 8, [], 0, None, None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(tag + body)
        pos += 12 + length
        if tag == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            shape = (h, w) if color == 0 else (h, w, 3)
        elif tag == b"acTL":
            num_frames = struct.unpack(">I", body[:4])[0]
        elif tag in (b"fcTL", b"fdAT"):
            assert struct.unpack(">I", body[:4])[0] == seq
            seq += 1
        if tag in (b"IDAT", b"fdAT"):
            rows = np.frombuffer(zlib.decompress(body if tag == b"IDAT" else body[4:]), np.uint8).reshape(shape[0], -1)
            assert (rows[:, 0] == 0).all()
            frames.append(rows[:, 1:].reshape(shape))
    assert len(frames) == num_frames
    return np.stack(frames)
