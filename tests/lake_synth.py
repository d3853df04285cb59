"""Deterministic synthetic env streams for the Lake tests (shared by the tests and their subprocesses).

Every frame is a pure function of (session, stream, step, pad), and names itself in its first bytes, so a
test can recompute any transition and identify any transition the Lake returns. A stream is stacked like a
real frame-stacking wrapper: within an episode `obs[t] = [F(t-3), F(t-2), F(t-1), F(t)]`; on an
episode start `e` the frames before `e` are replaced by reset padding frames `P(e, e - u)`. A session's
first step continues a running episode (its stack holds frames of steps -3..-1) unless it is itself an
episode start.
"""

from __future__ import annotations

import numpy as np

HEADER = 6  # bytes: session, stream, step + OFFSET (3 bytes, little endian), pad
OFFSET = 64  # steps before a session's first step (-3..-1) still encode as non-negative


def _mix(*parts) -> np.ndarray:
    """A cheap integer hash of int arrays (vectorised, deterministic), values in [0, 2**32)."""
    x = np.zeros(np.broadcast(*[np.asarray(p) for p in parts]).shape, np.int64)
    for i, p in enumerate(parts):
        x = (x ^ ((np.asarray(p, np.int64) + 0x9E3779B9 * (i + 1)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x297A2D39) & 0xFFFFFFFF
        x ^= x >> 13
    return x


class Synth:
    """Streams of one group: `num_streams` streams, frames of `frame_shape`, stacks of `stack_size`."""

    def __init__(self, frame_shape=(4, 4), num_streams=2, stack_size=4, episode_len=25, seed=0):
        self.frame_shape = tuple(frame_shape)
        self.P = int(np.prod(self.frame_shape))
        assert self.P >= HEADER
        self.N, self.S, self.L, self.seed = num_streams, stack_size, episode_len, seed
        self._patterns = np.random.default_rng(seed).integers(0, 256, (16, self.P), dtype=np.uint8)

    # ------------------------------------------------------------------ per-step scalars
    def episode_start(self, session, stream, t) -> np.ndarray:
        t = np.asarray(t, np.int64)
        return (_mix(self.seed, session, stream, t, 1) % self.L == 0) & (t >= 0)

    def actions(self, session, stream, t) -> np.ndarray:
        return (_mix(self.seed, session, stream, t, 2) % 18).astype(np.int64)

    def rewards(self, session, stream, t) -> np.ndarray:
        return ((_mix(self.seed, session, stream, t, 3) % 401).astype(np.float32) - 200) / np.float32(16)

    def terminated(self, session, stream, t) -> np.ndarray:
        return _mix(self.seed, session, stream, t, 4) % 5 == 0

    def truncated(self, session, stream, t) -> np.ndarray:
        return _mix(self.seed, session, stream, t, 5) % 7 == 0

    # ------------------------------------------------------------------ frames
    def frames(self, session, stream, t, pad=0) -> np.ndarray:
        """Frames for broadcast arrays of (session, stream, step, pad): shape (*broadcast, *frame_shape)."""
        session, stream, t, pad = np.broadcast_arrays(*[np.asarray(v, np.int64) for v in (session, stream, t, pad)])
        shape = session.shape
        session, stream, t, pad = (v.ravel() for v in (session, stream, t, pad))
        h = _mix(self.seed, session, stream, t, pad, 6)
        # Body: one of 16 random patterns, offset by a hash byte (cheap, and differs between neighbours).
        out = self._patterns[h % 16] + ((h >> 8) & 0xFF).astype(np.uint8)[:, None]
        u = t + OFFSET
        out[:, 0], out[:, 1] = session, stream
        out[:, 2], out[:, 3], out[:, 4] = u & 0xFF, (u >> 8) & 0xFF, (u >> 16) & 0xFF
        out[:, 5] = pad
        return out.reshape(*shape, *self.frame_shape)

    @staticmethod
    def decode(frame) -> tuple[int, int, int, int]:
        """(session, stream, step, pad) of one frame."""
        b = np.asarray(frame).reshape(-1)[:HEADER].astype(np.int64)
        return int(b[0]), int(b[1]), int(b[2] | (b[3] << 8) | (b[4] << 16)) - OFFSET, int(b[5])

    def decode_many(self, frames) -> np.ndarray:
        """(K, 4) int64: session, stream, step, pad of K frames."""
        b = np.asarray(frames).reshape(len(frames), -1)[:, :HEADER].astype(np.int64)
        return np.stack([b[:, 0], b[:, 1], (b[:, 2] | (b[:, 3] << 8) | (b[:, 4] << 16)) - OFFSET, b[:, 5]], 1)

    def obs(self, session, stream, t) -> np.ndarray:
        """Stacked observations for broadcast arrays of (session, stream, step): (*shape, S, *frame_shape)."""
        session, stream, t = np.broadcast_arrays(*[np.asarray(v, np.int64) for v in (session, stream, t)])
        S = self.S
        # The latest episode start in (t - S + 1, t] decides which stack positions are padding.
        estar = np.full(t.shape, np.iinfo(np.int64).min)
        for d in range(S - 2, -1, -1):  # later starts (smaller d) win: written last
            hit = self.episode_start(session, stream, t - d)
            estar = np.where(hit, t - d, estar)
        u = t[..., None] - (S - 1 - np.arange(S))  # step of each stack position
        is_pad = u < estar[..., None]
        step = np.where(is_pad, estar[..., None], u)
        pad = np.where(is_pad, estar[..., None] - u, 0)
        return self.frames(session[..., None], stream[..., None], step, pad)

    def batch(self, session: int, t0: int, T: int, streams=None):
        """Steps t0..t0+T-1 of all streams, as the Lake's append takes them: leading dims (T, N)."""
        streams = np.arange(self.N) if streams is None else np.asarray(streams)
        t = np.arange(t0, t0 + T)[:, None]
        n = streams[None, :]
        return (
            self.obs(session, n, t),
            self.actions(session, n, t),
            self.rewards(session, n, t),
            self.terminated(session, n, t),
            self.truncated(session, n, t),
            self.episode_start(session, n, t),
        )

    def valid(self, session, stream, t, committed: int) -> np.ndarray:
        """Whether step t of a session whose first `committed` steps were committed is a Lake transition."""
        t = np.asarray(t, np.int64)
        return (t >= 0) & (t + 1 < committed) & ~self.episode_start(session, stream, t + 1)

    def check_transitions(self, session, stream, t, obs, next_obs, actions, rewards, terminated, truncated) -> None:
        """Assert that K transitions read from a Lake equal the synthetic truth of (session, stream, t)."""
        t = np.asarray(t, np.int64)
        for name, got, want in [
            ("obs", obs, self.obs(session, stream, t)),
            ("next_obs", next_obs, self.obs(session, stream, t + 1)),
            ("actions", actions, self.actions(session, stream, t)),
            ("rewards", rewards, self.rewards(session, stream, t)),
            ("terminated", terminated, self.terminated(session, stream, t)),
            ("truncated", truncated, self.truncated(session, stream, t)),
        ]:
            got = np.asarray(got)
            if got.shape != want.shape or not np.array_equal(got, want):  # fast path; details only on failure
                np.testing.assert_array_equal(got, want, err_msg=f"{name} differs from the truth")
