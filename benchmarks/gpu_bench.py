"""A GPU node at its limit? Where pqn_lake.py's and dqn_single_baseline.py's time goes, against the envs' own speed.

    python benchmarks/gpu_bench.py                      # a GPU node: Atari Breakout, 4 agents x 128 envs, ~3 minutes
    python benchmarks/gpu_bench.py                      # a CPU: 4 x 8 envs, a few minutes (its figures are not a GPU's)
    python benchmarks/gpu_bench.py --num-envs 64 --updates 5 --baseline-frames 100000

One run prints, each measured by running the scripts themselves (pqn_lake.py through benchmarks/timed_run.py, which
times the plumbing it calls; dqn_single_baseline.py on its own):

  env ceiling     the agents' envs (envs.py, the run's own flags from its config.json) stepped with random actions
                  (send all, then receive all; both timed), in rounds alternating with the variant's windows after a
                  warm-up of both, medians reported
  one PQN agent   a window of pqn_lake.py's agents' part (--big-agent-schedule none: rollout, PQN update, full Ponds
                  drained into its Lake), one agent's envs, one untimed update first; steps/s and the ratio to the
                  ceiling of the same envs; the split of an agent's thread: its envs / the rest of its update / its
                  gradient steps, and the drains' share of the wall time (Lake)
  the mixture     --num-agents agents, each in its thread, against the ceiling of all their envs
  the BigAgent    ms per (Double) DQN update of batch 256: two runs of one phase whose BigAgent makes N and 2N updates
                  (--big-replay-ratio 0), their time/big_agent_seconds apart over N (capture and fill cancel)
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
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import numpy as np
import torch
import tyro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import envs  # noqa: E402
from loop_bench import table  # noqa: E402  (the same markdown table as the loop bench)


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
    rounds: int = 3
    """rounds per variant, each its env ceiling then its updates (medians reported), after one of warm-up"""
    phase_updates: int = 0
    """if > 0, also pqn_lake.py for one whole phase of this many agent updates at its defaults, end to end, and the
    100M-frame time projected from it (25: the Atari study's phases, ~2 minutes on an H200; 500: the defaults')"""
    modes: tuple[str, ...] = ("eager", "graphs")
    """on a GPU, the ways the updates run, each measured: eager or --cuda-graphs, and with ", nondeterministic"
    --no-torch-deterministic (e.g. --modes eager "eager, nondeterministic" graphs "graphs, nondeterministic"; a CPU
    runs eager, deterministic only); eager ones first, as graphs own the gradients once captured"""


def mode_flags(mode: str, device: torch.device) -> list:
    """pqn_lake.py's flags for a mode: eager or --cuda-graphs, --no-torch-deterministic if ", nondeterministic"."""
    flags = ["--cuda-graphs" if mode.startswith("graphs") else "--no-cuda-graphs"]
    flags += ["--no-torch-deterministic"] if "nondeterministic" in mode else []
    return flags + ([] if device.type == "cuda" else ["--no-cuda"])


def script(command: list, folder: Path) -> Path:
    """pqn_lake.py with these flags (through timed_run.py if command starts with it), in a folder of its own; its run
    folder."""
    folder.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, *command, "--runs-dir", str(folder / "runs")], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"pqn_lake.py failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (run_dir,) = (folder / "runs").iterdir()
    return run_dir


def window(bench: "Args", num_agents: int, num_envs: int, updates: int, flags: list, folder: Path) -> tuple:
    """A window of pqn_lake.py's agents' part: one untimed update, then `updates` timed ones. Returns (steps/s and the
    split, the run's config.json)."""
    out = folder / "timed.json"
    command = ["benchmarks/timed_run.py", str(out), "pqn_lake.py", "--env-id", bench.env_id, "--big-agent-schedule"]
    command += ["none", "--num-agents", str(num_agents), "--num-envs", str(num_envs), "--agent-updates-per-phase"]
    command += [str(updates + 2), "--eval-episodes", "1", "--stop-after-updates"]  # (random play is not timed)
    run_dir = script([*command, str(updates + 1), *flags], folder)
    snapshots = json.loads(out.read_text())["updates"]
    first, last = snapshots[0], snapshots[updates]
    took = {k: last[k] - first[k] for k in first}
    config = json.loads((run_dir / "config.json").read_text())
    split = {"env": took["env"] / took["agents"], "training": took["training"] / took["agents"]}
    split.update(rollout=1 - split["env"] - split["training"], Lake=took["lake"] / took["t"])
    steps = updates * num_agents * num_envs * config["num_steps"]
    return {"steps_per_s": steps / took["t"], "seconds": took["t"], "split": split}, config


def big_agent_ms(bench: "Args", big_updates: int, flags: list, folder: Path) -> float:
    """ms per BigAgent update: one phase of one agent update with N, then 2N BigAgent updates (--big-replay-ratio 0),
    the difference of their time/big_agent_seconds over N."""
    seconds = []
    for n in (big_updates, 2 * big_updates):
        command = ["pqn_lake.py", "--env-id", bench.env_id, "--num-envs", "8", "--agent-updates-per-phase", "1"]
        command += ["--big-replay-ratio", "0", "--big-agent-updates-per-phase", str(n), "--big-pond-size", "10000"]
        command += ["--eval-episodes", "1", "--eval-max-frames", "400", "--stop-after-phases", "1", *flags]
        run_dir = script(command, folder / str(n))
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        seconds.append(next(r["time/big_agent_seconds"] for r in rows if "time/big_agent_seconds" in r))
    return (seconds[1] - seconds[0]) / big_updates * 1e3


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


