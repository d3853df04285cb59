"""The mistakes a researcher makes by accident, against both scripts run as subprocesses: a bad flag, a wrong env
id, a locked or foreign Lake, Ctrl-C, --resume with other flags. Each gets a clear outcome: one line (no
traceback), exit code 2 for a bad flag (as argparse), no stray run folder, a resumable checkpoint after Ctrl-C.
The runs use tests/synthetic_env.py (seconds each); only the --num-envs 0 rows use a real Atari id (ale-py's
vector env segfaulted on it), and they stop before any env is built."""

import json
import signal
import subprocess
import sys

import pytest
import torch

import dqn_single_baseline as dqn
import lifecycle
import pqn_lake
from lake import Lake
from script_runs import ENV, ROOT, SMALL_AGENTS, load, metrics, only_run_dir, run, run_any, start

SCRIPTS = ["pqn_lake.py", "dqn_single_baseline.py"]
SYNTH = ["--env-id", "tests.synthetic_env:PondGlyphSmall-v0", "--frame-height", "36", "--frame-width", "36"]
# pqn_lake: 2 agents x 4 envs x 8 steps = 64 frames per update, 6 updates per phase (one print line each), 2 phases
PQN_SMALL = SYNTH + [
    "--num-agents",
    "2",
    "--num-envs",
    "4",
    "--num-steps",
    "8",
    "--num-minibatches",
    "2",
    "--pond-steps",
    "16",
    "--agent-updates-per-phase",
    "6",
    "--total-frames",
    str(2 * 6 * 64),
    "--big-pond-size",
    "200",
    "--big-pond-slice-steps",
    "8",
    "--big-agent-updates-per-phase",
    "3",
    "--eval-episodes",
    "1",
]
# dqn_single_baseline: 8 envs, 240-frame rounds (= evaluation periods), 3 rounds
DQN_SMALL = SYNTH + [
    "--num-envs",
    "8",
    "--total-frames",
    "720",
    "--learning-starts",
    "80",
    "--buffer-size",
    "960",
    "--eval-every-frames",
    "240",
    "--log-every-frames",
    "120",
    "--eval-episodes",
    "2",
]
SMALL = {"pqn_lake.py": PQN_SMALL, "dqn_single_baseline.py": DQN_SMALL}


def fails(script: str, *flags: str, code: int) -> str:
    """Run the script, assert it exits with `code` and says why in one stderr line, no traceback; returns that line."""
    proc = run_any(script, *flags)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"{script}: error: "), lines[0]
    return lines[0]


@pytest.mark.parametrize("script", SCRIPTS)
def test_num_envs_0_on_atari_is_one_line_exit_2_and_creates_nothing(script, tmp_path):
    """Was a segfault inside ale-py's vector env (exit 139), leaving a run folder with only config.json."""
    line = fails(script, "--env-id", "Breakout-v5", "--num-envs", "0", "--runs-dir", str(tmp_path / "runs"), code=2)
    assert line.endswith("error: --num-envs 0: must be >= 1"), line
    assert not (tmp_path / "runs").exists()


def check_fails(module, capsys, **flags) -> str:
    """module.check_args on SYNTH's Args with `flags`: asserts exit code 2 and one stderr line; returns it."""
    args = module.Args(**{"env_id": SYNTH[1], "frame_height": 36, "frame_width": 36, **flags})
    with pytest.raises(SystemExit) as exit_info:
        module.check_args(args)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("module", [pqn_lake, dqn], ids=["pqn_lake", "dqn_single_baseline"])
@pytest.mark.parametrize(
    "flags, says",
    [
        ({"total_frames": -5}, "--total-frames -5: must be >= 1"),  # was an empty run, exit 0
        ({"gamma": 1.5}, "--gamma 1.5: must be in [0, 1]"),
        ({"learning_rate": float("nan")}, "--learning-rate nan: must be > 0"),
        ({"seed": -1}, "--seed -1: must be >= 0"),
        ({"frame_height": 30}, "--frame-height 30: the Nature CNN needs 36 pixels at least"),
        ({"env_id": "Breakot-v5"}, "--env-id 'Breakot-v5' is neither an Atari game of ale-py"),  # was a traceback
        ({"env_id": "tests.synthetic_env:NoSuchEnv-v0"}, "--env-id 'tests.synthetic_env:NoSuchEnv-v0': "),
        ({"env_id": "CartPole-v1"}, "--env-id CartPole-v1 gives frames (4,) float32, the flags ask for uint8 (36, 36)"),
        (
            {"env_id": "MinAtar/Breakot-v1"},
            "--env-id 'MinAtar/Breakot-v1' is no MinAtar game: the ids are MinAtar/<Game>-v1 "
            "(minimal action set) or -v0 (all 6 actions) for Asterix, Breakout, Freeway, Seaquest, SpaceInvaders; "
            "close "
            "matches: ['MinAtar/Breakout-v1'",
        ),
        ({"env_id": "MinAtar/Breakout-v2"}, "--env-id 'MinAtar/Breakout-v2' is no MinAtar game"),
    ],
)
def test_bad_flag_is_one_line_naming_flag_value_and_rule(module, flags, says, capsys):
    assert says in check_fails(module, capsys, **flags)


