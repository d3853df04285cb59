"""pqn_lake_live.py: live transfer, the design's second variant: the BigAgent learns while
the agents act, from their Ponds read in place and a BigPond drawn from the Lake, instead of in a phase of its own.

    Lake: a huge replay store on disk (lake.py). Four agents, four Ponds: small ring buffers on the device.
    while global_frames < total_frames:                                          (one phase)
        fill one BigPond uniformly from the Lake (the older data; none in the first phase)
        for each of --agent-updates-per-phase updates:
            1. every agent trains with PQN on its own envs and pours every transition into its Pond
            2. a full Pond drains into the Lake
            3. the BigAgent catches up to --big-replay-ratio x the agents' transitions so far (in samples of
               --big-batch-size): (Double) DQN on the BigPond and the fresh view, every transition of the phase that
               the Ponds still hold, the newest rollout's included
           (the agents and the BigAgent are evaluated every --eval-every-updates updates and at the last one)
        4. clone the agents from the BigAgent if --clone-every-updates says so (0: never: the BigAgent is the product)
        checkpoint
    With --big-agent-num-envs N > 0 the BigAgent also acts (the June 26 notes: "some interactions of the large agent
    also get involved"; the tandem papers' remedy for a passive learner): after every agent update, before step 3,
    it plays --num-steps steps of N envs of its own, ε-greedy on its network (ε from --big-epsilon-start to
    --big-epsilon-end over --agent-epsilon-decay-fraction of its share of the frames, never reset), into a Pond of its
    own that drains into the Lake (group "big_agent") and the fresh view, and its frames count in --total-frames.

A variant of pqn_lake.py in CleanRL's way, a script of its own; it imports pqn_lake.py's pieces (envs, networks,
Ponds, the PQN and DQN updates, evaluation, checkpoints, the run's bookkeeping) rather than copying them, so a fix
there is a fix here, and this file holds what live transfer adds: the fresh view, the catch-up, the acting BigAgent
and its loop. Its flags are pqn_lake.py's (the same defaults), --clone-every-updates and the acting BigAgent's three.
The BigAgent draws its batches and its acting's random numbers from a generator of its own and is evaluated on envs
of its own, so the agents' random stream and games are those of pqn_lake.py's
single-PQN control with the same seed while no clone happens. The outputs are pqn_lake.py's; config.json records
"script": "pqn_lake_live" and the BigAgent's evaluations are the run's eval/return.
"""

import sys
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import tyro

import lifecycle
import pqn_lake
from pqn_lake import (
    BIG_POND_DRAW,
    EVALUATION,
    BigAgent,
    BigPond,
    big_agent_step,
    collapse_metrics,
    derive_seed,
    evaluate,
    fill_big_pond,
    frames_per_step,
    log,
    make_envs,
    n_step_targets,
    usage_error,
)

BIG_AGENT = 1000  # the BigAgent's "agent index" in derived seeds (its batches, its evaluation games)


@dataclass
class Args(pqn_lake.Args):
    clone_every_updates: Optional[int] = None
    """clone the agents from the BigAgent every this many agent updates, at a phase's end: a multiple of
    --agent-updates-per-phase (default: every phase), or 0: never (the BigAgent, trained from scratch on everyone's
    data, is the product); the run's end clones too"""
    big_agent_num_envs: int = 0
    """envs the BigAgent acts on, --num-steps steps each after every agent update (128 beside 4 x 128 agents' envs:
    a fifth of the frames); 0: it never acts, it only learns from the agents' transitions"""
    big_epsilon_start: float = 1.0
    """the acting BigAgent's initial ε"""
    big_epsilon_end: Optional[float] = None
    """the acting BigAgent's final ε, reached after --agent-epsilon-decay-fraction of its share of the frames (default:
    the agents' --agent-epsilon-end)"""
    big_agent_schedule: tyro.conf.Suppress[str] = "live"  # config.json's name of this design, for compare.py


