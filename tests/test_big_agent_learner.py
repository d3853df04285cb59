"""The BigAgent's learner: n-step targets over the BigPond's slices, the collapse and diversity metrics, and the
design's one-step DQN unchanged at --big-n-step 1."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pqn_lake
from evaluation import collapse_metrics
from envs import MinAtarVectorEnv
from lake import Lake
from script_runs import SMALL_AGENTS, metrics, only_run_dir, run
from test_minatar import random_steps

GAMMA = 0.5


def test_n_step_targets_equal_hand_computed_values():
    """Two slices of one stream's steps: slice A is transitions 0-5 (a termination at 1, a truncation at 3, then the
    autoreset step, so transition 4's obs starts two frames on), slice B is 6-8 (its frames after A's)."""
    obs_start = np.array([0, 1, 2, 3, 5, 6, 20, 21, 22])
    rewards = np.array([1, 2, -3, 1, 0.5, 1, 1, 0, 1], np.float32)  # clipped to their sign: 1 1 -1 1 1 1 1 0 1
    terminated = np.array([0, 1, 0, 0, 0, 0, 0, 0, 0], bool)
    truncated = np.array([0, 0, 0, 1, 0, 0, 0, 0, 0], bool)
    returns, discounts, bootstrap = pqn_lake.n_step_targets(obs_start, rewards, terminated, truncated, 3, GAMMA)
    g = GAMMA
    expected = [  # (return, discount, bootstrap frame) of each transition, by hand
        (1 + g * 1, 0.0, 2),  # 0 -> 1, terminated at 1: no bootstrap
        (1, 0.0, 2),  # terminated itself
        (-1 + g * 1, g**2, 4),  # 2 -> 3, truncated at 3: bootstrap from 3's final obs (frame 4)
        (1, g, 4),  # truncated itself
        (1 + g * 1, g**2, 7),  # 4 -> 5, the slice ends at 5: bootstrap from 5's next obs
        (1, g, 7),  # the slice's last transition
        (1 + g * 0 + g**2 * 1, g**3, 23),  # a full 3-step window
        (0 + g * 1, g**2, 23),  # 7 -> 8, the end
        (1, g, 23),
    ]
    assert np.allclose(returns, [e[0] for e in expected]) and np.allclose(discounts, [e[1] for e in expected])
    assert bootstrap.tolist() == [e[2] for e in expected]
    one = pqn_lake.n_step_targets(obs_start, rewards, terminated, truncated, 1, GAMMA)
    assert np.array_equal(one[0], np.sign(rewards)) and np.array_equal(one[2], obs_start + 1)
    assert np.array_equal(one[1], np.float32(GAMMA) * (1 - terminated.astype(np.float32)))


def make_lake(tmp_path, groups=("agent0",), steps=400):
    """A Lake of MinAtar Breakout streams played at random (game ends and truncations inside)."""
    lake = Lake(tmp_path / "lake", frame_shape=(10, 10, 4), stack_size=1, env_id="MinAtar/Breakout-v1")
    for k, group in enumerate(groups):
        s = random_steps(MinAtarVectorEnv("breakout", 4, 1, True, 0.1, max_steps=60), steps, seed=k)
        lake.append(group, s["obs"], s["actions"], s["rewards"], s["terminated"], s["truncated"], s["episode_start"])
    lake.commit(wait=True)
    return lake


def old_big_agent_update(big_agent, frames, obs_start, actions, rewards, terminated, args):
    """The BigAgent's update before n-step targets and distillation (the design's one-step Double DQN), verbatim."""
    device = frames.device
    idx = torch.randint(len(obs_start), (args.big_batch_size,), device=device)
    stacks = frames[obs_start[idx, None] + torch.arange(args.stack_size + 1, device=device)]
    obs, next_obs = stacks[:, :-1], stacks[:, 1:]
    with torch.no_grad():
        target_q = big_agent.target_network(next_obs)
        next_v = pqn_lake.chosen(target_q, big_agent.q_network(next_obs).argmax(1))
        td_target = rewards[idx] + args.gamma * (1 - terminated[idx]) * next_v
    q_taken = pqn_lake.chosen(big_agent.q_network(obs), actions[idx])
    loss = F.mse_loss(q_taken, td_target)
    big_agent.optimizer.zero_grad()
    loss.backward()
    big_agent.optimizer.step()
    return loss.detach()


def test_flags_off_give_the_seeds_learner_bit_for_bit(tmp_path):
    # the design's learner: --big-n-step 1
    args = pqn_lake.Args(
        env_id="MinAtar/Breakout-v1", big_batch_size=32, big_pond_size=1000, big_pond_slice_steps=16, big_n_step=1
    )
    with make_lake(tmp_path) as lake:
        pond = pqn_lake.fill_big_pond(lake, args, np.random.default_rng(0), torch.device("cpu"))
    rewards, terminated = pond.returns, (pond.discounts == 0).float()  # n = 1: the reward and the termination
    new, old = (pqn_lake.make_big_agent(args, 3, torch.device("cpu")) for _ in range(2))
    old.q_network.load_state_dict(new.q_network.state_dict())
    old.target_network.load_state_dict(new.target_network.state_dict())
    torch.manual_seed(5)
    new_losses = [pqn_lake.big_agent_update(new, pond, args)[0] for _ in range(20)]
    torch.manual_seed(5)
    old_losses = [
        old_big_agent_update(old, pond.frames, pond.obs_start, pond.actions, rewards, terminated, args)
        for _ in range(20)
    ]
    assert all(torch.equal(a, b) for a, b in zip(new_losses, old_losses))
    assert all(torch.equal(a, b) for a, b in zip(new.q_network.parameters(), old.q_network.parameters()))


def test_collapse_metrics_recomputed_from_the_networks_they_compare(tmp_path, monkeypatch):
    """A phase's agreement, top action share and entropy, recomputed from the agents just before the BigAgent's part
    and the BigAgent after it (their checkpoints) on the probe states drawn again from the Lake, equal the
    logged ones; compare.py draws them from a run's metrics."""
    from test_merge import minatar_breakout_network, one_phase

    run_dir, before, after, logged = one_phase(
        tmp_path / "one", monkeypatch, "--num-agents", "2", "--collapse-probe-states", "500"
    )
    args = pqn_lake.Args(env_id="MinAtar/Breakout-v1", collapse_probe_states=500)
    with Lake(run_dir / "lake", mode="r") as lake:
        probe = pqn_lake.draw_probe(lake, args, 1, torch.device("cpu"))
    agents = [minatar_breakout_network(a["q_network"]) for a in before["agents"]]
    big_agent = minatar_breakout_network(after["big_agent"]["q_network"])
    recomputed = collapse_metrics(big_agent, agents, probe, 3)
    assert recomputed == {k: logged[k] for k in recomputed}
    assert 0 < recomputed["distill/top_action_share"] <= 1 and recomputed["distill/greedy_entropy"] <= np.log(3) + 1e-9
    assert 0 < recomputed["diversity/disagreement"] < 1  # two agents trained apart for a phase
    runs = tmp_path / "runs"
    run_script = ["pqn_lake.py", "--env-id", "MinAtar/Breakout-v1", "--num-agents", "2", *SMALL_AGENTS]
    run_script += ["--agent-updates-per-phase", "3", "--total-frames", str(2 * 2 * 8 * 16 * 3), "--big-pond-size"]
    run_script += ["1000", "--big-pond-slice-steps", "16", "--eval-episodes", "1", "--runs-dir", str(runs)]
    run(*run_script)
    assert sum("distill/agreement" in r for r in metrics(only_run_dir(runs))) == 2
    run("compare.py", str(runs), "--out", str(tmp_path / "compare"))
    assert (tmp_path / "compare" / "MinAtar_Breakout-v1_collapse.png").stat().st_size > 0