@pytest.mark.parametrize(
    "module, flags, says",
    [
        (
            pqn_lake,
            {"num_envs": 8, "num_steps": 4, "num_minibatches": 5},
            "--num-minibatches 5: must divide --num-envs x --num-steps = 32",
        ),
        (pqn_lake, {"num_steps": 8, "pond_steps": 20}, "--pond-steps 20: must be a multiple of --num-steps (8)"),
        (
            dqn,
            {"num_envs": 8, "buffer_size": 40},
            "--buffer-size 40: must hold 2 x --stack-size + 2 = 10 steps per env",
        ),
    ],
    ids=["minibatches", "pond-steps", "buffer-size"],
)
def test_flags_that_must_fit_each_other(module, flags, says, capsys):
    assert says in check_fails(module, capsys, **flags)


def test_checks_hold_under_python_O(tmp_path):
    """--num-minibatches 5 was a bare assert, gone under python -O: the check now holds there too."""
    proc = subprocess.run(
        [
            sys.executable,
            "-O",
            "pqn_lake.py",
            *PQN_SMALL,
            "--num-minibatches",
            "5",
            "--runs-dir",
            str(tmp_path / "runs"),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "--num-minibatches 5: must divide" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_locked_lake_fails_in_one_line_and_leaves_no_run_folder(tmp_path):
    """A second run on a Lake another process writes: the Lake's LakeLockedError in one line, exit 1, and the run
    folder it had started is gone (compare.py never sees it)."""
    lake_path = tmp_path / "lake"
    with Lake(lake_path, frame_shape=(36, 36), stack_size=4, env_id=SYNTH[1]):  # holds the writer's lock
        line = fails(
            "pqn_lake.py", *PQN_SMALL, "--lake-path", str(lake_path), "--runs-dir", str(tmp_path / "runs"), code=1
        )
    assert str(lake_path) in line and "another process" in line, line
    assert list((tmp_path / "runs").iterdir()) == []


def test_bad_lake_path_fails_in_one_line_and_leaves_no_run_folder(tmp_path):
    """--lake-path at a file, and at a Lake made with another frame size: one line each, no run folder."""
    runs = tmp_path / "runs"
    (tmp_path / "file").write_text("not a Lake")
    line = fails("pqn_lake.py", *PQN_SMALL, "--lake-path", str(tmp_path / "file"), "--runs-dir", str(runs), code=1)
    assert "is not a Lake" in line, line
    with Lake(tmp_path / "lake84", frame_shape=(84, 84), stack_size=4, env_id=SYNTH[1]):
        pass
    line = fails("pqn_lake.py", *PQN_SMALL, "--lake-path", str(tmp_path / "lake84"), "--runs-dir", str(runs), code=1)
    assert "84" in line, line
    assert list(runs.iterdir()) == []


def stop_with_sigint(script: str, line_start: str, *flags: str) -> str:
    """Start the script, press Ctrl-C (SIGINT) once it prints a line starting with `line_start`; asserts exit 0."""
    proc = start(script, *flags)
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith(line_start):
            proc.send_signal(signal.SIGINT)
            break
    output += proc.stdout.readlines()
    assert proc.wait(timeout=300) == 0, "".join(output)
    return "".join(output)


def test_ctrl_c_checkpoints_pqn_lake_and_resume_extends_the_run(tmp_path):
    """Ctrl-C was a KeyboardInterrupt traceback and no checkpoint: now it checkpoints after the current update (as
    SIGTERM) and exits 0; --resume --total-frames continues the run past its first budget (one phase more).
    config.json records the device used (it said "cuda": true on a CPU run) and the flag --resume applied."""
    runs = tmp_path / "runs"
    output = stop_with_sigint("pqn_lake.py", "phase 1 update 1/6", *PQN_SMALL, "--runs-dir", str(runs))
    assert "got SIGINT: checkpointing and exiting after the current update" in output and "Traceback" not in output
    run_dir = only_run_dir(runs)
    (partial,) = (run_dir / "checkpoints").iterdir()
    state = load(partial)
    assert partial.name == f"phase_0001_update_{state['update']:06d}.pt" and 1 <= state["update"] < 6, output
    out = run("pqn_lake.py", "--resume", str(run_dir), "--total-frames", str(3 * 6 * 64))
    assert f"--resume applies --total-frames {3 * 6 * 64} (was {2 * 6 * 64})" in out, out
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt"] + [
        f"phase_000{p}.pt" for p in (1, 2, 3)
    ]
    assert metrics(run_dir)[-1]["global_frames"] == 3 * 6 * 64
    config = json.loads((run_dir / "config.json").read_text())
    assert config["device"] == "cpu" and config["cuda"] is False and config["total_frames"] == 3 * 6 * 64
    assert config["torch_version"] == torch.__version__ and config["device_count"] == 1 and config["device_name"]
    assert "resumed_on" not in config  # (resumed on the same software)


def test_a_gpu_run_on_a_torch_other_than_the_pinned_one_says_so():
    import lifecycle

    pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch=="))
    warning = lifecycle.pinned_torch_warning(torch.device("cuda"), "2.11.0+cu130")
    assert warning.startswith("warning: torch 2.11.0+cu130 is not requirements.txt's " + pin), warning
    assert lifecycle.pinned_torch_warning(torch.device("cuda"), pin.split("==")[1] + "+cu130") is None
    assert lifecycle.pinned_torch_warning(torch.device("cpu"), "2.11.0") is None  # (the CPU path is tested anywhere)


def test_ctrl_c_checkpoints_dqn_baseline_and_resume_extends_the_run(tmp_path):
    runs = tmp_path / "runs"
    output = stop_with_sigint("dqn_single_baseline.py", "round 1:", *DQN_SMALL, "--runs-dir", str(runs))
    assert "got SIGINT: checkpointing and exiting after this env step" in output and "Traceback" not in output
    run_dir = only_run_dir(runs)
    (ckpt,) = (run_dir / "checkpoints").glob("ckpt_*.pt")
    assert 0 < load(ckpt)["global_frames"] < 240, output  # mid-round
    out = run("dqn_single_baseline.py", "--resume", str(run_dir), "--total-frames", "960")
    assert "--resume applies --total-frames 960 (was 720)" in out, out
    assert load(sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1])["global_frames"] == 960
    config = json.loads((run_dir / "config.json").read_text())
    assert config["device"] == "cpu" and config["cuda"] is False and config["total_frames"] == 960


