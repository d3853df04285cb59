"""A GPU node at its limit? Where pqn_lake.py's and dqn_single_baseline.py's time goes, against the envs' own speed.

    python benchmarks/gpu_bench.py                      # a GPU node: Atari Breakout, 4 agents x 128 envs, ~3 minutes
    python benchmarks/gpu_bench.py                      # a CPU: 4 x 8 envs, a few minutes (its figures are not a GPU's)
    python benchmarks/gpu_bench.py --num-envs 64 --updates 5 --baseline-frames 100000

One run prints, each measured in it with pqn_lake's own functions (make_envs, pqn_update, fill_big_pond,
big_agent_update) or the baseline script itself:

  env ceiling     the agents' envs stepped with random actions (send all, then receive all; both timed), measured
                  in rounds alternating with the variant's updates after a warm-up of both, medians reported
  one PQN agent   the loop's update (rollout, PQN update, full Ponds drained into a Lake), one agent's envs; steps/s and
                  the ratio to the ceiling of the same envs; the split of an agent's thread: its envs / the rest of
                  its rollout / its training, and the drains' share of the wall time (Lake)
  the mixture     --num-agents agents, each in its thread (phase steps 1-2), against the ceiling of all their envs
  the BigAgent    ms per (Double) DQN update of --big-batch-size on a BigPond filled from that Lake
  the baseline    dqn_single_baseline.py learning from its second step on (a subprocess; its charts/SPS)
  making envs     seconds until the mixture's envs are made and reset, one after another in this process
                  (ale-py's constructor holds the GIL, so threads do not help)
  GPU busy        nvidia-smi's utilization.gpu, sampled every 0.5 s while the variants run (GPU only)

and, with --phase-updates N, pqn_lake.py run for one whole phase of N updates at its defaults end to end (a
subprocess: envs made, the agents' part, fill, BigAgent, evaluations, checkpoint) and 100M frames projected from it:
its start-up plus the rest times the phases. The ratios, not the absolute figures, carry over between machines.

On an offline GPU node whose image lacks the project's packages (../shared/notes/gpu.md): download here the cp312
manylinux wheels of ale-py, gymnasium, farama-notifications, tyro, docstring-parser, typeguard, shtab, zstandard,
google-crc32c, MinAtar and hdf5plugin (`pip download --no-deps --only-binary=:all: --python-version 3.12
--implementation cp --platform manylinux_2_28_x86_64 ...`), unzip them into one git-ignored folder (of hdf5plugin keep
only `plugins/libh5zstd*`; an empty `av/__init__.py` stands in for PyAV), carry that folder to the node and run
`PYTHONPATH=<folder> timeout 200 python benchmarks/gpu_bench.py | tee gpu_bench.txt`.
"""

import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # pqn_lake.py and lake.py live at the root
import pqn_lake  # noqa: E402
import speed  # noqa: E402
from lake import Lake  # noqa: E402
from loop_bench import table  # noqa: E402  (the same markdown table as the loop bench)


class TimedEnvs:
    """An agent's envs, with the seconds spent inside their step counted."""

    def __init__(self, envs):
        self.envs, self.seconds = envs, 0.0

    def __getattr__(self, name):
        return getattr(self.envs, name)

    def recv(self):
        start = time.perf_counter()
        out = self.envs.recv()
        self.seconds += time.perf_counter() - start
        return out


def threaded_update(agents: list, args, lake: Lake, device: torch.device) -> None:
    """pqn_lake.py's steps 1-2 of one update as its loop makes them: each agent's rollout and PQN update in a thread of
    its own (pqn_update), on random numbers drawn before in the serial order; then full Ponds drained, agent order."""
    K, A = len(agents), agents[0].envs.single_action_space.n
    drawn = speed.draw_in_serial_order(K, args.num_steps, args.num_envs, A, args.update_epochs, device)
    speed.in_agent_threads(pqn_lake.pqn_update, agents, drawn, [args] * K, [device] * K)
    for agent in agents:
        if agent.pond.pos == args.pond_steps:
            pqn_lake.drain_pond(agent.pond, lake, agent.name)


