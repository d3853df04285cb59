"""The CUDA path's ordering, checked on the CPU with stand-ins for torch.cuda's streams and graphs (the numbers of a
real GPU are tests/test_cuda_graphs.py's): each graph captured on a stream of its own under the lock that its replays
also take, the default stream waiting for every agent's stream after the agents' part, and determinism an error."""

import contextlib

import pytest
import torch

import pqn_lake
import speed

EVENTS: list = []  # what the stand-ins saw, in order


class FakeStream:
    def __init__(self, device=None, name: str = "side"):
        self.name, self.device = name, device

    def wait_stream(self, other) -> None:
        EVENTS.append(("wait", self.name, other.name))


class FakeGraph:
    def replay(self) -> None:
        EVENTS.append(("replay", speed.GRAPHS.locked()))


@contextlib.contextmanager
def fake_capture(graph, stream=None, capture_error_mode="global"):
    EVENTS.append(("capture", stream, capture_error_mode, speed.GRAPHS.locked()))
    yield


def fake_cuda(monkeypatch) -> FakeStream:
    default = FakeStream(name="default")
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: default)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: default)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_capture)
    EVENTS.clear()
    return default


def test_each_graph_is_captured_on_its_own_stream_and_replays_under_the_capture_lock(monkeypatch):
    fake_cuda(monkeypatch)
    network = torch.nn.Linear(3, 2)
    loss = lambda x: (network(x).sum(), network(x))  # noqa: E731
    replays = [speed.graphed(loss, network, [torch.ones(4, 3)]) for _ in range(2)]
    captures = [e for e in EVENTS if e[0] == "capture"]
    assert len(captures) == 2 and captures[0][1] is not captures[1][1]  # two graphs, two capture streams
    assert all(isinstance(c[1], FakeStream) and c[2] == "thread_local" and c[3] for c in captures)
    EVENTS.clear()
    for replay in replays:
        replay(torch.zeros(4, 3))
    assert EVENTS == [("replay", True), ("replay", True)]  # a replay never runs beside another thread's capture
    assert not speed.GRAPHS.locked()


def test_the_default_stream_waits_for_every_agents_stream_after_their_update(monkeypatch):
    fake_cuda(monkeypatch)
    args = pqn_lake.Args(
        env_id="MinAtar/Breakout-v1",
        num_agents=2,
        num_envs=4,
        num_steps=4,
        num_minibatches=2,
        pond_steps=8,
        total_frames=10_000,
    )
    agents = [pqn_lake.make_agent(args, f"agent{k}", torch.device("cpu")) for k in range(2)]
    for k, agent in enumerate(agents):
        agent.stream = FakeStream(name=agent.name)
        pqn_lake.reset_envs(agent, k, torch.device("cpu"))

    def pqn_update(agent, *rest):
        result = pqn_lake.pqn_update(agent, *rest)
        EVENTS.append(("updated", agent.name))
        return result

    cpu = torch.device("cpu")
    drawn = speed.draw_in_serial_order(2, args.num_steps, args.num_envs, 3, args.update_epochs, cpu)
    speed.in_agent_threads(pqn_update, agents, drawn, [args] * 2, [cpu] * 2)  # as the loop calls it
    # each agent's stream first waits for the default stream (the draws), then the default stream for each agent's
    assert sorted(e for e in EVENTS if e[0] == "wait" and e[2] == "default") == [
        ("wait", "agent0", "default"),
        ("wait", "agent1", "default"),
    ]
    joins = [i for i, e in enumerate(EVENTS) if e[0] == "wait" and e[1] == "default"]
    assert [EVENTS[i][2] for i in joins] == ["agent0", "agent1"]
    assert max(i for i, e in enumerate(EVENTS) if e[0] == "updated") < min(joins)
    for agent in agents:
        agent.envs.close()


def test_determinism_on_cuda_is_an_error_not_a_warning_and_the_autotuner_is_off_with_graphs(monkeypatch):
    seen = []
    monkeypatch.setattr(
        torch, "use_deterministic_algorithms", lambda mode, warn_only=False: seen.append((mode, warn_only))
    )
    cuda = torch.device("cuda")
    for deterministic, graphs, benchmark in ((True, False, False), (False, False, True), (False, True, False)):
        pqn_lake.set_determinism(pqn_lake.Args(torch_deterministic=deterministic, cuda_graphs=graphs), cuda)
        assert torch.backends.cudnn.benchmark is benchmark
        assert torch.backends.cudnn.deterministic is deterministic
    assert seen == [(True, False), (False, False), (False, False)]
    pqn_lake.set_determinism(pqn_lake.Args(), torch.device("cpu"))  # the CPU's kernels: nothing to switch
    assert len(seen) == 3
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, False


def test_a_graphs_gradients_set_to_none_after_capture_is_a_one_line_error(monkeypatch, capsys):
    """After capture the optimizer must step the gradients the graph writes: a zero_grad(set_to_none=True), a rebuilt
    network or load_state_dict(assign=True) would stop learning silently; the next replay raises instead, and the
    scripts' excepthook states it in one line."""
    import lifecycle

    fake_cuda(monkeypatch)
    network = torch.nn.Linear(3, 2)

    def loss(x):  # a gradient step's forward and backward, as the scripts capture it
        value = network(x).sum()
        value.backward()
        return value.detach(), network(x).detach()

    replay = speed.graphed(loss, network, [torch.ones(4, 3)])
    replay(torch.zeros(4, 3), network=network)  # intact: replays
    network.zero_grad(set_to_none=False)  # keeps the graph's tensors, zeroed (torch's default sets them to None)
    replay(torch.zeros(4, 3), network=network)
    for breaks in (
        lambda: network.zero_grad(set_to_none=True),
        lambda: network.load_state_dict(torch.nn.Linear(3, 2).state_dict(), assign=True),
    ):
        replay = speed.graphed(loss, network, [torch.ones(4, 3)])
        breaks()
        with pytest.raises(speed.GraphGradientsError) as error:
            replay(torch.zeros(4, 3), network=network)
    with pytest.raises(speed.GraphGradientsError):  # a rebuilt network
        speed.graphed(loss, network, [torch.ones(4, 3)])(torch.zeros(4, 3), network=torch.nn.Linear(3, 2))
    lifecycle.one_line_errors(error.type, error.value, error.tb)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "zero_grad(set_to_none=True)" in lines[0], lines
