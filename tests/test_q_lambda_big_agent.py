"""--big-learner q-lambda (the BigAgent learns with PQN's Q(λ) over BigPond runs), --big-agent-reset, and
--agents-share-rollouts (each agent learns from all agents' rollouts): their targets by hand, the one-agent loop bit for
bit, and resume."""

import numpy as np
import pytest
import torch

import pqn_lake
from script_runs import TINY_MINATAR, load, metrics, only_run_dir, run_together
from test_big_agent_learner import make_lake

GAMMA, LAMBDA = 0.5, 0.6


class MaxOfFrame(torch.nn.Module):
    """Q(obs) = the obs's numbers: V(obs) = their max (the BigAgent's network, made readable)."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.flatten(1).float()


def hand_pond() -> tuple:
    """Seven transitions of stack-1 frames of two numbers: runs [0, 1] (1 terminates), [2, 3] (cut: 4's obs starts
    elsewhere), [4, 5, 6]."""
    obs_start = np.array([0, 1, 2, 3, 10, 11, 12])
    rewards = np.array([1, -2, 0.5, 1, 0, 1, -1], np.float32)  # sign-clipped: 1 -1 1 1 0 1 -1
    terminated = np.array([0, 1, 0, 0, 0, 0, 0], bool)
    frames = torch.tensor([[f, 20 - f] for f in range(14)], dtype=torch.uint8)  # V(frame f) = max(f, 20 - f)
    run_start, run_length = pqn_lake.runs_of(obs_start, terminated, np.zeros(7, bool))
    pond = pqn_lake.BigPond(
        frames=frames,
        obs_start=torch.from_numpy(obs_start),
        actions=torch.zeros(7, dtype=torch.long),
        returns=None,
        discounts=None,
        bootstrap_start=None,
        rewards=torch.from_numpy(np.sign(rewards)),
        terminated=torch.from_numpy(terminated).float(),
        run_start=torch.from_numpy(run_start),
        run_length=torch.from_numpy(run_length),
    )
    return pond, run_start, run_length


def drawn_returns(pond, q_lambda: float, network=None) -> dict:
    args = pqn_lake.Args(
        env_id="MinAtar/Breakout-v1",
        stack_size=1,
        gamma=GAMMA,
        q_lambda=q_lambda,
        big_pond_slice_steps=4,
        big_lambda_slices=200,
    )
    big_agent = pqn_lake.BigAgent(network or MaxOfFrame(), None, None)
    torch.manual_seed(0)
    index, returns = pqn_lake.big_lambda_draw(big_agent, pond, args)
    found = {}
    for i, g in zip(index.tolist(), returns.tolist()):
        assert found.setdefault(i, g) == g  # a transition drawn twice has one return
    return found


def test_q_lambda_returns_over_big_pond_runs_equal_a_hand_computation():
    pond, run_start, run_length = hand_pond()
    assert run_start.tolist() == [0, 2, 4] and run_length.tolist() == [2, 2, 3]
    g, lam, V = GAMMA, LAMBDA, lambda f: max(f, 20 - f)
    G1 = -1.0  # terminated: no bootstrap
    G0 = 1 + g * ((1 - lam) * V(1) + lam * G1)
    G3 = 1 + g * V(4)  # the run's end (a cut): λ = 0, bootstrap from its next obs
    G2 = 1 + g * ((1 - lam) * V(3) + lam * G3)
    G6 = -1 + g * V(13)
    G5 = 1 + g * ((1 - lam) * V(12) + lam * G6)
    G4 = 0 + g * ((1 - lam) * V(11) + lam * G5)
    found = drawn_returns(pond, LAMBDA)
    assert sorted(found) == list(range(7))  # every transition drawn (200 draws of 7)
    assert [found[i] for i in range(7)] == pytest.approx([G0, G1, G2, G3, G4, G5, G6])


def test_q_lambda_at_lambda_zero_gives_one_step_targets(tmp_path):
    """On a BigPond filled from a Lake of random MinAtar play (game ends, truncations, slice cuts), λ = 0 gives
    r + γ (1 - terminated) V(next obs): the one-step DQN target, with the network's own V."""
    args = pqn_lake.Args(
        env_id="MinAtar/Breakout-v1",
        big_pond_size=1000,
        big_pond_slice_steps=16,
        big_n_step=1,
        big_learner="q-lambda",
        big_lambda_slices=64,
        q_lambda=0.0,
    )
    with make_lake(tmp_path) as lake:
        pond = pqn_lake.fill_big_pond(lake, args, np.random.default_rng(0), torch.device("cpu"))
    assert pond.run_length.sum() == len(pond.obs_start) and (pond.run_length <= 16).all()
    torch.manual_seed(1)
    network = pqn_lake.make_q_network(args, 6, torch.device("cpu"))
    big_agent = pqn_lake.BigAgent(network, None, None)
    index, returns = pqn_lake.big_lambda_draw(big_agent, pond, args)
    with torch.no_grad():
        next_v = network(pond.frames[pond.bootstrap_start[index, None]]).max(1).values
    assert len(index) > 200 and torch.allclose(returns, pond.returns[index] + pond.discounts[index] * next_v, atol=1e-6)


