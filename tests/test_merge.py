"""--merge average / softmax-average: the BigAgent := the agents' weights averaged at each phase end (no BigPond, no
BigAgent update), the agents starting from one initialisation; then the clone as with the BigAgent."""

import copy
import signal
import sys

import numpy as np
import pytest
import torch
import tyro

import pqn_lake
from script_runs import TINY_MINATAR, load, metrics, only_run_dir, run, run_together

FLAGS = [*TINY_MINATAR, "--num-agents", "3", "--total-frames", str(3 * 8 * 16 * 4 * 3)]  # 3 phases of 3 agents


def networks(count: int, seed: int, n_actions: int = 6) -> list:
    torch.manual_seed(seed)
    return [pqn_lake.MinAtarQNetwork(n_actions, 4, 10, 10) for _ in range(count)]


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_merging_one_network_or_identical_ones_gives_exactly_that_network():
    (one,), into = networks(1, 0), networks(1, 1)[0]
    pqn_lake.average_networks([one], pqn_lake.merge_weights([3.0], "softmax-average", 1.0), into)
    assert same(into, one)
    copies = networks(4, 2)
    for other in copies[1:]:
        other.load_state_dict(copies[0].state_dict())
    for merge, returns in (("average", [1.0, 2.0, 3.0, 4.0]), ("softmax-average", [0.3, 7.1, 2.0, 5.5])):
        pqn_lake.average_networks(copies, pqn_lake.merge_weights(returns, merge, 0.5), into)
        assert same(into, copies[0])


def test_average_is_the_weighted_mean_of_the_weights():
    nets, into = networks(3, 3), networks(1, 4)[0]
    weights = pqn_lake.merge_weights([1.0, 1.0, 1.0], "average", 1.0)
    pqn_lake.average_networks(nets, weights, into)
    for name, value in into.state_dict().items():
        mean = torch.stack([n.state_dict()[name] for n in nets]).mean(0)
        torch.testing.assert_close(value, mean, rtol=0, atol=1e-6)


def test_softmax_weights_follow_the_returns_at_a_scale_free_temperature():
    w = pqn_lake.merge_weights([10.0, 0.0, 5.0], "softmax-average", 1.0)
    assert w.sum() == pytest.approx(1) and w[0] > w[2] > w[1]
    assert w[0] / w[1] == pytest.approx(np.e)  # the best weighs e^(1/T) x the worst
    assert np.allclose(w, pqn_lake.merge_weights([1000.0, 0.0, 500.0], "softmax-average", 1.0))  # any score scale
    half = pqn_lake.merge_weights([10.0, 0.0], "softmax-average", 0.5)
    assert half[0] / half[1] == pytest.approx(np.e**2)  # T = 0.5: e^2
    assert np.allclose(pqn_lake.merge_weights([4.0, 4.0], "softmax-average", 1.0), [0.5, 0.5])  # all equal: the mean
    assert np.allclose(pqn_lake.merge_weights([10.0, 0.0, 5.0], "average", 1.0), 1 / 3)