def check_args(args: Args) -> None:
    pqn_lake.check_args(args)
    if args.big_agent_schedule != "live":
        usage_error(f"--resume: a run of pqn_lake.py (--big-agent-schedule {args.big_agent_schedule}); resume it there")
    if args.merge != "big-agent":  # the phase loop's merge only
        usage_error(f"--merge {args.merge}: pqn_lake.py's; the live BigAgent learns with --big-n-step DQN")
    every = args.clone_every_updates
    if every is not None and (every < 0 or every % args.agent_updates_per_phase):
        usage_error(
            f"--clone-every-updates {every}: 0 (never) or a multiple of --agent-updates-per-phase "
            f"({args.agent_updates_per_phase}), as clones happen at phase ends"
        )
    for name in ("big_epsilon_start", "big_epsilon_end"):
        if getattr(args, name) is not None and not 0 <= getattr(args, name) <= 1:
            usage_error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be in [0, 1]")
    if args.big_agent_num_envs < 0:
        usage_error(f"--big-agent-num-envs {args.big_agent_num_envs}: must be >= 0 (0: the BigAgent never acts)")
    if args.big_replay_ratio == 0:
        usage_error(
            "--big-replay-ratio 0: the BigAgent trains after every agent update on ratio x its new "
            "transitions, so it needs a ratio > 0"
        )


# ====================================================================== the fresh view: the Ponds read in place
@dataclass
class FreshView:
    """The agents' transitions of this phase that are still in their Ponds, read in place (no frame is copied: the
    Pond is the BigPond's fresh part). Transition i is agent k's Pond row at time j of env n, under a virtual index
    v = offset_k + n (L_k + 1) + j (L_k: the Pond rows written this phase, at most --pond-steps, in time order; j = L_k
    is the agent's current obs, the next obs of its newest row), so that n_step_targets chains consecutive steps as it
    does the Lake's slices."""

    agents: list  # the agents whose Ponds are read
    offsets: list  # offset_k of each agent's virtual indices
    rows: list  # (L_k + 1,) int64 device tensors: the Pond row of each time j (the last, j = L_k, unused)
    obs_index: torch.Tensor  # (M,) int64: v of each transition's obs
    actions: torch.Tensor  # (M,) int64
    returns: torch.Tensor  # (M,) float32
    discounts: torch.Tensor  # (M,) float32
    bootstrap_index: torch.Tensor  # (M,) int64: v of the obs it bootstraps from


def fresh_view(agents: list, rows_written: int, args: Args) -> FreshView:
    """Every transition that the agents made this phase and their Ponds still hold: rows_written rows of each Pond at
    most (the Pond is a ring: after a drain its rows stay until overwritten), the newest ending at pos - 1. A row is a
    transition unless the obs after it is a reset obs (an autoreset step, or a FIRE forced after a life loss)."""
    device = agents[0].pond.actions.device
    offsets, rows_list, parts, offset = [], [], [], 0
    for agent in agents:
        pond = agent.pond
        P, N = pond.actions.shape
        L = min(rows_written, P)
        rows = (pond.pos - L + np.arange(L)) % P  # time order
        next_start = np.concatenate([pond.episode_start[rows[1:]], agent.episode_start[None]])  # (L, N)
        n, j = np.nonzero(~next_start.T)  # env-major: each env's steps in time order, as a stream slice
        v = offset + n * (L + 1) + j
        returns, discounts, bootstrap = n_step_targets(
            v,
            pond.rewards[rows[j], n],
            pond.terminated[rows[j], n],
            pond.truncated[rows[j], n],
            args.big_n_step,
            args.gamma,
        )
        rows_t = torch.from_numpy(np.append(rows, 0)).to(device)
        actions = pond.actions[rows_t[torch.from_numpy(j).to(device)], torch.from_numpy(n).to(device)]
        parts.append((v, actions, returns, discounts, bootstrap))
        offsets.append(offset)
        rows_list.append(rows_t)
        offset += N * (L + 1)
    host = lambda i, dtype: torch.from_numpy(np.concatenate([p[i] for p in parts]).astype(dtype)).to(device)  # noqa
    return FreshView(
        agents=agents,
        offsets=offsets,
        rows=rows_list,
        obs_index=host(0, np.int64),
        actions=torch.cat([p[1] for p in parts]),
        returns=host(2, np.float32),
        discounts=host(3, np.float32),
        bootstrap_index=host(4, np.int64),
    )


