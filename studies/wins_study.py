"""Can the mixture win? (MinAtar, 4 games, 5M frames): consolidators that learn more from the Lake than its agents did.
One resumable part per question, finished runs skipped; every table from the committed records
(studies/minatar_runs/).

    python studies/wins_study.py --part passive --games Breakout SpaceInvaders --seeds 1      # the screen, first
    python studies/wins_study.py --part passive --cells 8:dqn:none 8:dqn:shrink-perturb       # more cells
    python studies/wins_study.py --part loop --arms mixture-shared                            # in the loop
    python studies/wins_study.py --table-only                                       # the tables and figures

passive: the passive harness (studies/passive_big_agent.py) on each game's single-PQN Lake (the limits study's
`lake-writer`: one PQN agent at pqn_lake.py's defaults; its Lake kept in --runs-dir, not committed), one run per cell,
a cell being `<update scale>:<--big-learner>:<--big-agent-reset>`: the BigAgent's samples per transition are 2 x the
scale (the loop's --big-replay-ratio 2), a reset happens at each of the loop's phases. The present rule's cells x1 and
x4 are the limits study's records (`passive-lake-writer-x1`, `-x4`). A writer whose Lake is gone is made again only
while a cell of it is still to run, and its cells run only if it is its record again, evaluation for evaluation: a CPU
whose float sums differ makes another Lake, and cells on it would not be comparable with the recorded ones. The bar is
the writer's own return: a consolidator that cannot beat its writer passively cannot make the mixture win.
loop: pqn_lake.py's mixture with a remedy, 5M frames (LOOP_ARMS: `mixture-shared`, agents that learn from all four
agents' rollouts, --agents-share-rollouts, the BigAgent at its defaults; `mixture-rr16`, the screen's x8 consolidator
as the loop's BigAgent, --big-replay-ratio 16; `mixture-shared-rr16`, both), against the records of one PQN agent
(`pqn-anneal`, the arms part's), the loop at its defaults (`mixture-anneal`) and with 4x the BigAgent's updates
(`mixture-rr8`, the limits study's). Runs are resumed from their checkpoints and recorded when they reach their frames.

The table: per cell, per game the final evaluation return (mean ± 95% t over seeds), across games the IQM of returns
normalised by random play (0) and the MinAtar paper's DQN (1) with stratified bootstrap intervals, and P(cell > its
writer) (limits_study.py's question_table: compare.py's rliable calls); then the README's table, and how much the
in-loop arms' last evaluation step moved (the mixture's short seventh phase) against the step before it. Runs go
--parallel at a time, one thread each.
"""

import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Literal

import tyro

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import limits_study  # noqa: E402  (its runs, records and tables)
import minatar_study  # noqa: E402  (its way to start runs side by side and collect them)

WRITER = "lake-writer"  # the single PQN agent whose Lake the passive cells read (the limits study's)
# pqn_lake.py's flags of each in-loop arm: the passive screen's best consolidator (x8: 16 samples per transition, no
# reset) as the loop's BigAgent; agents that learn from all four streams (alone and with rr16) ran at the commits
# their records name (the flag has left the loop)
LOOP_ARMS = {"mixture-rr16": ["--big-replay-ratio", "16"]}
CLOSED_LOOP_ARMS = ("mixture-shared", "mixture-shared-rr16")  # --agents-share-rollouts: run at limits_study.CLOSED_AT
LOOP_REFERENCES = ("pqn-anneal", "mixture-anneal", "mixture-rr8")  # recorded: one PQN agent (the P reference), the loop
limits_study.QUESTIONS["wins-loop"] = (
    *LOOP_REFERENCES,
    "mixture-shared",
    "mixture-rr16",
    "mixture-shared-rr16",
)  # the in-loop table's arms, P's reference first


