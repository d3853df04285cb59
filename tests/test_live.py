"""Live transfer (pqn_lake_live.py, the seed's second design): the BigAgent's update count follows the replay ratio,
every new transition reaches its BigPond in the update it was made, no agent is touched without clones, and a live
run resumes bit-exactly (tests/test_same_results.py: it logs what pqn_lake.py --big-agent-schedule live did)."""

from collections import Counter

import numpy as np
import pytest
import torch

import speed
from dump_transitions import Recorder
import pqn_lake_live
from lake import Lake
from script_runs import TINY_MINATAR, load, metrics, only_run_dir, run, run_any, run_together

TINY = [*TINY_MINATAR, "--num-agents", "2"]


def strip(rows):
    return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]


def test_live_updates_follow_the_replay_ratio_and_without_clones_the_agents_are_untouched(tmp_path):
    """--clone-every-updates 0: after each agent update the BigAgent has made floor(ratio x transitions / batch)
    updates, and the agents play and learn exactly as in the single-PQN arm of the same seed (the BigAgent draws from
    its own generator and never writes into them), so no agent is ever overwritten."""
    frames = ["--total-frames", str(2 * 8 * 16 * 4 * 3)]
    run_together(
        (
            "pqn_lake_live.py",
            *TINY,
            *frames,
            "--clone-every-updates",
            "0",
            "--big-replay-ratio",
            "0.7",
            "--runs-dir",
            str(tmp_path / "live"),
        ),
        ("pqn_lake.py", *TINY, *frames, "--big-agent-schedule", "none", "--runs-dir", str(tmp_path / "single")),
    )
    live, single = (metrics(only_run_dir(tmp_path / name)) for name in ("live", "single"))
    counts = [(r["global_frames"], r["big_agent/charts/updates"]) for r in live if "big_agent/charts/updates" in r]
    assert len(counts) == 12 and all(n == int(0.7 * f // 32) for f, n in counts), counts
    assert not any("distill/big_minus_agents" in r or "recovery/frames" in r for r in live)
    assert sum("big_agent/eval/return" in r for r in live) == 6  # every --eval-every-updates, beside the agents

    def agent_keys(rows):  # (live logs its BigAgent's agreement with each agent)
        return [{k: v for k, v in r.items() if k.startswith("agent") and "/distill/" not in k} for r in strip(rows)]

    assert [r for r in agent_keys(live) if r] == [r for r in agent_keys(single) if r]
    a, b = (load(only_run_dir(tmp_path / name) / "checkpoints" / "phase_0003.pt") for name in ("live", "single"))
    for sa, sb in zip(a["agents"], b["agents"]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])
    assert a["big_agent"]["updates"] == counts[-1][1] and b["big_agent"]["updates"] == 0
    # clones only at phase ends; a live run resumes only with pqn_lake_live.py
    proc = run_any("pqn_lake_live.py", *TINY, "--clone-every-updates", "6")
    assert proc.returncode == 2 and "--clone-every-updates 6" in proc.stderr, proc.stderr
    proc = run_any("pqn_lake.py", "--resume", str(only_run_dir(tmp_path / "live")))
    assert proc.returncode == 2 and "pqn_lake_live.py" in proc.stderr, proc.stderr


@pytest.mark.parametrize("n_step", [1, 3])
def test_every_new_transition_reaches_the_big_pond_in_its_update(tmp_path, n_step):
    """Two agents' streams (games truncated every 12 steps, so autoreset steps fall inside rollouts and at their ends),
    their Ponds draining into a Lake and wrapping: after every update the fresh view holds exactly the transitions
    of the phase's rows that the Ponds still hold, the newest rollout's included (its last step's next obs is the
    agent's current obs), with their actions, targets and next observations."""
    args = pqn_lake_live.Args(
        env_id="MinAtar/Breakout-v1",
        num_agents=2,
        num_envs=4,
        num_steps=8,
        pond_steps=16,
        max_episode_frames=12,
        big_n_step=n_step,
    )
    device = torch.device("cpu")
    torch.manual_seed(0)
    agents = [pqn_lake_live.make_agent(args, f"agent{k}", device) for k in range(2)]
    for k, agent in enumerate(agents):
        agent.envs = Recorder(agent.envs)
        pqn_lake_live.reset_envs(agent, 10 * k, device)
    with Lake(tmp_path / "lake", frame_shape=(10, 10, 4), stack_size=1, env_id=args.env_id) as lake:
        for update in range(1, 6):
            for agent, (steps, _) in zip(
                agents, speed.draw_in_serial_order(2, args.num_steps, args.num_envs, 3, args.update_epochs, device)
            ):  # their rollouts
                for t in range(args.num_steps):
                    pqn_lake_live.act(agent, t, steps[t])
                    pqn_lake_live.receive(agent, args, device, t)
            view = pqn_lake_live.fresh_view(agents, update * args.num_steps, args)
            for agent in agents:
                if agent.pond.pos == args.pond_steps:
                    pqn_lake_live.drain_pond(agent.pond, lake, agent.name)
            found = Counter()
            obs, next_obs = (
                pqn_lake_live.fresh_obs(view, view.obs_index),
                pqn_lake_live.fresh_obs(view, view.bootstrap_index),
            )
            agent_of = np.searchsorted(view.offsets, view.obs_index.numpy(), side="right") - 1
            for i in range(len(view.actions)):
                found[
                    (
                        int(agent_of[i]),
                        obs[i].numpy().tobytes(),
                        int(view.actions[i]),
                        float(view.returns[i]),
                        float(view.discounts[i]),
                        next_obs[i].numpy().tobytes(),
                    )
                ] += 1
            expected = Counter()
            for k, agent in enumerate(agents):
                d = agent.envs.recorded()
                steps = len(d["obs"])  # the stream so far; the Ponds hold its last pond_steps rows
                seen = np.concatenate([np.stack(d["obs"]), agent.obs_host[None]])
                starts = np.concatenate([np.stack(d["episode_start"])[1:], agent.episode_start[None]])
                rewards, terminated, truncated = (np.stack(d[key]) for key in ("rewards", "terminated", "truncated"))
                for t in range(max(0, steps - args.pond_steps), steps):
                    for n in np.flatnonzero(~starts[t]):  # a transition: the obs after it is no reset obs
                        # the n-step window (float32, as the learner sums), cut at game ends and the Pond's end
                        ret, scale, m = np.float32(np.sign(rewards[t, n])), np.float32(1), 0
                        while m + 1 < n_step and not (
                            terminated[t + m, n] or truncated[t + m, n] or t + m + 1 == steps or starts[t + m + 1, n]
                        ):
                            m += 1
                            scale *= np.float32(args.gamma)
                            ret += scale * np.float32(np.sign(rewards[t + m, n]))
                        discount = 0.0 if terminated[t + m, n] else float(scale * np.float32(args.gamma))
                        expected[
                            (
                                k,
                                seen[t, n].tobytes(),
                                int(d["actions"][t][n]),
                                float(ret),
                                discount,
                                seen[t + m + 1, n].tobytes(),
                            )
                        ] += 1
            assert sum(expected.values()) > 0.8 * 2 * 4 * min(update * args.num_steps, args.pond_steps)
            assert found == expected, update


def test_live_run_resumed_at_a_phase_end_equals_the_uninterrupted_run(tmp_path):
    """A live run with clones every phase and 3-step targets, stopped after phase 1 and resumed, ends identical to the
    uninterrupted run."""
    flags = [*TINY, "--total-frames", str(2 * 8 * 16 * 4 * 2), "--big-n-step", "3"]
    run_together(
        ("pqn_lake_live.py", *flags, "--runs-dir", str(tmp_path / "whole")),
        ("pqn_lake_live.py", *flags, "--runs-dir", str(tmp_path / "parts"), "--stop-after-phases", "1"),
    )
    parts = only_run_dir(tmp_path / "parts")
    run("pqn_lake_live.py", "--resume", str(parts))
    whole = only_run_dir(tmp_path / "whole")
    assert strip(metrics(whole)) == strip(metrics(parts))
    assert sum("distill/big_minus_agents" in r for r in metrics(whole)) == 2
    a, b = (load(d / "checkpoints" / "phase_0002.pt") for d in (whole, parts))
    for sa, sb in zip(a["agents"] + [a["big_agent"]], b["agents"] + [b["big_agent"]]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])