def fresh_obs(view: FreshView, index: torch.Tensor) -> torch.Tensor:
    """The observations (B, stack, *frame) at virtual indices: Pond rows, or an agent's current obs (j = L_k)."""
    out = None
    for agent, offset, rows in zip(view.agents, view.offsets, view.rows):
        L, N = len(rows) - 1, agent.pond.actions.shape[1]
        mine = (index >= offset) & (index < offset + N * (L + 1))
        n, j = (index - offset).clamp(0, N * (L + 1) - 1).div(L + 1, rounding_mode="floor"), (index - offset) % (L + 1)
        obs = torch.where((j == L).view(-1, *[1] * (agent.obs.dim() - 1)), agent.obs[n], agent.pond.obs[rows[j], n])
        out = obs if out is None else torch.where(mine.view(-1, *[1] * (obs.dim() - 1)), obs, out)
    return out


def live_big_agent_update(
    big_agent: BigAgent, big_pond: Optional[BigPond], view: FreshView, args: Args, generator: torch.Generator
) -> tuple:
    """One gradient step on --big-batch-size transitions drawn uniformly from the BigPond (the Lake's draw) and the
    fresh view together, with the BigAgent's own generator (the agents' random stream stays theirs)."""
    device = view.actions.device
    lake_size = 0 if big_pond is None else len(big_pond.obs_start)
    idx = torch.randint(lake_size + len(view.actions), (args.big_batch_size,), device=device, generator=generator)
    parts = []
    if lake_size:
        old = idx[idx < lake_size]
        offsets = torch.arange(args.stack_size, device=device)
        parts.append(
            [
                big_pond.frames[big_pond.obs_start[old, None] + offsets],
                big_pond.actions[old],
                big_pond.returns[old],
                big_pond.discounts[old],
                big_pond.frames[big_pond.bootstrap_start[old, None] + offsets],
            ]
        )
    new = idx[idx >= lake_size] - lake_size
    parts.append(
        [
            fresh_obs(view, view.obs_index[new]),
            view.actions[new],
            view.returns[new],
            view.discounts[new],
            fresh_obs(view, view.bootstrap_index[new]),
        ]
    )
    obs, actions, returns, discounts, next_obs = (torch.cat(p) for p in zip(*parts))
    return big_agent_step(big_agent, obs, actions, returns, discounts, next_obs, args)