def test_second_ctrl_c_exits_at_once_and_the_lake_keeps_its_commits(tmp_path):
    """The second Ctrl-C does not wait for the update (100 epochs here: seconds) nor checkpoint: exit 130 at once;
    the Lake opens with what it had committed (--pond-steps 8: each update's steps)."""
    runs = tmp_path / "runs"
    proc = start("pqn_lake.py", *PQN_SMALL, "--update-epochs", "100", "--pond-steps", "8", "--runs-dir", str(runs))
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith("phase 1 update 2/6"):  # update 1's commit has had update 2's seconds; the third runs
            proc.send_signal(signal.SIGINT)
        if line.startswith("got SIGINT: checkpointing"):
            proc.send_signal(signal.SIGINT)
            break
    output += proc.stdout.readlines()
    assert proc.wait(timeout=300) == 130, "".join(output)
    assert "got SIGINT again: exiting now" in "".join(output)
    run_dir = only_run_dir(runs)
    assert not (run_dir / "checkpoints").exists()
    with Lake(run_dir / "lake", mode="r") as lake:
        assert lake.num_transitions > 0  # update 1's steps at least (a commit returns before the writer has written)


def resumed_args(module, args, checkpoint: dict):
    """The script's flags on --resume (the baseline's adds a rule for --exploration-fraction)."""
    if module is dqn:
        return dqn.resumed_args(args, checkpoint)
    return lifecycle.resumed_args(args, checkpoint, module.SESSION_FLAGS, module.RESUME_CAN_CHANGE)


@pytest.mark.parametrize("module", [pqn_lake, dqn], ids=["pqn_lake", "dqn_single_baseline"])
def test_resume_refuses_flags_it_cannot_apply(module, monkeypatch, capsys):
    """--resume used to drop every flag but the session flags silently: now the others are listed and refused."""
    monkeypatch.setattr(
        sys,
        "argv",
        ["script.py", "--resume", "runs/x", "--num-envs", "8", "--seed=3", "--no-cuda", "--total-frames", "768"],
    )
    args = module.Args(resume="runs/x", num_envs=8, seed=3, cuda=False, total_frames=768)
    with pytest.raises(SystemExit) as exit_info:
        resumed_args(module, args, {"args": vars(module.Args()), "global_frames": 384})
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--num-envs, --seed, --cuda cannot change mid-run (allowed: --total-frames," in line, line


@pytest.mark.parametrize("module", [pqn_lake, dqn], ids=["pqn_lake", "dqn_single_baseline"])
def test_resume_applies_total_frames_and_says_so(module, monkeypatch, capsys):
    saved = vars(module.Args(total_frames=1000))
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "script.py",
            "--resume",
            "runs/x",
            "--total-frames=4000",
            "--stop-after-" + ("phases" if module is pqn_lake else "checkpoints"),
            "1",
        ],
    )
    args = module.Args(resume="runs/x", total_frames=4000)
    resumed = resumed_args(module, args, {"args": saved, "global_frames": 500})
    assert resumed.total_frames == 4000 and resumed.resume == "runs/x"
    out = capsys.readouterr().out
    assert "--resume applies --total-frames 4000 (was 1000)" in out
    # ε decays over --exploration-fraction x --total-frames: the fraction follows, the decay keeps 100 frames
    if module is dqn:
        assert resumed.exploration_fraction * 4000 == pytest.approx(100) and "--exploration-fraction 0.025" in out
    monkeypatch.setattr(sys, "argv", ["script.py", "--resume", "runs/x", "--total-frames", "400"])
    with pytest.raises(SystemExit):  # below the frames the run has done
        resumed_args(module, module.Args(resume="runs/x", total_frames=400), {"args": saved, "global_frames": 500})