def test_the_acting_big_agent_spends_the_budget_fills_the_lake_and_resumes_bit_exactly(tmp_path):
    """--big-agent-num-envs 4: after every agent update the BigAgent plays 16 steps of its 4 envs: its frames count in
    --total-frames (global_frames grows by (2 x 8 + 4) x 16 an update), every step it played reaches the Lake as the
    group "big_agent", its ε decays from --big-epsilon-start, and its games are logged. Stopped after phase 1 and
    resumed, the run ends identical to the uninterrupted one, the BigAgent's acting state (frames, ε schedule) and
    generator included; stopped mid-phase (its Pond drained with the agents') it resumes with nothing lost."""
    per_update = (2 * 8 + 4) * 16
    flags = [
        *TINY,
        "--total-frames",
        str(per_update * 4 * 2),
        "--big-agent-num-envs",
        "4",
        "--big-epsilon-start",
        "0.5",
    ]
    run_together(
        ("pqn_lake_live.py", *flags, "--runs-dir", str(tmp_path / "whole")),
        ("pqn_lake_live.py", *flags, "--runs-dir", str(tmp_path / "parts"), "--stop-after-phases", "1"),
        ("pqn_lake_live.py", *flags, "--runs-dir", str(tmp_path / "mid"), "--stop-after-updates", "3"),
    )
    parts, mid = only_run_dir(tmp_path / "parts"), only_run_dir(tmp_path / "mid")
    assert sorted(p.name for p in (mid / "checkpoints").glob("phase_*.pt")) == ["phase_0001_update_000003.pt"]
    outputs = run_together(("pqn_lake_live.py", "--resume", str(parts)), ("pqn_lake_live.py", "--resume", str(mid)))
    assert not any("warning" in out for out in outputs), outputs  # the Lake holds what each checkpoint says
    whole = only_run_dir(tmp_path / "whole")
    rows = metrics(whole)
    frames = [r["global_frames"] for r in rows if "charts/SPS" in r]
    assert frames == [per_update * k for k in range(1, 9)]
    acted = [r["big_agent/charts/frames"] for r in rows if "big_agent/charts/frames" in r]
    assert acted == [4 * 16 * k for k in range(1, 9)]
    epsilons = [r["big_agent/charts/epsilon"] for r in rows if "big_agent/charts/epsilon" in r]
    assert epsilons[0] < 0.5 and epsilons == sorted(epsilons, reverse=True)
    assert any("big_agent/charts/episodic_return" in r for r in rows)
    end = load(whole / "checkpoints" / "phase_0002.pt")
    assert end["big_actor"]["frames"] == 4 * 16 * 8 and end["global_frames"] == per_update * 8
    with Lake(whole / "lake", mode="r") as lake:
        assert lake.num_transitions == end["lake_transitions"]
        group = lake.stats()["groups"]["big_agent"]
        assert group["streams"] == 4 and group["steps"] == 4 * 16 * 8  # every step it played, in its 4 streams
        for n in range(4):
            b = lake.read_stream("big_agent", n)
            assert len(b.actions) > 0 and set(np.unique(b.actions).tolist()) <= {0, 1, 2}
    # resumed at the phase end: the same run, metrics and weights; resumed mid-phase: every step it played is there
    assert strip(metrics(whole)) == strip(metrics(parts))
    with Lake(mid / "lake", mode="r") as lake:
        assert lake.stats()["groups"]["big_agent"]["steps"] == 4 * 16 * 8
    other = load(parts / "checkpoints" / "phase_0002.pt")
    assert other["big_actor"] == end["big_actor"] and other["lake_transitions"] == end["lake_transitions"]
    for sa, sb in zip(end["agents"] + [end["big_agent"]], other["agents"] + [other["big_agent"]]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])
