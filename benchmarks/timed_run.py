"""Run a script as a program, with timers on the plumbing it calls, for the speed benchmarks (which never import the
scripts: they time what the scripts run, as a researcher's fork would run it).

    python benchmarks/timed_run.py OUT.json [--serial] [--no-lake] pqn_lake.py --env-id MinAtar/Breakout-v1 ...

After every agent update (each call of speed.in_agent_threads: every agent's rollout and PQN update) a snapshot of the
running totals goes into OUT.json's "updates", so a benchmark takes any window of updates (after a warm-up) by
difference:
  t            the wall clock at the update's end (seconds)
  agents       the agents' work in their threads (speed.on_stream), summed over agents
  env          the time the agents waited for their envs' step (the vector env's recv)
  training     the agents' gradient steps (speed.gradient_step: forward, backward, clip, optimizer step)
  lake         the drains' Lake.append and Lake.commit, in the loop's thread
  writer_cpu   the CPU seconds of the Lake's writer thread (Linux /proc; 0 elsewhere)
  cpu          the process's CPU seconds (all its threads)
--serial runs the agents one after another in the loop's thread (the same random numbers: the same results) instead
of a thread each; --no-lake makes Lake.append and Lake.commit do nothing (a full Pond is just emptied).
"""

import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import envs  # noqa: E402
import lake  # noqa: E402
import speed  # noqa: E402

TOTALS = {"agents": 0.0, "env": 0.0, "training": 0.0, "lake": 0.0}
LOCK = threading.Lock()  # (the agents' threads add to the totals at once)


def add(key: str, seconds: float) -> None:
    with LOCK:
        TOTALS[key] += seconds


def timed(function, key: str):
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            add(key, time.perf_counter() - start)

    return call


class TimedRecv:
    """A vector env whose recv (the wait for the step sent) is timed."""

    def __init__(self, vector_env):
        self._envs = vector_env

    def __getattr__(self, name):
        return getattr(self._envs, name)

    def recv(self):
        start = time.perf_counter()
        try:
            return self._envs.recv()
        finally:
            add("env", time.perf_counter() - start)


def writer_cpu_seconds() -> float:
    """CPU seconds (user + system) the Lake's writer thread has used so far (Linux /proc; 0 elsewhere)."""
    for thread in threading.enumerate():
        if thread.name == "lake-writer" and thread.native_id is not None:
            try:
                with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after the name: state is field 3 of proc(5)
            except OSError:
                return 0.0
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)
    return 0.0


def main(out: str, serial: bool, no_lake: bool, script: str, flags: list) -> None:
    snapshots = []
    in_threads = speed.in_agent_threads

    def agents_update(work, agents, *per_agent):
        if serial:  # one after another in this thread, then the default stream waits for theirs, as in_agent_threads
            results = [speed.on_stream(agent, work, *items) for agent, *items in zip(agents, *per_agent)]
            speed.join_streams(agents)
        else:
            results = in_threads(work, agents, *per_agent)
        snapshots.append(
            {"t": time.perf_counter(), **TOTALS, "writer_cpu": writer_cpu_seconds(), "cpu": time.process_time()}
        )
        return results

    speed.in_agent_threads = agents_update
    speed.on_stream = timed(speed.on_stream, "agents")
    speed.gradient_step = timed(speed.gradient_step, "training")
    make_envs = envs.make_envs
    envs.make_envs = lambda *args, **kwargs: TimedRecv(make_envs(*args, **kwargs))
    for name in ("append", "commit"):
        method = getattr(lake.Lake, name)
        setattr(lake.Lake, name, (lambda *a, **k: None) if no_lake else timed(method, "lake"))
    sys.argv = [script, *flags]
    try:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    finally:
        Path(out).write_text(json.dumps({"script": script, "flags": flags, "updates": snapshots}) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    out, options = args[0], {"--serial": False, "--no-lake": False}
    rest = args[1:]
    while rest and rest[0] in options:
        options[rest.pop(0)] = True
    main(out, options["--serial"], options["--no-lake"], rest[0], rest[1:])
