"""The evaluation protocol both scripts share, and the ε-greedy acting it is made of: --eval-episodes full games per
network, all envs stepped together, ε (--eval-epsilon) drawn from a generator of its own, so that evaluating never
moves the training's random stream; a game stops at --eval-max-frames. And what a merge learned: the BigAgent's greedy
actions against its agents' on probe states (collapse_metrics)."""

from typing import Optional

import numpy as np
import torch
import torch.nn as nn

from envs import atari_game, frames_per_step, make_camera, minatar_game, minatar_rgb


def epsilon_greedy(
    q_values: torch.Tensor, epsilon: float, generator: Optional[torch.Generator] = None, drawn: Optional[tuple] = None
) -> torch.Tensor:
    # Draws the random numbers even when ε = 0, so the RNG stream does not depend on ε (or takes them drawn earlier).
    greedy, device, A = q_values.argmax(1), q_values.device, q_values.shape[1]
    random_actions, uniforms = drawn or (
        torch.randint(A, greedy.shape, device=device, generator=generator),
        torch.rand(greedy.shape, device=device, generator=generator),
    )
    return torch.where(uniforms < epsilon, random_actions, greedy)


def evaluation_steps(q_networks: list, args, envs, seed: int, device: torch.device):
    """The evaluation's acting: --eval-episodes envs per network stepped together, ε drawn from a generator of its own
    (the training's stream is untouched). Yields each step's (observations it acted on, actions, rewards, game ends)."""
    E, generator, (obs, _) = args.eval_episodes, torch.Generator(device).manual_seed(seed), envs.reset(seed=seed)
    while True:
        obs_device = torch.from_numpy(obs).to(device)
        with torch.no_grad():
            actions = [
                epsilon_greedy(net(obs_device[k * E : (k + 1) * E]), args.eval_epsilon, generator)
                for k, net in enumerate(q_networks)
            ]
        actions = torch.cat(actions).cpu().numpy()
        acted_on, (obs, rewards, terminated, truncated, info) = obs, envs.step(actions)
        yield acted_on, actions, rewards, truncated | (terminated & (info["lives"] == 0))


def evaluate(q_networks: list, args, envs, seed: int, device: torch.device, film: bool = False):
    """One game (--eval-max-frames at most) per env (evaluation_steps). Returns (returns, lengths, network 0's
    video)."""
    K, E, max_steps = len(q_networks), args.eval_episodes, -(-args.eval_max_frames // frames_per_step(args))
    camera = make_camera(args) if film and atari_game(args.env_id) is not None else None
    minatar = minatar_game(args.env_id) is not None
    if camera is not None:
        screen, _ = camera.reset(seed=seed)  # env 0's seed: a vector env's env i is reset with seed + i
    returns, lengths, done, video = np.zeros(K * E), np.zeros(K * E, np.int64), np.zeros(K * E, bool), []
    for obs, actions, rewards, game_ends in evaluation_steps(q_networks, args, envs, seed, device):
        if film and not done[0]:
            video.append(screen[0, -1] if camera is not None else minatar_rgb(obs[0, -1]) if minatar else obs[0, -1])
            screen = camera.step(actions[:1])[0] if camera is not None else None
        returns += rewards * ~done
        lengths += ~done
        done |= game_ends | (lengths >= max_steps)
        if done.all():
            break
    if camera is not None:
        camera.close()
    return returns.reshape(K, E), lengths.reshape(K, E), video


def collapse_metrics(big_network: nn.Module, agent_networks: list, probe: torch.Tensor, n_actions: int) -> dict:
    """On the probe states: how often the BigAgent's greedy action is each agent's (distill/agreement, their mean), its
    most frequent greedy action's share and its greedy actions' entropy in nats (a collapsed BigAgent: 1 and 0); and
    how far the agents went apart in the phase: the share of states where two agents' greedy actions differ, the mean
    over pairs (diversity/disagreement: 0 for identical agents, as each phase starts after a clone)."""
    with torch.no_grad():
        greedy = lambda net: torch.cat([net(part).argmax(1) for part in probe.split(4096)])  # noqa: E731
        big, agents = greedy(big_network), [greedy(net) for net in agent_networks]
    agreement = [float(actions.eq(big).float().mean()) for actions in agents]
    pairs = [float(a.ne(b).float().mean()) for i, a in enumerate(agents) for b in agents[i + 1 :]]
    share = np.bincount(big.cpu().numpy(), minlength=n_actions) / len(big)
    return {
        "distill/agreement": float(np.mean(agreement)),
        **{f"agent{k}/distill/agreement": a for k, a in enumerate(agreement)},
        "distill/top_action_share": float(share.max()),
        "distill/greedy_entropy": float(-(share[share > 0] * np.log(share[share > 0])).sum()),
        **({"diversity/disagreement": float(np.mean(pairs))} if pairs else {}),
    }
