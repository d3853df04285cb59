"""PQN at its references' setting: --anneal-lr (the agents' learning rate linear to 0 over each agent's share of the
run, one step per minibatch step, as purejaxql's LR_LINEAR_DECAY), through a clone and across a resume, and a MinAtar
game cut at its step limit (gymnax's port of the games cuts them) counted as a truncation."""

import numpy as np
import pytest
import torch

import pqn_lake
import speed
from script_runs import TINY_MINATAR, load, metrics, only_run_dir, run, run_together

RADAM_STEP = torch.optim.RAdam.step  # (the tests below record the rate of each step)
TINY = TINY_MINATAR


def agents_and_rates(args: pqn_lake.Args, num_agents: int):
    """Agents as the script makes them, their envs reset, and the learning rate of every optimizer step they take."""
    torch.manual_seed(0)
    agents = [pqn_lake.make_agent(args, f"agent{k}", torch.device("cpu")) for k in range(num_agents)]
    for k, agent in enumerate(agents):
        pqn_lake.reset_envs(agent, k, torch.device("cpu"))
    rates = {agent.name: [] for agent in agents}

    def step(optimizer, *a, **kw):  # every agent's RAdam, the fresh ones a clone makes included
        name = next(agent.name for agent in agents if agent.optimizer is optimizer)
        rates[name].append(optimizer.param_groups[0]["lr"])
        return RADAM_STEP(optimizer, *a, **kw)

    return agents, rates, step


def update(agents: list, args: pqn_lake.Args) -> None:
    cpu, n_actions = torch.device("cpu"), agents[0].envs.single_action_space.n
    drawn = speed.draw_in_serial_order(len(agents), args.num_steps, args.num_envs, n_actions, args.update_epochs, cpu)
    for agent, its_draws in zip(agents, drawn):
        pqn_lake.pqn_update(agent, its_draws, args, cpu)


def test_annealed_rate_at_the_start_middle_and_end_of_an_agents_share_and_through_a_clone(monkeypatch):
    """Two agents whose share is 4 updates each (2 epochs x 4 minibatches: 32 steps): the rate of step k of the share
    is lr (1 - k / 32), lr at the start, lr / 2 at the middle, lr / 32 at the last step; a clone (a fresh RAdam) keeps
    the agent's place in the schedule, its ε restarting; without --anneal-lr the rate stays."""
    steps, updates = 2 * 4, 4
    for anneal in (True, False):
        args = pqn_lake.Args(
            env_id="MinAtar/Breakout-v1",
            num_agents=2,
            num_envs=4,
            num_steps=8,
            num_minibatches=4,
            update_epochs=2,
            anneal_lr=anneal,
            total_frames=2 * updates * 4 * 8,
        )
        agents, rates, step = agents_and_rates(args, 2)
        monkeypatch.setattr(torch.optim.RAdam, "step", step)
        update(agents, args)
        update(agents, args)
        big_agent = pqn_lake.make_big_agent(args, agents[0].envs.single_action_space.n, torch.device("cpu"))
        pqn_lake.clone_agents(agents, big_agent, args)
        assert all(agent.optimizer.param_groups[0]["lr"] == args.learning_rate for agent in agents)  # a fresh RAdam
        assert pqn_lake.epsilon(agents[0].epsilon_schedule, agents[0].frames) == args.agent_epsilon_reset
        update(agents, args)
        update(agents, args)
        lr = args.learning_rate
        for name, seen in rates.items():
            assert len(seen) == updates * steps, name
            if anneal:
                assert seen == pytest.approx([lr * (1 - k / (updates * steps)) for k in range(updates * steps)])
                assert (
                    seen[0] == lr
                    and seen[len(seen) // 2] == pytest.approx(lr / 2)
                    and seen[-1] == pytest.approx(lr / 32)
                )
            else:
                assert seen == [lr] * (updates * steps)
    assert pqn_lake.annealed_lr(args, args.total_frames / 2) == 0 == pqn_lake.annealed_lr(args, args.total_frames)


def test_annealed_mixture_resumes_bit_exactly_and_differs_from_the_constant_rate(tmp_path):
    """A mixture with --anneal-lr stopped after phase 1 and resumed ends identical to the uninterrupted run (the rate
    follows the agents' frames, in the checkpoint); the same run at a constant rate learns otherwise."""
    flags = [*TINY, "--num-agents", "2", "--total-frames", str(2 * 8 * 16 * 4 * 2), "--anneal-lr"]
    run_together(
        ("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "whole")),
        ("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "parts"), "--stop-after-phases", "1"),
    )
    parts = only_run_dir(tmp_path / "parts")
    run("pqn_lake.py", "--resume", str(parts))
    run("pqn_lake.py", *flags[:-1], "--no-anneal-lr", "--runs-dir", str(tmp_path / "constant"))

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]

    whole, constant = (only_run_dir(tmp_path / name) for name in ("whole", "constant"))
    assert strip(metrics(whole)) == strip(metrics(parts))
    assert strip(metrics(whole)) != strip(metrics(constant))
    a, b = (load(d / "checkpoints" / "phase_0002.pt") for d in (whole, parts))
    for sa, sb in zip(a["agents"] + [a["big_agent"]], b["agents"] + [b["big_agent"]]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])


def test_a_minatar_game_cut_at_its_step_limit_is_a_truncation():
    """--max-episode-frames 12 on Freeway (which never ends by itself within 2,500 steps): every game is cut after
    12 steps, as a truncation (bootstrapped), never a termination; the next step is the autoreset step, and the games
    count 12 steps each."""
    args = pqn_lake.Args(
        env_id="MinAtar/Freeway-v1",
        num_agents=1,
        num_envs=3,
        num_steps=40,
        pond_steps=40,
        max_episode_frames=12,
        repeat_action_probability=0.0,
    )
    agents, *_ = agents_and_rates(args, 1)
    update(agents, args)  # (a rollout, then its update)
    pond, agent = agents[0].pond, agents[0]
    cut = np.zeros((40, 3), bool)
    cut[[11, 24, 37]] = True  # 12 steps a game, then the autoreset step
    assert np.array_equal(pond.truncated, cut) and not pond.terminated.any()
    assert np.array_equal(agent.rollout_autoreset[[12, 25, 38]], np.ones((3, 3), bool))
    assert [length for _, length in agent.finished] == [12] * 9