@dataclasses.dataclass
class Args:
    part: Literal["passive", "loop"] = "passive"
    """which question to run (see above)"""
    cells: tuple[str, ...] = (
        "1:dqn:none",
        "4:dqn:none",
        "1:q-lambda:none",
        "4:q-lambda:none",
        "4:dqn:scratch",
        "4:dqn:shrink-perturb",
        "8:dqn:none",
        "8:dqn:shrink-perturb",
    )
    """passive: <update scale>:<--big-learner>:<--big-agent-reset> (scale 1: the loop's 2 samples per transition)"""
    arms: tuple[str, ...] = tuple(LOOP_ARMS)
    """loop: the arms of LOOP_ARMS to run (CLOSED_LOOP_ARMS: their commit is named)"""
    runs_dir: str = "runs/wins"
    """where the runs go, with the writers' Lakes and the checkpoints"""
    record_dir: str = str(HERE / "minatar_runs")
    """where finished runs are recorded (committed)"""
    games: tuple[str, ...] = ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    seeds: tuple[int, ...] = (1, 2, 3)
    frames: int = 5_000_000
    """the writers' frames"""
    parallel: int = 2
    """runs at once, one thread each"""
    table_only: bool = False
    """print the tables of the records without running anything"""


def cell_arm(cell: str) -> tuple:
    """(arm, passive_big_agent.py flags) of a cell: passive-lake-writer-x<scale>[-<learner>][-<reset>]; the flags
    None for a Q(λ) or reset cell, whose flags left the scripts after limits_study.CLOSED_AT."""
    scale, learner, reset = cell.split(":")
    rule = "".join(f"-{v}" for v, default in ((learner, "dqn"), (reset, "none")) if v != default)
    return f"passive-{WRITER}-x{scale}{rule}", None if rule else ["--update-scale", scale]


def closed(name: str) -> None:
    print(
        f"{name}: its flags left pqn_lake.py after {limits_study.CLOSED_AT} (its records name the commit that ran "
        f"them); to run it again: git worktree add ../closed {limits_study.CLOSED_AT}, then this command there",
        flush=True,
    )


def writer_run(args: Args, game: str, seed: int) -> tuple:
    """(name, frames, command) of the writer: the limits study's lake-writer."""
    return limits_study.script_run(limits_args(args), game, seed, WRITER)


def limits_args(args: Args) -> limits_study.Args:
    return limits_study.Args(
        runs_dir=args.runs_dir, record_dir=args.record_dir, games=args.games, seeds=args.seeds, frames=args.frames
    )


def loop_run(args: Args, game: str, seed: int, arm: str) -> tuple:
    """(name, frames, command) of an in-loop arm's run."""
    name = f"{game}__{arm}__{seed}"
    return (
        name,
        args.frames,
        [
            "pqn_lake.py",
            "--env-id",
            f"MinAtar/{game}-v1",
            "--seed",
            str(seed),
            "--total-frames",
            str(args.frames),
            "--runs-dir",
            args.runs_dir,
            "--exp-name",
            name,
            *LOOP_ARMS[arm],
        ],
    )