def test_readme_small_run_agents_explore_less_after_the_clone(tmp_path):
    """A small mixture run (4 agents x 8 envs x 32 steps, 3 updates a phase), on the synthetic env: the ε reset
    after the clone decays over a quarter of an agent's phase (a fixed 2.5M frames kept it at ~1 all phase 2)."""
    runs = tmp_path / "runs"
    run(
        "pqn_lake.py",
        *SYNTH,
        "--num-envs",
        "8",
        "--num-steps",
        "32",
        "--num-minibatches",
        "4",
        "--pond-steps",
        "64",
        "--agent-updates-per-phase",
        "3",
        "--total-frames",
        str(24576 // 4),
        "--big-pond-size",
        "10000",
        "--eval-episodes",
        "1",
        "--runs-dir",
        str(runs),
    )
    run_dir = only_run_dir(runs)
    assert json.loads((run_dir / "config.json").read_text())["agent_epsilon_reset_decay_frames"] == 3 * 8 * 32 // 4
    last = [r for r in metrics(run_dir) if r.get("charts/phase") == 2 and "agent0/charts/epsilon" in r][-1]
    assert all(last[f"agent{k}/charts/epsilon"] < 0.5 for k in range(4)), last


def test_full_disk_is_one_line_nonzero_and_keeps_what_was_written(tmp_path):
    """A file-size limit of 1.5 MB (RLIMIT_FSIZE; SIGXFSZ ignored, so writes fail with EFBIG as on a full disk): the
    first checkpoint (~2 MB here, made as phase 1's BigAgent part begins) cannot be written. The run exits 1 with one
    line naming the file, leaves no partial file, and best.pt and the Lake's committed transitions stay readable."""
    import resource

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_500_000, 1_500_000))

    runs = tmp_path / "runs"
    proc = subprocess.run(
        [
            sys.executable,
            "pqn_lake.py",
            "--env-id",
            "MinAtar/Breakout-v1",
            "--num-agents",
            "2",
            *SMALL_AGENTS,
            "--agent-updates-per-phase",
            "4",
            "--big-pond-size",
            "1000",
            "--eval-episodes",
            "1",
            "--lake-segment-mb",
            "1",
            "--runs-dir",
            str(runs),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    run_dir = only_run_dir(runs)
    ckpt = run_dir / "checkpoints" / "phase_0001_update_000004.pt.tmp"
    assert lines[0] == (
        f"pqn_lake.py: error: disk full writing {ckpt} (File too "
        "large): the last checkpoint and what the Lake committed are intact; free some space, then --resume"
    )
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt"]
    assert load(run_dir / "checkpoints" / "best.pt")["best"]["global_frames"] > 0
    with Lake(run_dir / "lake", mode="r") as lake:
        assert lake.num_transitions == 2 * 8 * 16 * 4  # every step of phase 1, committed before the checkpoint


def test_a_checkpoint_an_older_script_wrote_is_refused_in_one_line_naming_what_it_lacks(tmp_path):
    """A checkpoint without "part" and "levels" (what scripts before this loop's rewrite wrote, and before 2e3d8ac):
    --resume refuses it in one line, exit 2, naming the fields; nothing is written."""
    runs = tmp_path / "runs"
    run("pqn_lake.py", *PQN_SMALL, "--runs-dir", str(runs), "--stop-after-phases", "1")
    run_dir = only_run_dir(runs)
    path = run_dir / "checkpoints" / "phase_0001.pt"
    checkpoint = load(path)
    del checkpoint["part"], checkpoint["levels"]
    torch.save(checkpoint, path)
    before = (run_dir / "metrics.jsonl").read_text()
    line = fails("pqn_lake.py", "--resume", str(run_dir), code=2)
    assert "phase_0001.pt has no 'part', 'levels'" in line, line
    assert (run_dir / "metrics.jsonl").read_text() == before
