"""The speed machinery the scripts share: the agents' work in threads of their own, each on a CUDA stream of its own
(in_agent_threads), on random numbers drawn before in a serial loop's order (draw_in_serial_order); a learner's
gradient step (gradient_step), eager or a CUDA graph captured once and replayed every step (graphed), the lock that
keeps a capture apart from other threads' replays, and the guard that the optimizer steps the gradients a graph writes.

Rules for an agent's work run in threads (in_agent_threads), so that it learns bit for bit what a serial loop learns:
- randomness drawn before, in the serial loop's order (draw_in_serial_order), never inside the threads: torch's
  generator is shared by them, and their interleaving changes from run to run;
- an agent touches its own state only (its networks, envs, Pond); what all agents share (the Lake) is written after.

Rules for a loss replayed as a graph (--cuda-graphs, on CUDA):
- fixed shapes: every input has the shape of the first batch's (the graph's inputs are copied into, not rebound);
- no host sync inside it (no .item(), no Python branch on a tensor's value, no CPU tensor);
- randomness from outside it: draw random numbers before the step and pass them in as inputs;
- after capture the gradients are tensors the graph owns: never set them to None (zero_grad(set_to_none=True)),
  rebuild the network or load_state_dict(assign=True) into it; a replay checks this (GraphGradientsError).
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch
import torch.nn as nn

from lifecycle import RunError

AGENT_THREADS: dict = {}  # a pool of threads per number of agents, kept from update to update (their OpenMP too)


def in_agent_threads(work: Callable, agents: list, *per_agent: list) -> list:
    """[work(agent, *its items of per_agent) for each agent], each agent in a thread of its own (one agent: in this
    thread) while the others' envs step (releasing the GIL). On CUDA (agent.stream set) its kernels go to its own
    stream, after the default stream's work (draws, a clone), and the default stream then waits for every agent's
    stream: what follows on it (drains, a clone's weight writes, evaluation, the next draws into freed blocks) runs
    after the agents' kernels, whatever they synchronised."""
    if len(agents) > 1 and len(agents) not in AGENT_THREADS:
        AGENT_THREADS[len(agents)] = ThreadPoolExecutor(len(agents), "agent")
    spread = AGENT_THREADS[len(agents)].map if len(agents) > 1 else map  # (one agent: nothing to overlap)
    results = list(spread(lambda agent, *items: on_stream(agent, work, *items), agents, *per_agent))
    join_streams(agents)
    return results


def on_stream(agent, work: Callable, *items):
    """work(agent, *items) on the agent's CUDA stream (agent.stream; None: the current one), after the default
    stream's work."""
    if agent.stream is None:
        return work(agent, *items)
    agent.stream.wait_stream(torch.cuda.default_stream(agent.stream.device))
    with torch.cuda.stream(agent.stream):
        return work(agent, *items)


def join_streams(agents: list) -> None:
    """The default stream waits for every agent's stream."""
    for agent in agents:
        if agent.stream is not None:
            torch.cuda.default_stream(agent.stream.device).wait_stream(agent.stream)


# One capture or replay at a time across threads: before torch 2.13 a capture marks the CUDA generator's state (shared
# by all threads) as capturing, and a replay in another thread meanwhile raises. A replay only enqueues: held briefly.
GRAPHS = threading.Lock()


class GraphGradientsError(RunError):
    """The optimizer would step other tensors than the gradients a CUDA graph writes: learning would stop silently."""


def graphed(loss: Callable, network: nn.Module, batch: list) -> Callable:
    """loss(*inputs) captured as one CUDA graph on inputs shaped as `batch` (warm-up runs first, on the capture's
    stream, as torch's recipe); returns replay(*batch, network=...), which copies a batch into the inputs and replays
    the graph, after checking that `network` is the one captured and its gradients the graph's own tensors. These
    are written (not accumulated) by each replay: what an eager zero_grad + backward give."""
    inputs = [x.clone() for x in batch]
    # A stream of the graph's own (torch's pool has 32: fewer graphs than that never share one). cuBLAS keys its
    # workspace by (handle, stream), and backward runs on autograd's one thread (one handle): graphs captured on one
    # shared stream would bake in one workspace and, replayed at once on the agents' streams, write the same scratch.
    capture = torch.cuda.Stream(inputs[0].device)
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):
        for _ in range(3):
            loss(*inputs)
    torch.cuda.current_stream().wait_stream(capture)
    network.zero_grad(set_to_none=True)  # the capture allocates them
    graph = torch.cuda.CUDAGraph()
    with GRAPHS, torch.cuda.graph(graph, stream=capture, capture_error_mode="thread_local"):  # (other threads go on)
        outputs = loss(*inputs)
    parameters = list(network.parameters())
    gradients = [p.grad for p in parameters]

    def replay(*values, network: nn.Module = network) -> tuple:
        now = list(network.parameters())
        if len(now) != len(parameters) or any(
            p is not q or p.grad is not g for p, q, g in zip(now, parameters, gradients)
        ):
            raise GraphGradientsError(
                "a CUDA graph's network or its gradients were replaced after capture (zero_grad(set_to_none=True), a "
                "rebuilt network, load_state_dict(assign=True)): the optimizer would step stale gradients; zero them "
                "with set_to_none=False, copy weights in place, or capture again"
            )
        for static, value in zip(inputs, values):
            static.copy_(value)
        with GRAPHS:
            graph.replay()
        return outputs

    return replay


def draw_in_serial_order(num_agents: int, steps: int, num_envs: int, n_actions: int, epochs: int, device) -> list:
    """Per agent, its next update's random numbers in a serial loop's order: step after step, agent after agent, the
    ε-greedy draws (random actions, uniforms); then agent after agent, each epoch's minibatch order. Returns per agent
    (its steps' draws, its epochs' orders)."""
    T, N, A = steps, num_envs, n_actions
    per_step = [
        [(torch.randint(A, (N,), device=device), torch.rand(N, device=device)) for _ in range(num_agents)]
        for _ in range(T)
    ]
    orders = [[torch.randperm(T * N, device=device) for _ in range(epochs)] for _ in range(num_agents)]
    return [([step[k] for step in per_step], orders[k]) for k in range(num_agents)]


def gradient_step(learner, loss: Callable, batch: list, max_grad_norm, graph: bool) -> tuple:
    """One gradient step of a learner (.q_network, .optimizer, .graph): loss(*batch) gives the loss and the Q-values
    of the actions; backward, clip to `max_grad_norm` (None: no clipping), the optimizer's step. With `graph` the
    forward, backward and clip replay a CUDA graph captured at the learner's first step. Returns the loss and the mean
    Q, on the device (no host sync)."""

    def forward_backward(*inputs) -> tuple:
        value, q_taken = loss(*inputs)
        value.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(learner.q_network.parameters(), max_grad_norm)
        return value.detach(), q_taken.detach().mean()

    if graph:
        learner.graph = learner.graph or graphed(forward_backward, learner.q_network, batch)
        values = learner.graph(*batch, network=learner.q_network)
    else:
        learner.optimizer.zero_grad()
        values = forward_backward(*batch)
    learner.optimizer.step()
    return values