def test_an_agent_learning_from_all_rollouts_bootstraps_another_agents_data_from_its_own_network(monkeypatch):
    """With --agents-share-rollouts agent 0's minibatches hold agent 1's transitions (its drawn order chooses them
    here), their Q(λ) returns from agent 0's network on agent 1's Pond, as many steps as alone."""
    args = pqn_lake.Args(
        env_id="MinAtar/Breakout-v1",
        num_agents=2,
        num_envs=4,
        num_steps=8,
        num_minibatches=2,
        update_epochs=1,
        pond_steps=8,
        gamma=GAMMA,
        q_lambda=LAMBDA,
        agents_share_rollouts=True,
    )
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    agents = [pqn_lake.make_agent(args, f"agent{k}", cpu) for k in range(2)]
    for k, agent in enumerate(agents):
        pqn_lake.reset_envs(agent, k, cpu, debug=False)
    drawn = pqn_lake.draw_randoms(agents, args, cpu)
    assert all(len(order) == 2 * 32 for _, orders in drawn for order in orders)  # drawn over both rollouts
    for agent, (steps, _) in zip(agents, drawn):
        pqn_lake.agent_update(agent, (steps, None), args, cpu)
    seen = []
    monkeypatch.setattr(
        pqn_lake,
        "gradient_step",
        lambda learner, loss, batch, *rest: seen.append(batch) or (torch.zeros(()), torch.zeros(())),
    )
    theirs = 32 + torch.arange(32)  # agent 1's transitions, in order
    pqn_lake.pqn_update(agents[0], args, cpu, [theirs], sources=agents)
    net, pond, other = agents[0].q_network, agents[1].pond, agents[1]
    with torch.no_grad():
        values = net(pond.obs[:8].flatten(0, 1)).max(1).values.view(8, 4)
        next_values = torch.cat([values[1:], net(other.obs).max(1).values[None]])
    lambdas = LAMBDA * (1 - torch.from_numpy(other.rollout_game_over).float())
    lambdas[-1] = 0
    expected = pqn_lake.q_lambda_returns(
        torch.from_numpy(np.sign(pond.rewards[:8])).float(),
        torch.from_numpy(pond.terminated[:8]).float(),
        next_values,
        lambdas,
        GAMMA,
    )
    assert len(seen) == 2  # num_minibatches x update_epochs, as alone
    obs, actions, returns, mask = (torch.cat(x) for x in zip(*seen))
    assert torch.equal(obs, pond.obs[:8].flatten(0, 1)) and torch.equal(actions, pond.actions[:8].flatten())
    assert torch.allclose(returns, expected.flatten())
    assert torch.equal(mask, 1 - torch.from_numpy(other.rollout_autoreset).float().flatten())
    for agent in agents:
        agent.envs.close()


TINY = [*TINY_MINATAR, "--big-lambda-slices", "8"]


def strip(rows: list) -> list:
    return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]


def test_one_agent_learning_from_all_rollouts_is_the_loop_without_it_bit_for_bit(tmp_path):
    flags = [*TINY, "--num-agents", "1", "--big-agent-schedule", "none", "--total-frames", str(8 * 16 * 8)]
    run_together(
        ("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "alone")),
        ("pqn_lake.py", *flags, "--agents-share-rollouts", "--runs-dir", str(tmp_path / "shared")),
    )
    alone, shared = (metrics(only_run_dir(tmp_path / name)) for name in ("alone", "shared"))
    assert len(alone) > 8 and strip(alone) == strip(shared)


def test_q_lambda_big_agent_with_resets_and_shared_rollouts_resumes_bit_exactly(tmp_path):
    """Two agents sharing their rollouts, the BigAgent on Q(λ), shrink-and-perturb at each phase: stopped after
    phase 1 and resumed, the run ends as the uninterrupted one; the default learner and no reset learn otherwise."""
    flags = [
        *TINY,
        "--num-agents",
        "2",
        "--total-frames",
        str(2 * 8 * 16 * 4 * 2),
        "--agents-share-rollouts",
        "--big-learner",
        "q-lambda",
        "--big-agent-reset",
        "shrink-perturb",
    ]
    run_together(
        ("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "whole")),
        ("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "parts"), "--stop-after-phases", "1"),
    )
    parts = only_run_dir(tmp_path / "parts")
    run_together(
        ("pqn_lake.py", "--resume", str(parts)), ("pqn_lake.py", *flags[:-4], "--runs-dir", str(tmp_path / "dqn"))
    )
    whole, dqn = (only_run_dir(tmp_path / name) for name in ("whole", "dqn"))
    assert strip(metrics(whole)) == strip(metrics(parts))
    big = [r["big_agent/eval/return"] for r in metrics(whole) if "big_agent/eval/return" in r]
    assert len(big) == 2
    assert [r for r in strip(metrics(whole)) if "big_agent/losses/td_loss" in r] != [
        r for r in strip(metrics(dqn)) if "big_agent/losses/td_loss" in r
    ]
    a, b = (load(d / "checkpoints" / "phase_0002.pt") for d in (whole, parts))
    for sa, sb in zip(a["agents"] + [a["big_agent"]], b["agents"] + [b["big_agent"]]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])


def test_a_big_agent_reset_makes_new_weights_or_shrinks_toward_them():
    args = pqn_lake.Args(env_id="MinAtar/Breakout-v1")
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    big_agent = pqn_lake.make_big_agent(args, 6, cpu)
    before = [p.detach().clone() for p in big_agent.q_network.parameters()]
    state = torch.get_rng_state()
    fresh = list(pqn_lake.make_q_network(args, 6, "cpu").parameters())
    for reset, keep in (("none", 1.0), ("shrink-perturb", 0.8), ("scratch", 0.0)):
        for p, b in zip(big_agent.q_network.parameters(), before):
            p.data.copy_(b)
        optimizer = big_agent.optimizer
        torch.set_rng_state(state)
        pqn_lake.reset_big_agent(big_agent, pqn_lake.Args(env_id="MinAtar/Breakout-v1", big_agent_reset=reset), 6)
        for p, b, f in zip(big_agent.q_network.parameters(), before, fresh):
            assert torch.allclose(p, keep * b + (1 - keep) * f)
        assert (big_agent.optimizer is optimizer) == (reset == "none")