def to_run(args: Args) -> list:
    """(name, command) of the part's runs still to make, game by game within a seed: a writer whose Lake is missing
    (its command; resumed if it has progress), then its cells (("passive", writer, flags): made once it has
    finished)."""
    largs, queue = limits_args(args), []
    for seed in args.seeds if args.part == "loop" else ():
        for arm in args.arms:
            for game in args.games:
                if arm in CLOSED_LOOP_ARMS:
                    if limits_study.run_folder(args.record_dir, f"{game}__{arm}__{seed}") is None:
                        closed(f"{game}__{arm}__{seed}")
                    continue
                name, frames, command = loop_run(args, game, seed, arm)
                run_dir = limits_study.run_folder(args.runs_dir, name)
                if limits_study.run_folder(args.record_dir, name) is not None:
                    continue
                if minatar_study.evaluated(run_dir) >= frames:
                    limits_study.keep_record(largs, run_dir)  # (finished by a call stopped before recording it)
                elif minatar_study.progress(run_dir) > 0:
                    queue.append((name, [command[0], "--resume", str(run_dir), "--total-frames", str(frames)]))
                else:
                    queue.append((name, command))
    for seed in args.seeds if args.part == "passive" else ():
        for game in args.games:
            cells = [(f"{game}__{arm}__{seed}", flags) for arm, flags in map(cell_arm, args.cells)]
            cells = [(name, flags) for name, flags in cells if limits_study.run_folder(args.record_dir, name) is None]
            for name in (name for name, flags in cells if flags is None):
                closed(name)
            cells = [(name, flags) for name, flags in cells if flags is not None]
            if not cells:
                continue
            name, frames, command = writer_run(args, game, seed)
            run_dir = limits_study.run_folder(args.runs_dir, name)
            record = limits_study.run_folder(args.record_dir, name)
            if minatar_study.evaluated(run_dir) >= frames and record is None:
                limits_study.keep_record(largs, run_dir)
            elif minatar_study.evaluated(run_dir) >= frames and not same_lake(run_dir, record):
                continue
            if minatar_study.evaluated(run_dir) < frames:
                if minatar_study.progress(run_dir) > 0:
                    command = [command[0], "--resume", str(run_dir), "--total-frames", str(frames)]
                elif updates := resumed_updates(record):  # made as its record was: stopped there, then resumed
                    command = [*command, "--stop-after-updates", str(updates)]
                queue.append((name, command))
            queue += [(cell, ("passive", name, flags)) for cell, flags in cells]
    return queue


def passive_command(args: Args, writer: str, flags: list):
    """passive_big_agent.py on the writer's Lake, or None while the writer is unfinished."""
    run_dir = limits_study.run_folder(args.runs_dir, writer)
    if run_dir is None or minatar_study.evaluated(run_dir) < args.frames:
        return None
    return [
        "studies/passive_big_agent.py",
        "--one",
        str(Path(run_dir).resolve()),
        *flags,
        "--seed",
        writer.rsplit("__", 1)[1],
        "--runs-dir",
        str(Path(args.runs_dir, "passive").resolve()),
        "--record-dir",
        str(Path(args.record_dir).resolve()),
    ]


def run_all(args: Args) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    queue, running, start, other_lakes = to_run(args), [], time.time(), set()
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    while queue or running:
        for item in list(queue):
            if len(running) >= args.parallel:
                break
            name, command = item
            if command[0] == "passive":
                if command[1] in other_lakes:
                    queue.remove(item)
                    continue
                command = passive_command(args, command[1], command[2])
                if command is None:
                    continue  # its writer is still running
            queue.remove(item)
            running.append(minatar_study.launch(args.runs_dir, name, command, env))
        for name, proc in minatar_study.ended(running):
            run_dir = limits_study.run_folder(args.runs_dir, name)
            if f"__{WRITER}__" in name and proc.returncode == 0 and minatar_study.evaluated(run_dir) < args.frames:
                resume = ["pqn_lake.py", "--resume", str(run_dir), "--total-frames", str(args.frames)]
                queue.insert(0, (name, resume))  # a writer stopped where its record was resumed: on it goes
                continue
            if "passive-" not in name and proc.returncode == 0 and minatar_study.evaluated(run_dir) >= args.frames:
                record = limits_study.run_folder(args.record_dir, name)
                if record is None:
                    limits_study.keep_record(limits_args(args), run_dir)
                elif not same_lake(run_dir, record):
                    other_lakes.add(name)
    print(f"all runs done in {(time.time() - start) / 60:.1f} min", flush=True)


def same_lake(run_dir: Path, record: Path) -> bool:
    """Is a writer made again its record, evaluation for evaluation (else this CPU made another Lake: said)?"""
    if eval_rows(run_dir) == eval_rows(record):
        return True
    print(
        f"{run_dir.name}: made again, but its evaluations are not its record's ({record.name}): this CPU's float "
        "sums make another Lake; its cells are not run",
        flush=True,
    )
    return False