def one_phase(runs, monkeypatch, *flags: str) -> tuple:
    """A tiny MinAtar run of 3 agents stopped after its first phase, made in this process: (its folder, the
    checkpoint written as its BigAgent part began, as it was then: the agents before the merge and their evaluations;
    the phase's: the BigAgent after it; the row logged with the part's metrics). The stop signals' handlers the run
    takes are given back."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    saved, save_checkpoint = {}, pqn_lake.save_checkpoint

    def keep_a_copy(path, state, keep):  # (a finished phase's checkpoint removes the mid-phase ones)
        saved[path.name] = copy.deepcopy(state)
        save_checkpoint(path, state, keep)

    monkeypatch.setattr(pqn_lake, "save_checkpoint", keep_a_copy)
    monkeypatch.setattr(sys, "argv", ["pqn_lake.py"])
    try:
        pqn_lake.main(
            tyro.cli(pqn_lake.Args, args=[*FLAGS, *flags, "--runs-dir", str(runs), "--stop-after-phases", "1"])
        )
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    run_dir = only_run_dir(runs)
    row = next(r for r in metrics(run_dir) if "distill/agreement" in r)
    return run_dir, saved["phase_0001_update_000004.pt"], saved["phase_0001.pt"], row


def minatar_breakout_network(state: dict) -> torch.nn.Module:
    network = networks(1, 0, n_actions=3)[0]
    network.load_state_dict(state)
    return network


@pytest.mark.parametrize("merge", ["average", "softmax-average"])
def test_the_big_agent_of_a_merged_phase_is_its_agents_averaged(tmp_path, monkeypatch, merge):
    """At a phase's end the BigAgent becomes its agents' weights averaged with the weights logged (equal, or by their
    last evaluations), no BigAgent update made; the agents had learned apart."""
    _, before, after, row = one_phase(tmp_path, monkeypatch, "--merge", merge, "--merge-temperature", "0.5")
    weights = np.array([row[f"agent{k}/merge/weight"] for k in range(3)])
    assert np.array_equal(weights, pqn_lake.merge_weights(before["levels"], merge, 0.5))
    agents = [minatar_breakout_network(a["q_network"]) for a in before["agents"]]
    expected = networks(1, 1, n_actions=3)[0]
    pqn_lake.average_networks(agents, weights, expected)
    assert same(minatar_breakout_network(after["big_agent"]["q_network"]), expected)
    assert after["big_agent"]["updates"] == 0
    assert not any(same(agents[0], other) for other in agents[1:])


@pytest.mark.parametrize("merge", ["average", "softmax-average"])
def test_a_merged_run_resumed_after_a_phase_ends_as_the_uninterrupted_run(tmp_path, merge):
    """A run stopped after phase 1 and resumed ends identical to the uninterrupted one: metrics (the merge weights
    among them) and every network; a merge makes no BigAgent update."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    flags = [*FLAGS, "--merge", merge, "--merge-temperature", "0.5"]
    run_together(
        ("pqn_lake.py", *flags, "--runs-dir", str(whole)),
        ("pqn_lake.py", *flags, "--runs-dir", str(parts), "--stop-after-phases", "1"),
    )
    run("pqn_lake.py", "--resume", str(only_run_dir(parts)))
    rows = metrics(only_run_dir(whole))
    merged = [r for r in rows if "agent0/merge/weight" in r]
    uniform = [np.allclose([r[f"agent{k}/merge/weight"] for k in range(3)], 1 / 3) for r in merged]
    assert len(merged) == 3 and (all(uniform) if merge == "average" else not all(uniform))
    assert not any("big_agent/losses/td_loss" in r for r in rows)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]  # noqa: E731
    assert strip(rows) == strip(metrics(only_run_dir(parts)))
    a, b = (load(only_run_dir(r) / "checkpoints" / "phase_0003.pt") for r in (whole, parts))
    assert a["big_agent"]["updates"] == 0
    for sa, sb in zip(a["agents"] + [a["big_agent"]], b["agents"] + [b["big_agent"]]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])


def test_averaged_agents_start_as_one_network(tmp_path):
    """Before any update every agent of an averaged mixture is the same network (the default's agents are not)."""
    for merge in ("average", "big-agent"):
        run("pqn_lake.py", *FLAGS, "--merge", merge, "--runs-dir", str(tmp_path / merge), "--stop-after-updates", "1")
    for merge, identical in (("average", True), ("big-agent", False)):
        # after one update the agents differ by their own update only: their first layer's distance is far smaller
        # than between independently initialised networks
        (path,) = (only_run_dir(tmp_path / merge) / "checkpoints").glob("*.pt")
        states = [a["q_network"] for a in load(path)["agents"]]
        gap = max(float((s["conv.weight"] - states[0]["conv.weight"]).abs().max()) for s in states[1:])
        assert (gap < 0.05) == identical, gap