def test_diversity_is_zero_for_identical_agents_and_the_pairs_mean_otherwise():
    """diversity/disagreement: the share of probe states where two agents' greedy actions differ, the mean over pairs.
    Clones of one network give 0; for three networks it is the mean of the three pairs' shares, counted here by hand;
    one agent has no pair and no such metric."""
    args = pqn_lake.Args(env_id="MinAtar/Breakout-v1")
    torch.manual_seed(0)
    big, a, b = (pqn_lake.make_q_network(args, 3, torch.device("cpu")) for _ in range(3))
    probe = torch.randint(0, 2, (600, 1, 10, 10, 4), dtype=torch.uint8)
    same = collapse_metrics(big, [a, copy.deepcopy(a), copy.deepcopy(a)], probe, 3)
    assert same["diversity/disagreement"] == 0.0
    greedy = [net(probe).argmax(1) for net in (a, b, big)]
    by_hand = np.mean([(greedy[i] != greedy[j]).float().mean().item() for i, j in ((0, 1), (0, 2), (1, 2))])
    mixed = collapse_metrics(big, [a, b, big], probe, 3)
    assert mixed["diversity/disagreement"] == pytest.approx(by_hand) and mixed["diversity/disagreement"] > 0
    assert "diversity/disagreement" not in collapse_metrics(big, [a], probe, 3)
