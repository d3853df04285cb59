"""A tiny image env whose best action is readable from the frame: the learning test's env.

Each frame is black except a bright vertical bar in one of `n_actions` columns; the action with the
bar's index earns reward 1, any other 0, and the bar moves to a new random column every step. An
episode is `episode_length` steps (then terminated), so the optimal return is `episode_length` and a
uniformly random policy gets `episode_length / n_actions`. The bar is in the newest frame of the stack,
so this checks the whole pipeline (uint8 frames, stacking, CNN, Q-targets, the Lake round trip)
without needing credit assignment over time.

    python pqn_lake.py --env-id tests.synthetic_env:PondGlyph-v0          # 84x84, the default frame size
    python pqn_lake.py --env-id tests.synthetic_env:PondGlyphSmall-v0 --frame-height 36 --frame-width 36

(36x36 is the smallest input of the Nature CNN: 8x8/4 -> 8, 4x4/2 -> 3, 3x3/1 -> 1.)
"""

import gymnasium as gym
import numpy as np


class PondGlyph(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, size: int = 84, n_actions: int = 4, episode_length: int = 16, rgb: bool = False):
        self.size, self.n_actions, self.episode_length = size, n_actions, episode_length
        shape = (size, size, 3) if rgb else (size, size)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(n_actions)
        self.optimal_return = float(episode_length)
        self._frame = np.zeros(shape, np.uint8)

    def _observe(self) -> np.ndarray:
        self.target = int(self.np_random.integers(self.n_actions))
        width = self.size // self.n_actions
        self._frame[:] = 0
        self._frame[:, self.target * width : (self.target + 1) * width] = 255
        return self._frame.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == self.target)
        self.t += 1
        return self._observe(), reward, self.t >= self.episode_length, False, {}


gym.register("PondGlyph-v0", entry_point=PondGlyph, kwargs={"size": 84})
gym.register("PondGlyphSmall-v0", entry_point=PondGlyph, kwargs={"size": 36})
gym.register("PondGlyphSmallRGB-v0", entry_point=PondGlyph, kwargs={"size": 36, "rgb": True})