def resumed_updates(record) -> int:
    """The agent updates after which a recorded writer was stopped and resumed mid-phase (its config's commit says
    "resumed mid-phase at N frames"), else 0. A mid-phase resume resets the envs from (seed, agent, phase, update): a
    run stopped after the same update and resumed is the record again (Freeway seed 1's)."""
    config = None if record is None else record / "config.json"
    if config is None or not config.exists():
        return 0
    config = json.loads(config.read_text())
    found = re.search(r"resumed mid-phase at ([\d,]+) frames", config.get("commit", ""))
    return int(found.group(1).replace(",", "")) // (config["num_envs"] * config["num_steps"]) if found else 0  # MinAtar


def eval_rows(run_dir) -> list:
    """(frames, return) of each of a run's evaluations."""
    rows = [json.loads(line) for line in minatar_study.compare.metrics_text(run_dir).splitlines() if line.strip()]
    return [(r["global_frames"], r["eval/return"]) for r in rows if "eval/return" in r]


def tables(args: Args) -> str:
    limits_study.QUESTIONS["wins-passive"] = (WRITER, *dict.fromkeys(cell_arm(c)[0] for c in args.cells))
    parts = (
        ("passive screen: P(cell > its writer, lake-writer)", "wins-passive"),
        ("in the loop: P(arm > one PQN agent, pqn-anneal)", "wins-loop"),
    )
    return "\n\n".join(
        [
            *(
                title + "\n" + limits_study.question_table(limits_args(args), question).rsplit("\n", 1)[0]
                for title, question in parts
            ),
            "what wins (the README's table)\n" + what_wins(args),
            "the last evaluation step: its change and the one before it, normalised\n" + last_step_table(args),
        ]
    )