def timed_updates(agents: list, args, lake: Lake, device: torch.device, updates: int) -> dict:
    """`updates` of pqn_lake's phase steps 1-2 (threaded_update), the Lake's writes waited for at the end: steps/s,
    and the shares of an agent's time (its thread's: pqn_update's) spent in its envs' step (env), the rest of its
    rollout (inference: forward passes, ε-greedy, Pond writes) and its learning (training: pqn_update but its
    rollout), with the drains' share of the wall (Lake)."""
    seconds = {"update": [], "rollout": [], "Lake": []}  # (list.append: safe from the agents' threads)
    originals = {name: getattr(pqn_lake, name) for name in ("pqn_update", "rollout", "drain_pond")}

    def timed(name: str, key: str):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return originals[name](*a, **k)
            finally:
                seconds[key].append(time.perf_counter() - t0)

        return call

    for agent in agents:
        agent.envs.seconds = 0.0
    for name, key in (("pqn_update", "update"), ("rollout", "rollout"), ("drain_pond", "Lake")):
        setattr(pqn_lake, name, timed(name, key))
    try:
        start = time.perf_counter()
        for _ in range(updates):
            threaded_update(agents, args, lake, device)
        lake.commit(wait=True)  # inside the timing: no variant is billed for another's writes
        total = time.perf_counter() - start
    finally:
        for name, function in originals.items():
            setattr(pqn_lake, name, function)
    thread, env = sum(seconds["update"]), sum(agent.envs.seconds for agent in agents)
    training = sum(seconds["update"]) - sum(seconds["rollout"])
    shares = {"env": env / thread, "training": training / thread, "Lake": sum(seconds["Lake"]) / total}
    shares["inference"] = 1 - shares["env"] - shares["training"]
    steps = updates * len(agents) * args.num_envs * args.num_steps
    return {"steps/s": steps / total, "seconds": total, **shares}


@dataclass
class Args:
    env_id: str = "Breakout-v5"
    """the game (pqn_lake.py's ids); every other setting is pqn_lake.py's default for it"""
    device: Optional[str] = None
    """cuda when there is one, else cpu"""
    num_agents: int = 4
    """the mixture's agents"""
    num_envs: Optional[int] = None
    """envs per agent (default: pqn_lake's 128 on a GPU, 8 on a CPU)"""
    updates: Optional[int] = None
    """timed updates per variant, after one untimed (default: 4 on a GPU, 2 on a CPU)"""
    big_updates: Optional[int] = None
    """timed BigAgent updates (default: 200 on a GPU, 20 on a CPU)"""
    baseline_frames: Optional[int] = None
    """frames of the baseline's run (default: 20,000 on a GPU, 4,000 on a CPU; 0: skip it)"""
    env_threads: int = 0
    """ale-py threads per vector env (0: one per core)"""
    rounds: int = 3
    """rounds per variant, each its env ceiling then its updates (medians reported), after one of warm-up"""
    phase_updates: int = 0
    """if > 0, also pqn_lake.py for one whole phase of this many agent updates at its defaults, end to end, and the
    100M-frame time projected from it (25: the Atari study's phases, ~2 minutes on an H200; 500: the defaults')"""
    modes: tuple[str, ...] = ("eager", "graphs")
    """on a GPU, the ways the updates run, each measured: eager or --cuda-graphs, and with ", nondeterministic"
    --no-torch-deterministic (e.g. --modes eager "eager, nondeterministic" graphs "graphs, nondeterministic"; a CPU
    runs eager, deterministic only); eager ones first, as graphs own the gradients once captured"""


def set_mode(mode: str, args: pqn_lake.Args, learners: list) -> pqn_lake.Args:
    """pqn_lake's flags and torch's switches for a mode (as open_run sets them); graphs captured anew."""
    args = replace(args, cuda_graphs=mode.startswith("graphs"), torch_deterministic="nondeterministic" not in mode)
    pqn_lake.set_determinism(args, torch.device("cuda" if args.cuda else "cpu"))
    for learner in learners:
        learner.graph = None
    return args


