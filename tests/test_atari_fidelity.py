"""Atari fidelity on real ALE games: FIRE after a lost life in both scripts.

Breakout waits for FIRE after a lost life; ale-py presses it only at a game's reset. The step after a life
loss plays FIRE whatever the policy sent; that forced step is, like the autoreset step, no learning
transition (not in the PQN loss, the Lake or the replay memory), while the game and its frame stack go on.
"""

import numpy as np
import pytest
import torch

import dqn_single_baseline as dqn
import pqn_lake
import speed
from dump_transitions import Recorder
from lake import Lake
from script_runs import only_run_dir, run

NOOP = 0


def play_noops(script, num_envs: int = 2, steps: int = 400):
    """NOOP-only play through `script.make_envs` (what training and evaluation use); per step: lives,
    terminated, truncated, info["forced"]."""
    args = script.Args(env_id="Breakout-v5")
    envs = script.make_envs(args, num_envs)
    envs.reset(seed=3)
    out = {k: [] for k in ("lives", "terminated", "truncated", "forced")}
    for _ in range(steps):
        _, _, terminated, truncated, info = envs.step(np.full(num_envs, NOOP, np.int64))
        for k, v in (
            ("lives", info["lives"]),
            ("terminated", terminated),
            ("truncated", truncated),
            ("forced", info.get("forced", np.zeros(num_envs, bool))),
        ):
            out[k].append(np.array(v, copy=True))
    envs.close()
    return {k: np.stack(v) for k, v in out.items()}


@pytest.mark.parametrize("script", [pqn_lake, dqn], ids=["pqn_lake", "dqn_single_baseline"])
def test_noop_play_of_breakout_loses_every_life_and_ends_the_game(script):
    d = play_noops(script)
    game_over = d["truncated"] | (d["terminated"] & (d["lives"] == 0))
    assert not d["truncated"].any()
    for n in range(2):
        first_end = int(np.argmax(game_over[:, n]))
        assert game_over[first_end, n] and first_end < 200, first_end  # five lives lost in under 200 steps
        lost = np.flatnonzero(d["terminated"][: first_end + 1, n])
        assert list(d["lives"][lost, n]) == [4, 3, 2, 1, 0]
        # exactly the step after each of the first four life losses was a forced FIRE
        assert list(np.flatnonzero(d["forced"][: first_end + 1, n])) == list(lost[:4] + 1)


def noop_q_network(agent) -> None:
    """Make the agent's Q-network prefer NOOP everywhere, and its ε 0: a greedy agent that never fires."""
    last = [m for m in agent.q_network.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
        last.bias[NOOP] = 1.0
    agent.epsilon_schedule = {"start": 0.0, "end": 0.0, "decay_frames": 1, "frames_at_reset": 0}


def test_pqn_lake_forced_fire_is_no_transition_in_the_loss_or_the_lake(tmp_path):
    """A greedy NOOP agent plays whole games thanks to the forced FIRE; each forced step is masked out of
    the PQN loss (rollout_autoreset, the mask pqn_update uses), makes the next obs an episode_start, and so
    is no transition in the Lake, whose round trip of the stream (life losses, forced FIRE steps, a game
    over and its autoreset) is bit-exact."""
    T, N = 160, 2
    args = pqn_lake.Args(env_id="Breakout-v5", num_envs=N, num_steps=T, pond_steps=T)
    device = torch.device("cpu")
    agent = pqn_lake.make_agent(args, "agent0", device)
    noop_q_network(agent)
    agent.envs = Recorder(agent.envs)
    pqn_lake.reset_envs(agent, seed=5, device=device)
    ((steps, _),) = speed.draw_in_serial_order(1, T, N, agent.envs.single_action_space.n, 1, device)
    for t in range(T):  # its rollout
        pqn_lake.act(agent, t, steps[t])
        pqn_lake.receive(agent, args, device, t)
    d = agent.envs.recorded()
    agent.envs.close()

    game_over = d["truncated"] | (d["terminated"] & (d["lives"] == 0))
    life_loss = d["terminated"] & ~game_over
    forced, autoreset = np.zeros((T, N), bool), np.zeros((T, N), bool)
    forced[1:], autoreset[1:] = life_loss[:-1], game_over[:-1]
    assert (forced.sum(0) >= 4).all() and (autoreset.sum(0) == 1).all()  # a whole game per env, its reset, more
    # the loss: mask = 1 - rollout_autoreset, so forced and autoreset steps carry no loss, all others do
    assert np.array_equal(agent.rollout_autoreset, forced | autoreset)
    assert np.array_equal(agent.rollout_game_over, game_over)
    # the obs after a forced step starts afresh (a boundary in the Lake); the frame stack runs on
    assert np.array_equal(d["episode_start"][1:], forced[:-1] | autoreset[:-1])
    for t, n in zip(*np.nonzero(forced[:-1])):
        assert np.array_equal(d["obs"][t + 1, n, :-1], d["obs"][t, n, 1:])

    lake = Lake(tmp_path / "lake", frame_shape=(84, 84), stack_size=4, env_id="Breakout-v5")
    pqn_lake.drain_pond(agent.pond, lake, "agent0")
    lake.commit(wait=True)
    for n in range(N):
        steps = [t for t in range(T - 1) if not d["episode_start"][t + 1, n]]
        stream = lake.read_stream("agent0", n)
        assert list(stream.where[:, 2]) == steps  # neither forced nor autoreset steps are transitions
        assert np.array_equal(stream.obs, d["obs"][steps, n])
        assert np.array_equal(stream.next_obs, d["obs"][[t + 1 for t in steps], n])
        for key in ("actions", "rewards", "terminated", "truncated"):
            assert np.array_equal(np.asarray(getattr(stream, key)), d[key][steps, n]), key
        assert stream.terminated.sum() >= 5  # the life losses and the game over are terminal transitions
    lake.close()


def test_dqn_single_baseline_forced_fire_is_no_transition(tmp_path):
    """A tiny Breakout run of the baseline, its replay memory read back from the checkpoint's snapshot: every life
    loss (and the game over) is a transition, and the step after it (the forced FIRE, or the autoreset) is none."""
    runs = tmp_path / "runs"
    run(
        "dqn_single_baseline.py",
        *("--env-id", "Breakout-v5", "--num-envs", "2", "--total-frames", "2400", "--learning-starts", "100000"),
        *("--eval-every-frames", "2400", "--eval-episodes", "1", "--max-episode-frames", "1600"),
        *("--buffer-size", "1000", "--runs-dir", str(runs)),
    )
    (snapshot,) = (only_run_dir(runs) / "checkpoints").glob("replay_*")
    state = torch.load(snapshot / "state.pt", weights_only=False)
    steps = state["steps"]  # 301 a ring of 500: all held, step k at k
    valid, terminated = state["valid"][:, : steps - 2], state["terminated"][:, : steps - 2]
    assert valid[terminated].all() and not valid[:, 1:][terminated[:, :-1]].any()
    assert valid.mean() > 0.9 and terminated.sum() >= 4