def ceiling(vector_envs: list, steps: int) -> dict:
    """Steps/s of vector envs alone, random actions, all of them stepping at once (the agents' own send and recv, in
    one thread), with the seconds spent in send and in recv."""
    n_actions, num_envs = vector_envs[0].single_action_space.n, vector_envs[0].num_envs
    sent = received = 0.0
    start = time.perf_counter()
    for t in range(steps + 1):
        for vector_env in vector_envs:
            if t > 0:
                t0 = time.perf_counter()
                vector_env.recv()
                received += time.perf_counter() - t0
            if t < steps:
                actions = np.random.randint(n_actions, size=num_envs)
                t0 = time.perf_counter()
                vector_env.send(actions)
                sent += time.perf_counter() - t0
    seconds = time.perf_counter() - start
    return {"steps_per_s": steps * len(vector_envs) * num_envs / seconds, "send_s": sent, "recv_s": received}


def one_phase(bench: "Args", updates: int, runs: Path, device: torch.device) -> Optional[dict]:
    """pqn_lake.py at its defaults for exactly one phase of `updates` agent updates, end to end (a subprocess: imports,
    envs made, random play, the agents' part, the BigPond fill, the BigAgent, the clones' evaluation, the checkpoint):
    its wall seconds, the seconds until its first phase began (start-up), the phase's frames, the run's total."""
    command = [sys.executable, "pqn_lake.py", "--env-id", bench.env_id, "--agent-updates-per-phase", str(updates)]
    command += ["--stop-after-phases", "1", "--runs-dir", str(runs)]
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
    (run_dir,) = runs.iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    frames = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["global_frames"]
    return {
        "seconds": time.perf_counter() - start,
        "start_up": began,
        "frames": frames,
        "total": config["total_frames"],
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
    busy = GPUBusy(device)
    scratch = Path(tempfile.mkdtemp(prefix="gpu_bench_"))
    rows, figures = [], {}
    header = [
        "variant",
        "steps/s",
        "env ceiling, steps/s",
        "ratio",
        "env / rest of update / training; Lake",
        "GPU busy",
    ]
    signal.signal(signal.SIGTERM, stop_now)  # (a timeout's SIGTERM: the rows measured so far are printed)
    try:
        modes, made = bench.modes if gpu else ("eager",), None
        for mode in modes:
            flags = mode_flags(mode, device)
            for label, K in (("one PQN agent", 1), ("the mixture", bench.num_agents)):
                since, folder = time.time(), scratch / f"{mode}_{K}".replace(", ", "_")
                result, config = window(bench, K, num_envs, 1, flags, folder / "warm-up")
                if made is None:  # the mixture's envs as the script makes them (its flags from its config.json)
                    t0 = time.perf_counter()
                    made = [envs.make_envs(SimpleNamespace(**config), num_envs) for _ in range(bench.num_agents)]
                    for k, vector_env in enumerate(made):
                        vector_env.reset(seed=k)
                    figures["make_envs_s"] = time.perf_counter() - t0
                steps, group = updates * config["num_steps"], made[:K]
                ceiling(group, config["num_steps"])  # warm-up
                rounds = [
                    (ceiling(group, steps), window(bench, K, num_envs, updates, flags, folder / str(r))[0])
                    for r in range(bench.rounds)
                ]
                result = sorted((r for _, r in rounds), key=lambda r: r["steps_per_s"])[len(rounds) // 2]
                fair = sorted((c for c, _ in rounds), key=lambda c: c["steps_per_s"])[len(rounds) // 2]
                ceiling_sps = fair["steps_per_s"]
                figures[f"{label}, {mode}"] = {"ceiling": fair, **result, "gpu_busy": busy.mean(since)}
                split = " / ".join(f"{result['split'][k]:.0%}" for k in ("env", "rollout", "training"))
                split += f"; {result['split']['Lake']:.0%}"
                rows.append(
                    [
                        f"{label}, {K} x {num_envs} envs, {mode}",
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
            since = time.time()  # the BigAgent
            figures[f"big_agent_ms, {mode}"] = big_ms = big_agent_ms(bench, big_updates, flags, scratch / "big" / mode)
            rows.append(
                [
                    f"the BigAgent, batch 256, {mode}",
                    f"{1e3 / big_ms:,.0f} updates/s",
                    "",
                    "",
                    f"{big_ms:.2f} ms per update",
                    "-" if busy.mean(since) is None else f"{busy.mean(since):.0f}%",
                ]
            )
        for vector_env in made or []:
            vector_env.close()
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
            phases = phase["total"] / phase["frames"]
            minutes = (phase["start_up"] + (phase["seconds"] - phase["start_up"]) * phases) / 60
            print(
                f"one whole phase of {bench.phase_updates} updates at the defaults ({phase['frames']:,} frames), end "
                f"to end: {phase['seconds']:.0f} s, of which start-up (imports, envs made, random play) "
                f"{phase['start_up']:.0f} s; {phase['total']:,} frames at such phases ({phases:.1f}): {minutes:.0f} min"
            )
    shutil.rmtree(scratch, ignore_errors=True)
    if not gpu:
        print("(no GPU here: these are a CPU's figures at small sizes, not the GPU node's)")
    print(f"wall time {time.time() - start_time:.0f} s")


if __name__ == "__main__":
    main(tyro.cli(Args))