class GPUBusy:
    """nvidia-smi's utilization.gpu every 0.5 s on a thread of its own, read per variant (None without nvidia-smi)."""

    def __init__(self, device: torch.device):
        self.samples, self.proc = [], None
        if device.type == "cuda" and shutil.which("nvidia-smi"):
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    f"--id={device.index or 0}",
                    "--query-gpu=utilization.gpu",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "500",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append((time.time(), int(line)))

    def mean(self, since: float) -> Optional[float]:
        seen = [u for t, u in self.samples if t >= since]
        return float(np.mean(seen)) if seen else None

    def close(self):
        if self.proc is not None:
            self.proc.terminate()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ceiling(vector_envs: list, steps: int) -> dict:
    """Steps/s of vector envs alone, random actions, all of them stepping at once (the agents' own send and recv, in
    one thread), with the seconds spent in send and in recv."""
    n_actions, num_envs = vector_envs[0].single_action_space.n, vector_envs[0].num_envs
    sent = received = 0.0
    start = time.perf_counter()
    for t in range(steps + 1):
        for envs in vector_envs:
            if t > 0:
                t0 = time.perf_counter()
                envs.recv()
                received += time.perf_counter() - t0
            if t < steps:
                actions = np.random.randint(n_actions, size=num_envs)
                t0 = time.perf_counter()
                envs.send(actions)
                sent += time.perf_counter() - t0
    seconds = time.perf_counter() - start
    return {"steps_per_s": steps * len(vector_envs) * num_envs / seconds, "send_s": sent, "recv_s": received}


def one_phase(bench: "Args", updates: int, runs: Path, device: torch.device) -> Optional[dict]:
    """pqn_lake.py at its defaults for exactly one phase of `updates` agent updates, end to end (a subprocess: imports,
    envs made, random play, the agents' part, the BigPond fill, the BigAgent, the clones' evaluation, the checkpoint):
    its wall seconds, the seconds until its first phase began (start-up), and the phase's frames."""
    defaults = pqn_lake.Args(env_id=bench.env_id)
    frames = defaults.num_agents * updates * defaults.num_envs * defaults.num_steps * pqn_lake.frames_per_step(defaults)
    command = [sys.executable, "pqn_lake.py", "--env-id", bench.env_id, "--agent-updates-per-phase", str(updates)]
    command += ["--total-frames", str(frames), "--runs-dir", str(runs), "--env-threads", str(bench.env_threads)]
    command += [] if device.type == "cuda" else ["--no-cuda"]
    start, began = time.perf_counter(), None
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "WANDB_MODE": "offline"},
    )  # fmt: skip
    output = []
    for line in proc.stdout:
        output.append(line)
        if began is None and line.startswith("phase 1:"):
            began = time.perf_counter() - start
    if proc.wait() != 0 or began is None:
        print(f"the phase failed (exit {proc.returncode}):\n{''.join(output[-20:])}", flush=True)
        return None
    return {"seconds": time.perf_counter() - start, "start_up": began, "frames": frames}


def loop(agents: list, args: pqn_lake.Args, lake: Lake, updates: int, device: torch.device) -> dict:
    """pqn_lake's phase steps 1-2 for `updates` updates as its loop makes them: steps/s and the split."""
    result = timed_updates(agents, args, lake, device, updates)
    return {
        "steps_per_s": result["steps/s"],
        "seconds": result["seconds"],
        "split": {
            "env": result["env"],
            "rollout": result["inference"],
            "training": result["training"],
            "Lake": result["Lake"],
        },
    }


