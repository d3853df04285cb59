"""PQN's networks as dqn_single_baseline.py uses them: the Nature CNN with LayerNorm after every hidden layer (Atari,
gymnasium ids) and PQN's MinAtar network. pqn_lake.py keeps its own copy, since a fork of the loop changes its
networks there; tests/test_minatar.py holds the two equal (the same weights from the same seed, the same outputs), so
the baseline learns with the mixture's network."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from envs import frame_shape, minatar_game


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class QNetwork(nn.Module):
    """Nature CNN (Mnih et al. 2015) with LayerNorm after every hidden layer, as PQN (PyTorch layout of
    CleanRL pqn_atari_envpool.py); the flatten size follows the frame size, so 256x256 frames work."""

    def __init__(self, n_actions: int, in_channels: int, height: int, width: int):
        super().__init__()
        h1, w1 = (height - 8) // 4 + 1, (width - 8) // 4 + 1
        h2, w2 = (h1 - 4) // 2 + 1, (w1 - 4) // 2 + 1
        h3, w3 = h2 - 2, w2 - 2
        if h3 < 1 or w3 < 1:
            raise ValueError(f"frames of {height}x{width} are too small for the Nature CNN (36x36 at least)")
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)),
            nn.LayerNorm([32, h1, w1]),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.LayerNorm([64, h2, w2]),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.LayerNorm([64, h3, w3]),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * h3 * w3, 512)),
            nn.LayerNorm(512),
            nn.ReLU(),
            layer_init(nn.Linear(512, n_actions)),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs: uint8 (B, stack, H, W), or (B, stack, H, W, 3) for RGB (stack and colour become channels)."""
        if obs.dim() == 5:
            obs = obs.permute(0, 1, 4, 2, 3).flatten(1, 2)
        return self.network(obs.float() / 255.0)


class MinAtarQNetwork(nn.Module):
    """PQN's MinAtar network (purejaxql pqn_minatar.py): conv 16 3x3 + LayerNorm over each cell's channels (flax's)
    + ReLU, dense 128 + LayerNorm + ReLU, linear head; orthogonal init (CleanRL's), the 0/1 grids fed as they are."""

    def __init__(self, n_actions: int, in_channels: int, height: int, width: int):
        super().__init__()
        self.conv, self.conv_norm = layer_init(nn.Conv2d(in_channels, 16, 3)), nn.LayerNorm(16)
        self.dense, self.dense_norm = layer_init(nn.Linear(16 * (height - 2) * (width - 2), 128)), nn.LayerNorm(128)
        self.head = layer_init(nn.Linear(128, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs: uint8 (B, stack, H, W, C) (stack and channels become the conv's input channels)."""
        x = self.conv(obs.permute(0, 1, 4, 2, 3).flatten(1, 2).float())
        x = F.relu(self.conv_norm(x.permute(0, 2, 3, 1)))
        return self.head(F.relu(self.dense_norm(self.dense(x.flatten(1)))))


def make_q_network(args, n_actions: int, device: torch.device) -> nn.Module:
    """PQN's network for the env family: MinAtarQNetwork for MinAtar ids, else the Nature CNN (QNetwork)."""
    shape = frame_shape(args)
    if minatar_game(args.env_id) is not None:
        return MinAtarQNetwork(n_actions, args.stack_size * shape[2], *shape[:2]).to(device)
    return QNetwork(n_actions, args.stack_size * (3 if args.rgb else 1), shape[0], shape[1]).to(device)


def chosen(q_values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    # A one-hot product rather than gather: gather's backward is a scatter-add, not deterministic on CUDA.
    return (q_values * F.one_hot(actions, q_values.shape[1])).sum(1)
