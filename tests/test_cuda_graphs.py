"""--cuda-graphs against eager execution on a GPU: the agents' updates (in their threads, on their streams, through a
clone) and the BigAgent's give the same metrics and weights bit for bit (deterministic cuDNN, a nondeterministic op an
error), on MinAtar with two agents and on Atari with four, whose graphs replay at once on four streams with matmuls
large enough for cuBLAS's workspace. Skipped where no GPU is present: the CPU path is always eager."""

import pytest
import torch

import pqn_lake
import speed

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="--cuda-graphs captures CUDA graphs: it needs a CUDA GPU (the CPU path is eager)",
)


def train(graphs: bool, **sizes) -> tuple:
    """The agents: 3 updates, a clone from the BigAgent (a fresh optimizer under the captured graph), 2 more; the
    BigAgent: 20 updates on a BigPond of fixed random frames. Returns (the agents' metrics, every weight, the
    BigAgent's losses)."""
    device = torch.device("cuda")
    sizes = {
        "env_id": "MinAtar/Breakout-v1",
        "num_agents": 2,
        "num_envs": 16,
        "num_steps": 8,
        "num_minibatches": 4,
        **sizes,
    }  # (5 updates: a Pond that never fills, so no Lake is needed)
    args = pqn_lake.Args(**sizes, cuda_graphs=graphs, total_frames=1_000_000)
    num_agents = args.num_agents
    pqn_lake.set_determinism(args, device)
    torch.manual_seed(0)
    agents = [pqn_lake.make_agent(args, f"agent{k}", device) for k in range(num_agents)]
    for k, agent in enumerate(agents):
        pqn_lake.reset_envs(agent, k, device)
    n_actions = agents[0].envs.single_action_space.n
    big_agent = pqn_lake.make_big_agent(args, n_actions, device)

    def update() -> list:  # as the loop makes it: the agents in their threads, on their streams
        drawn = speed.draw_in_serial_order(
            num_agents, args.num_steps, args.num_envs, n_actions, args.update_epochs, device
        )
        return speed.in_agent_threads(pqn_lake.pqn_update, agents, drawn, [args] * num_agents, [device] * num_agents)

    metrics = [update() for _ in range(3)]
    generator = torch.Generator(device).manual_seed(1)
    frames = torch.randint(
        0, 2, (1000, *pqn_lake.frame_shape(args)), device=device, dtype=torch.uint8, generator=generator
    )
    big_pond = pqn_lake.BigPond(
        frames=frames,
        obs_start=torch.arange(900, device=device),
        actions=torch.randint(0, n_actions, (900,), device=device, generator=generator),
        returns=torch.rand(900, device=device, generator=generator),
        discounts=torch.full((900,), 0.99, device=device),
        bootstrap_start=torch.arange(1, 901, device=device),
    )
    big_losses = [[x.item() for x in pqn_lake.big_agent_update(big_agent, big_pond, args)] for _ in range(20)]
    pqn_lake.clone_agents(agents, big_agent, args)
    metrics += [update() for _ in range(2)]
    assert all((agent.graph is not None) == graphs for agent in agents) and (big_agent.graph is not None) == graphs
    weights = [
        p.detach().cpu() for net in [a.q_network for a in agents] + [big_agent.q_network] for p in net.parameters()
    ]
    for agent in agents:
        agent.envs.close()
    return metrics, weights, big_losses


def train_baseline() -> list:
    """dqn_single_baseline.py's update, 20 steps on fixed random batches (a target sync between), without and with its
    graph: [(losses, weights)] of each."""
    import dqn_single_baseline as dqn

    results = []
    for graphs in (False, True):
        device, args = torch.device("cuda"), dqn.Args(env_id="MinAtar/Breakout-v1", cuda_graphs=graphs)
        dqn.set_determinism(args, device)
        torch.manual_seed(0)
        q_network, target_network = (dqn.make_q_network(args, 3, device) for _ in range(2))
        optimizer, graph = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, foreach=True), {}
        generator, B = torch.Generator(device).manual_seed(1), args.batch_size
        shape = (args.stack_size, *dqn.frame_shape(args))
        losses = []
        for i in range(20):
            obs, next_obs = (
                torch.randint(0, 2, (B, *shape), device=device, dtype=torch.uint8, generator=generator)
                for _ in range(2)
            )
            batch = dqn.Batch(
                obs=obs,
                next_obs=next_obs,
                actions=torch.randint(0, 3, (B,), device=device, generator=generator),
                rewards=torch.rand(B, device=device, generator=generator) - 0.5,
                terminated=torch.rand(B, device=device, generator=generator) < 0.1,
                truncated=torch.zeros(B, dtype=torch.bool, device=device),
                where=None,
            )
            losses.append([x.item() for x in dqn.dqn_update(q_network, target_network, optimizer, batch, args, graph)])
            if i == 9:
                target_network.load_state_dict(q_network.state_dict())
        assert ("replay" in graph) == graphs
        results.append((losses, [p.detach().cpu() for p in q_network.parameters()]))
    return results


def test_cuda_graphs_give_what_eager_execution_gives():
    """pqn_lake.py's agents and BigAgent, and the baseline's update: the same losses, metrics and weights."""
    eager, graphed = train(graphs=False), train(graphs=True)
    assert graphed[0] == eager[0] and graphed[2] == eager[2]
    assert all(torch.equal(a, b) for a, b in zip(graphed[1], eager[1]))
    (eager_losses, eager_weights), (graph_losses, graph_weights) = train_baseline()
    assert graph_losses == eager_losses and all(torch.equal(a, b) for a, b in zip(graph_weights, eager_weights))


def test_cuda_graphs_of_four_atari_agents_replaying_at_once_give_what_eager_execution_gives():
    """Four Breakout agents on their streams, minibatches of 128 as at the Atari defaults: each graph's cuBLAS
    workspace its own (captured on one shared stream they would write the same scratch memory at once)."""
    sizes = dict(env_id="Breakout-v5", num_agents=4, num_envs=8, num_steps=32, num_minibatches=2, pond_steps=192)
    eager, graphed = train(graphs=False, **sizes), train(graphs=True, **sizes)
    assert graphed[0] == eager[0] and graphed[2] == eager[2]
    assert all(torch.equal(a, b) for a, b in zip(graphed[1], eager[1]))
