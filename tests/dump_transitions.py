"""Every step an agent's envs take, recorded (what the tests compare the Lake and ALE's frame counters with).

    python tests/dump_transitions.py DUMP_DIR pqn_lake.py <flags>     # the script as it runs, its agents recorded

writes DUMP_DIR/agent<k>_phase_<p>.npz: the steps of the k-th vector env the script made (the agents' envs come
first), one file per reset (a phase: the envs are reset at each phase's start). In a test's own process, wrap an
agent's envs (agent.envs = Recorder(agent.envs)) and read Recorder.recorded().

Per step t (arrays (T, N, ...)): obs (the observation acted on), actions, rewards, terminated, truncated,
episode_start (obs starts afresh: the first step's, and the obs after an autoreset step or a forced FIRE), lives,
frame_number and episode_frame_number (ALE's counters, zeros elsewhere); and reset_frame_number (N,).
"""

import atexit
import runpy
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
KEYS = "obs actions rewards terminated truncated episode_start lives frame_number episode_frame_number".split()


class Recorder:
    """A vector env (send / recv, as the agents step theirs) whose steps are kept, reset by reset."""

    def __init__(self, envs, on_reset=None):
        self.envs, self.on_reset, self.steps, self.obs = envs, on_reset, {k: [] for k in KEYS}, None
        self.reset_frame_number, self.starts, self.game_over = None, None, None

    def __getattr__(self, name):
        return getattr(self.envs, name)

    def reset(self, seed=None, **kwargs):
        if self.on_reset is not None and self.steps["actions"]:
            self.on_reset(self.recorded())
        obs, info = self.envs.reset(seed=seed, **kwargs)
        self.steps, self.obs = {k: [] for k in KEYS}, obs
        self.starts, self.game_over = np.ones(obs.shape[0], bool), np.zeros(obs.shape[0], bool)
        self.reset_frame_number = np.array(info.get("frame_number", np.zeros(obs.shape[0], np.int64)), copy=True)
        return obs, info

    def send(self, actions):
        self.steps["obs"].append(np.array(self.obs, copy=True))
        self.steps["actions"].append(np.array(actions, copy=True))
        self.steps["episode_start"].append(self.starts)
        return self.envs.send(actions)

    def recv(self):
        obs, rewards, terminated, truncated, info = out = self.envs.recv()
        zeros = np.zeros(len(rewards), np.int64)
        for key, value in (("rewards", rewards), ("terminated", terminated), ("truncated", truncated)):
            self.steps[key].append(np.array(value, copy=True))
        for key in ("lives", "frame_number", "episode_frame_number"):
            self.steps[key].append(np.array(info.get(key, zeros), copy=True))
        # the obs after an autoreset step (the step after a game's end) or a forced FIRE starts afresh
        self.starts, self.obs = self.game_over | info.get("forced", False), obs
        self.game_over = truncated | (terminated & (info["lives"] == 0))
        return out

    def recorded(self) -> dict:
        """The steps since the last reset, stacked, and reset_frame_number."""
        done = {k: np.stack(v) for k, v in self.steps.items() if len(v) == len(self.steps["rewards"]) and v}
        return {**done, "reset_frame_number": self.reset_frame_number}


def main(dump_dir: Path, script: str, flags: list) -> None:
    """Run `script` as __main__ with every vector env it makes recorded into dump_dir."""
    import envs

    dump_dir.mkdir(parents=True, exist_ok=True)
    made, recorders = envs.make_envs, []

    def make_envs(*args, **kwargs):
        k, phase = len(recorders), [0]

        def dump(steps: dict) -> None:
            phase[0] += 1
            np.savez(dump_dir / f"agent{k}_phase_{phase[0]:04d}.npz", **steps)

        recorders.append(Recorder(made(*args, **kwargs), on_reset=dump))
        return recorders[-1]

    envs.make_envs = make_envs  # (the script's `from envs import make_envs` takes it)
    atexit.register(lambda: [r.on_reset(r.recorded()) for r in recorders if r.steps["rewards"]])
    sys.argv = [script, *flags]
    runpy.run_path(str(ROOT / script), run_name="__main__")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