def catch_up(run: pqn_lake.Run, big_pond: Optional[BigPond], rows_written: int, generator: torch.Generator) -> dict:
    """Step 3: the BigAgent's updates owed to the agents' transitions so far, --big-replay-ratio samples each."""
    args, big_agent, start = run.args, run.big_agent, time.time()
    view = fresh_view(pqn_lake.actors(run), rows_written, args)
    frames = sum(a.frames for a in pqn_lake.actors(run))
    transitions = frames // frames_per_step(args)
    owed = int(args.big_replay_ratio * frames // frames_per_step(args) // args.big_batch_size)
    stats, updates_before = [torch.zeros((), device=run.device) for _ in range(2)], big_agent.updates
    for _ in range(owed - updates_before):
        for total, x in zip(stats, live_big_agent_update(big_agent, big_pond, view, args, generator)):
            total += x
        if big_agent.updates % args.big_target_network_frequency == 0:
            big_agent.target_network.load_state_dict(big_agent.q_network.state_dict())
    made = max(1, big_agent.updates - updates_before)
    metrics = {
        "big_agent/losses/td_loss": (stats[0] / made).item(),
        "big_agent/losses/q_values": (stats[1] / made).item(),
        "big_agent/charts/updates": big_agent.updates,
        "charts/replay_ratio": big_agent.updates * args.big_batch_size / max(1, transitions),
    }
    if run.device.type == "cuda":  # CUDA runs asynchronously: the BigAgent's kernels, not the agents'
        torch.cuda.synchronize(run.device)
    run.seconds["big_agent"] = run.seconds.get("big_agent", 0.0) + time.time() - start
    return metrics


def make_big_actor(run: pqn_lake.Run, num_envs: int) -> pqn_lake.Agent:
    """The acting BigAgent: an Agent on the BigAgent's network (its optimizer unused: it learns by catch_up), with
    envs, a Pond and an ε schedule of its own."""
    args, device = run.args, run.device
    share = args.total_frames * num_envs / (args.num_agents * args.num_envs + num_envs)  # its frames in the run
    schedule = {
        "start": args.big_epsilon_start,
        "frames_at_reset": 0,
        "end": args.agent_epsilon_end if args.big_epsilon_end is None else args.big_epsilon_end,
        "decay_frames": int(args.agent_epsilon_decay_fraction * share),
    }
    actor = pqn_lake.Agent(
        "big_agent",
        run.big_agent.q_network,
        run.big_agent.optimizer,
        schedule,
        envs=make_envs(args, num_envs),
        pond=pqn_lake.make_pond(args, num_envs, device),
    )
    actor.values = torch.zeros((args.num_steps, num_envs), device=device)
    actor.rollout_game_over, actor.rollout_autoreset = (np.zeros((args.num_steps, num_envs), bool) for _ in range(2))
    return actor


def big_agent_acts(run: pqn_lake.Run, actor: pqn_lake.Agent, generator: torch.Generator) -> dict:
    """The acting BigAgent's rollout: --num-steps steps of its envs, ε-greedy on the BigAgent's network with the
    BigAgent's generator (the agents' stream stays theirs), into its Pond (drained into the Lake when full), its
    frames into the budget. Returns its ε and the games it finished."""
    args, start = run.args, time.time()
    N, A = actor.envs.num_envs, actor.envs.single_action_space.n
    for t in range(args.num_steps):
        drawn = (
            torch.randint(A, (N,), device=run.device, generator=generator),
            torch.rand(N, device=run.device, generator=generator),
        )
        pqn_lake.act(actor, t, drawn)
        pqn_lake.receive(actor, args, run.device, t)
    run.global_frames += N * args.num_steps * frames_per_step(args)
    if actor.pond.pos == args.pond_steps:
        run.new_transitions += pqn_lake.drain_pond(actor.pond, run.lake, actor.name)
    metrics = {
        "big_agent/charts/epsilon": pqn_lake.epsilon(actor.epsilon_schedule, actor.frames),
        "big_agent/charts/frames": actor.frames,
    }
    if actor.finished:  # full games, unclipped
        metrics["big_agent/charts/episodic_return"] = float(np.mean([g[0] for g in actor.finished]))
        metrics["big_agent/charts/episodic_length"] = float(np.mean([g[1] for g in actor.finished]))
        actor.finished = []
    run.seconds["big_agent"] = run.seconds.get("big_agent", 0.0) + time.time() - start
    return metrics


def evaluate_big_agent(run: pqn_lake.Run, big_eval_envs, seed_keys: tuple) -> dict:
    """The BigAgent's own games (envs and seed of its own: the agents' games stay those of pqn_lake.py), the run's
    eval/return: it is the run's product."""
    returns, lengths, _ = evaluate(
        [run.big_agent.q_network],
        run.args,
        big_eval_envs,
        derive_seed(run.args, EVALUATION, *seed_keys, BIG_AGENT),
        run.device,
    )
    print(f"eval at {run.global_frames:,} frames: BigAgent {returns.mean():.2f}", flush=True)
    pqn_lake.keep_best(run, float(returns.mean()), "big_agent", run.big_agent.q_network)
    return {
        "eval/return": float(returns.mean()),
        "big_agent/eval/return": float(returns.mean()),
        "big_agent/eval/length": float(lengths.mean()),
    }


def end_of_phase(run: pqn_lake.Run, clone: bool, phase_updates: int) -> None:
    """Step 4: the BigAgent against its agents on the phase's Lake states; the clone, if due, and the clones' games
    (the BigAgent's evaluation at a clone, as in pqn_lake.py); the phase's metrics."""
    args, agents, big_agent = run.args, run.agents, run.big_agent
    row = {
        **collapse_metrics(
            big_agent.q_network,
            [a.q_network for a in agents],
            pqn_lake.draw_probe(run),
            agents[0].envs.single_action_space.n,
        ),
        "big_agent/charts/phase_updates": phase_updates,
        **{f"time/{part}_seconds": run.seconds.get(part, 0.0) for part in ("agents", "big_pond_fill", "big_agent")},
        "charts/lake_transitions": run.lake.num_transitions,
        "charts/phase": run.phase,
    }
    if clone:
        pqn_lake.clone_agents(run)
        *_, returns, lengths, video, seconds, eval_row = pqn_lake.evaluate_agents(
            run, (run.phase, 0), run.phase + 1, film=args.capture_video
        )
        log(run, eval_row)
        run.seconds["evaluation"] += seconds
        big_return, agents_return = float(returns.mean()), float(np.mean(run.levels))
        row.update(
            {
                "eval/return": big_return,
                "eval/length": float(lengths.mean()),
                "big_agent/eval/return": big_return,
                "big_agent/eval/length": float(lengths.mean()),
                "distill/big_minus_agents": big_return - agents_return,
                **({"distill/big_over_agents": big_return / agents_return} if agents_return > 0 else {}),
            }
        )
        pqn_lake.keep_best(run, big_return, "big_agent", big_agent.q_network)
        if args.capture_video:
            video_path = run.run_dir / "videos" / f"phase_{run.phase:04d}_big_agent.mp4"
            lifecycle.log_video(video_path, video, run.global_frames, args.track)
    log(
        run,
        {
            **row,
            "time/eval_seconds": run.seconds["evaluation"],
            "time/eval_fraction": run.seconds["evaluation"] / (time.time() - run.seconds["start"]),
        },
    )


if __name__ == "__main__":
    sys.excepthook = pqn_lake.one_line_errors
    run, resume, checkpoint = pqn_lake.make_run(tyro.cli(Args), "pqn_lake_live", check_args)
    args = run.args
    big_generator = torch.Generator(run.device).manual_seed(derive_seed(args, BIG_AGENT))  # (the agents' stay theirs)
    if checkpoint is not None:
        big_generator.set_state(checkpoint["big_generator"])
    big_actor = make_big_actor(run, args.big_agent_num_envs) if args.big_agent_num_envs > 0 else None
    if big_actor is not None:
        run.other_actors = [big_actor]
        if checkpoint is not None:
            big_actor.frames, big_actor.epsilon_schedule = (
                checkpoint["big_actor"][k] for k in ("frames", "epsilon_schedule")
            )
    run.checkpoint_extra = lambda: {
        "big_generator": big_generator.get_state(),
        "big_actor": big_actor and {"frames": big_actor.frames, "epsilon_schedule": big_actor.epsilon_schedule},
    }
    clone_every = args.agent_updates_per_phase if args.clone_every_updates is None else args.clone_every_updates
    big_eval_envs = make_envs(args, args.eval_episodes)
    try:
        while run.global_frames < args.total_frames:
            pqn_lake.start_phase(run, resume)
            # the BigPond's older part, from the Lake; its fresh part is the Ponds' rows of this phase
            big_pond, big_start_updates = None, run.big_agent.updates
            if run.lake.num_transitions > 0:
                big_pond = fill_big_pond(
                    run.lake, args, np.random.default_rng(derive_seed(args, BIG_POND_DRAW, run.phase)), run.device
                )
            run.seconds["big_pond_fill"] = time.time() - run.seconds["start"]
            # ---------------------------------------------------------- 1-3: PQN agents -> Ponds -> Lake, the
            # BigAgent catching up after every update on what the Ponds hold of this phase (they start empty)
            first = resume.update
            pqn_lake.agents_part(
                run,
                first,
                after_update=lambda update, big_pond=big_pond, first=first: {
                    **(big_agent_acts(run, big_actor, big_generator) if big_actor is not None else {}),
                    **catch_up(run, big_pond, (update - first + 1) * args.num_steps, big_generator),
                },
                at_evaluation=lambda update: evaluate_big_agent(run, big_eval_envs, (run.phase, update)),
            )
            del big_pond
            # ---------------------------------------------------------- 4: clone, if due
            end_of_phase(
                run,
                clone_every > 0
                and (run.agents[0].updates % clone_every == 0 or run.global_frames >= args.total_frames),
                run.big_agent.updates - big_start_updates,
            )
            pqn_lake.end_phase(run)
            resume = pqn_lake.Resume()
    except pqn_lake.Stop as stop:
        print(stop, flush=True)
    big_eval_envs.close()
    if big_actor is not None:
        big_actor.envs.close()
    pqn_lake.close_run(run)