def last_step_table(args: Args) -> str:
    """Per in-loop arm: the change of eval/return over a run's last evaluation step (for the mixture arms the short
    seventh phase, 98,304 frames, as 5M frames is not a whole number of phases) and over the step before it, normalised
    as the IQM is (the MinAtar paper's DQN minus random play), mean ± 95% t over runs, and the runs it rose in. The
    finals are read at 5M frames, between the last two evaluations."""
    import compare
    import numpy as np

    largs, out = limits_args(args), []
    out += ["| arm | runs | frames of the last step | last step | rose | the step before | rose |"]
    out += ["| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for arm in limits_study.QUESTIONS["wins-loop"]:
        last, before, frames = [], [], []
        for game in args.games:
            for values_frames, values, random in limits_study.curves(largs, arm, game, 0).values():
                scale = minatar_study.PAPER_DQN[game] - (random or 0.0)
                last.append((values[-1] - values[-2]) / scale)
                before.append((values[-2] - values[-3]) / scale)
                frames.append(int(values_frames[-1] - values_frames[-2]))
        if last:
            cells = [
                f"{np.mean(c):+.3f} ± {compare.t_half_width(c, 0.95):.3f} | {sum(np.array(c) > 0)}/{len(c)}"
                for c in (last, before)
            ]
            out.append(f"| {arm} | {len(last)} | {min(frames):,}-{max(frames):,} | {' | '.join(cells)} |")
    return "\n".join(out)


# The GPU node's measured costs (benchmarks/gpu_runs/h200_06c0ee3/c_gpu_bench.txt: an H200, Atari Breakout-v5, CUDA
# graphs as by default): one PQN agent's 128 envs x 32 steps ran 9,659 env steps/s, the mixture's 4 agents 15,768
# between them, a BigAgent update of 256 transitions 2.24 ms; the BigPond fills and evaluations are left out.
GPU_AGENT_STEPS_PER_S, GPU_MIXTURE_STEPS_PER_S, GPU_BIG_AGENT_UPDATE_S = 9_659, 15_768, 2.24e-3
ATARI_FRAMES, ATARI_FRAME_SKIP = 100_000_000, 4


def cpu_minutes(record: Path) -> float:
    """A recorded run's minutes on this CPU (one thread, another run beside it): its phases' seconds (time/*), or for
    a run that logs none (one agent, no BigAgent) the time its charts/SPS implies, process by process."""
    rows = [json.loads(line) for line in minatar_study.compare.metrics_text(record).splitlines() if line.strip()]
    parts = ("agents", "big_pond_fill", "big_agent", "eval")
    seconds = sum(row.get(f"time/{part}_seconds", 0.0) for row in rows for part in parts)
    rated = [(row["global_frames"], row["charts/SPS"]) for row in rows if row.get("charts/SPS")]
    if seconds == 0 and rated:  # charts/SPS: the frames since the process's start (one row's frames before its first)
        step = min(b - a for (a, _), (b, _) in zip(rated, rated[1:])) if len(rated) > 1 else rated[0][0]
        start, before = rated[0][0] - step, 0.0
        for frames, sps in rated:
            if (frames - start) / sps < before:  # time went back: a resumed process's own clock (a slower one is
                seconds, start = seconds + before, frames - step  # not told apart: its time is then overcounted)
            before = (frames - start) / sps
        seconds += before
    return seconds / 60


def gpu_hours(record: Path) -> float:
    """The projected GPU-hours of a 100M-frame Atari run with the record's flags: its agents' env steps at the measured
    rate (one agent's, or the mixture's agents' in their threads), its BigAgent's updates (--big-replay-ratio samples
    per transition, --big-batch-size each) at theirs."""
    config = json.loads((record / "config.json").read_text())
    transitions = ATARI_FRAMES / ATARI_FRAME_SKIP
    steps_per_s = GPU_AGENT_STEPS_PER_S if config["num_agents"] == 1 else GPU_MIXTURE_STEPS_PER_S
    updates = 0 if config["big_agent_schedule"] == "none" else config["big_replay_ratio"] * transitions
    return (transitions / steps_per_s + updates / config["big_batch_size"] * GPU_BIG_AGENT_UPDATE_S) / 3600


def what_wins(args: Args) -> str:
    """The README's table: per in-loop arm its IQM and P(> one PQN agent) (question_table's), its mean minutes per
    run here, and the projected GPU-hours of a 100M-frame Atari run."""
    lines = limits_study.question_table(limits_args(args), "wins-loop").splitlines()[2:-1]
    out = [
        "| arm | IQM, normalised [95% CI] | P(> one PQN agent) [95% CI] | CPU min per run | GPU-h, 100M Atari frames |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for line in lines:
        arm, *_, iqm, improves = (cell.strip() for cell in line.strip("|").split("|"))
        records = [limits_study.run_folder(args.record_dir, f"{g}__{arm}__{s}") for g in args.games for s in args.seeds]
        records = [r for r in records if r is not None]
        minutes = sum(map(cpu_minutes, records)) / len(records)
        out.append(
            f"| {arm} | {iqm} | {improves} | {minutes:.0f} ({len(records)} runs) | {gpu_hours(records[0]):.1f} |"
        )
    return "\n".join(out)


def figures(args: Args) -> None:
    """wins_passive.png, wins_loop.png: per game the evaluation curves, mean over the recorded seeds (a passive
    BigAgent's on its writer's frame axis: the share of its updates made)."""
    largs = limits_args(args)
    for question, png, axis in (
        ("wins-passive", "wins_passive.png", "frames (a passive BigAgent: its writer's)"),
        ("wins-loop", "wins_loop.png", "frames"),
    ):
        limits_study.plot_per_game(
            largs,
            limits_study.QUESTIONS[question],
            lambda arm, game: [
                (frames, values) for frames, values, _ in limits_study.curves(largs, arm, game, 0).values()
            ],
            HERE / png,
            axis,
            "eval/return",
        )


if __name__ == "__main__":
    args = tyro.cli(Args)
    if not args.table_only:
        run_all(args)
    print(tables(args))
    figures(args)