def baseline_sps(bench: Args, frames: int, runs: Path, device: torch.device, flags: list) -> Optional[float]:
    """dqn_single_baseline.py at its defaults, learning from its second step on: its last charts/SPS."""
    if frames <= 0:
        return None
    command = [
        sys.executable,
        "dqn_single_baseline.py",
        "--env-id",
        bench.env_id,
        "--total-frames",
        str(frames),
        "--learning-starts",
        "16",
        "--eval-episodes",
        "1",
        "--runs-dir",
        str(runs),
        "--exp-name",
        "gpu_bench",
        "--env-threads",
        str(bench.env_threads),
        *flags,
    ] + ([] if device.type == "cuda" else ["--no-cuda"])
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"}
    )
    if proc.returncode != 0:
        print(f"the baseline failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}", flush=True)
        return None
    (run_dir,) = list(runs.glob("*gpu_bench*"))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return float([r["charts/SPS"] for r in rows if "charts/SPS" in r][-1])


def stop_now(signum, frame) -> None:
    raise KeyboardInterrupt


def main(bench: Args) -> None:
    device = torch.device(bench.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = device.type == "cuda"
    num_envs = bench.num_envs or (128 if gpu else 8)
    updates, big_updates = bench.updates or (4 if gpu else 2), bench.big_updates or (200 if gpu else 20)
    baseline_frames = bench.baseline_frames if bench.baseline_frames is not None else (20_000 if gpu else 4_000)
    start_time = time.time()
    print("$ python " + shlex.join(sys.argv))
    name = torch.cuda.get_device_name(device) if gpu else "no GPU: small sizes, figures that are not a GPU's"
    print(
        f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}; device "
        f"{device} ({name})",
        flush=True,
    )
    args = pqn_lake.Args(
        env_id=bench.env_id, num_agents=bench.num_agents, num_envs=num_envs, env_threads=bench.env_threads, cuda=gpu
    )
    busy = GPUBusy(device)
    scratch = Path(tempfile.mkdtemp(prefix="gpu_bench_"))
    rows, figures = [], {}
    header = [
        "variant",
        "steps/s",
        "env ceiling, steps/s",
        "ratio",
        "env / rest of rollout / training; Lake",
        "GPU busy",
    ]
    signal.signal(signal.SIGTERM, stop_now)  # (a timeout's SIGTERM: the rows measured so far are printed)
    try:
        torch.manual_seed(1)
        t0 = time.perf_counter()  # the agents' envs made and reset one after another (the default): the baseline
        agents = [pqn_lake.make_agent(args, f"agent{k}", device) for k in range(args.num_agents)]
        for k, agent in enumerate(agents):
            pqn_lake.reset_envs(agent, k, device)
            agent.envs = TimedEnvs(agent.envs)
        figures["make_envs_s"] = time.perf_counter() - t0
        lake = Lake(
            scratch / "lake", frame_shape=pqn_lake.frame_shape(args), stack_size=args.stack_size, env_id=args.env_id
        )
        steps, modes = updates * args.num_steps, bench.modes if gpu else ("eager",)
        big_agent = pqn_lake.make_big_agent(args, agents[0].envs.single_action_space.n, device)
        for mode in modes:
            mode_args = set_mode(mode, args, agents + [big_agent])
            for label, group in (("one PQN agent", agents[:1]), ("the mixture", agents)):
                since, variant_args, envs = (
                    time.time(),
                    replace(mode_args, num_agents=len(group)),
                    [a.envs for a in group],
                )
                ceiling(envs, args.num_steps)  # warm-up of both (and a first Lake write, the graphs' capture)
                loop(group, variant_args, lake, 1, device)
                rounds = [
                    (ceiling(envs, steps), loop(group, variant_args, lake, updates, device))
                    for _ in range(bench.rounds)
                ]
                result = sorted((r for _, r in rounds), key=lambda r: r["steps_per_s"])[len(rounds) // 2]
                fair = sorted((c for c, _ in rounds), key=lambda c: c["steps_per_s"])[len(rounds) // 2]
                ceiling_sps = fair["steps_per_s"]
                figures[f"{label}, {mode}"] = {"ceiling": fair, **result, "gpu_busy": busy.mean(since)}
                split = " / ".join(f"{result['split'][k]:.0%}" for k in ("env", "rollout", "training"))
                split += f"; {result['split']['Lake']:.0%}"
                rows.append(
                    [
                        f"{label}, {len(group)} x {num_envs} envs, {mode}",
                        f"{result['steps_per_s']:,.0f}",
                        f"{ceiling_sps:,.0f}",
                        f"{result['steps_per_s'] / ceiling_sps:.2f}",
                        split,
                        "-" if busy.mean(since) is None else f"{busy.mean(since):.0f}%",
                    ]
                )
                print(
                    f"{label}, {mode}: {result['steps_per_s']:,.0f} steps/s, ceiling {ceiling_sps:,.0f} (send "
                    f"{fair['send_s']:.2f} s, recv {fair['recv_s']:.2f} s), median of {bench.rounds} rounds",
                    flush=True,
                )
            # the BigAgent on a BigPond from this Lake
            since = time.time()
            big_pond = pqn_lake.fill_big_pond(
                lake, replace(args, big_pond_size=min(100_000, lake.num_transitions)), np.random.default_rng(0), device
            )
            for _ in range(5):
                pqn_lake.big_agent_update(big_agent, big_pond, mode_args)
            sync(device)
            t0 = time.perf_counter()
            for _ in range(big_updates):
                pqn_lake.big_agent_update(big_agent, big_pond, mode_args)
            sync(device)
            big_ms = (time.perf_counter() - t0) / big_updates * 1e3
            figures[f"big_agent_ms, {mode}"] = big_ms
            rows.append(
                [
                    f"the BigAgent, batch {args.big_batch_size}, {args.big_n_step}-step, {mode}",
                    f"{1e3 / big_ms:,.0f} updates/s",
                    "",
                    "",
                    f"{big_ms:.2f} ms per update",
                    "-" if busy.mean(since) is None else f"{busy.mean(since):.0f}%",
                ]
            )
        lake.close()
        for agent in agents:
            agent.envs.close()
        for mode in ("eager", "graphs") if gpu else ("eager",):  # (the baseline at its own --torch-deterministic)
            since, flags = time.time(), ["--cuda-graphs" if mode == "graphs" else "--no-cuda-graphs"]
            figures[f"baseline_sps, {mode}"] = sps = baseline_sps(bench, baseline_frames, scratch / mode, device, flags)
            if sps is not None:
                rows.append(
                    [
                        f"the baseline (dqn_single_baseline.py, {baseline_frames:,} frames), {mode}",
                        f"{sps:,.0f}",
                        "",
                        "",
                        "",
                        "-" if busy.mean(since) is None else f"{busy.mean(since):.0f}%",
                    ]
                )
    except KeyboardInterrupt:
        print(f"\nstopped after {time.time() - start_time:.0f} s: the rows measured so far\n" + table([header] + rows))
        return
    finally:
        busy.close()

    print()
    print(table([header] + rows))
    print(f"\nthe mixture's {bench.num_agents} x {num_envs} envs made and reset: {figures['make_envs_s']:.1f} s")
    if bench.phase_updates > 0:  # 100M frames from one whole phase measured end to end, not from its parts
        phase = one_phase(bench, bench.phase_updates, scratch / "phase", device)
        if phase is not None:
            defaults = pqn_lake.Args(env_id=bench.env_id)
            phases = defaults.total_frames / phase["frames"]
            minutes = (phase["start_up"] + (phase["seconds"] - phase["start_up"]) * phases) / 60
            print(
                f"one whole phase of {bench.phase_updates} updates at the defaults ({phase['frames']:,} frames), end "
                f"to end: {phase['seconds']:.0f} s, of which start-up (imports, envs made, random play) "
                f"{phase['start_up']:.0f} s; {defaults.total_frames:,} frames at such phases ({phases:.1f}): "
                f"{minutes:.0f} min"
            )
    shutil.rmtree(scratch, ignore_errors=True)
    if not gpu:
        print("(no GPU here: these are a CPU's figures at small sizes, not the GPU node's)")
    print(f"wall time {time.time() - start_time:.0f} s")


if __name__ == "__main__":
    main(tyro.cli(Args))
