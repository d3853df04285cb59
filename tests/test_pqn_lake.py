"""pqn_lake.py end to end on CPU: the script runs as a subprocess with tiny flags, as a user would run it.

One two-phase Breakout run (module fixture) is checked for the Lake's content, frame accounting, metrics,
checkpoints (best.pt too), videos and the clone; a second run of the same seed is stopped by a real SIGTERM and
resumed, and must end bit-identical. The learning test trains on tests/synthetic_env.py.
"""

import functools
import glob
import json
import math
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import compare
from script_runs import SMALL_AGENTS, TINY_MINATAR, load, metrics, only_run_dir, read_video, run, start
import envs
import envs as envs_module
import pqn_lake
from lake import Lake

FRAME_SKIP = 4
TINY_ATARI = [
    "--env-id",
    "Breakout-v5",
    "--num-agents",
    "2",
    "--num-envs",
    "4",
    "--num-steps",
    "16",
    "--num-minibatches",
    "2",
    "--pond-steps",
    "32",
    "--agent-updates-per-phase",
    "3",
    "--total-frames",
    str(2 * 3 * 2 * 4 * 16 * FRAME_SKIP),
    "--big-pond-size",
    "500",
    "--big-pond-slice-steps",
    "16",
    "--big-replay-ratio",
    "0.5",
    "--big-batch-size",
    "64",  # 3 BigAgent updates a phase, as at the defaults (2, 256)
    "--big-target-network-frequency",
    "2",
    "--eval-episodes",
    "1",
    "--eval-every-updates",
    "2",
    "--max-episode-frames",
    "120",  # 30-step games: truncations, game overs and autoresets inside a rollout
    "--agent-epsilon-reset",
    "0.5",
    "--agent-epsilon-reset-decay-frames",
    "1000",
    "--lake-segment-mb",
    "1",  # 37-step segments: Pond drains cross segment boundaries (carries)
    "--collapse-probe-states",
    "200",  # 84x84 states through three networks: the default 2000 would double the run
]


run_script = functools.partial(run, "pqn_lake.py")
DUMP = "tests/dump_transitions.py"  # the script run with its agents' every step recorded


@pytest.fixture(scope="module")
def atari_run(tmp_path_factory) -> Path:
    """The run, its agents' every step recorded into <its runs folder>/../dumps (tests/dump_transitions.py)."""
    runs = tmp_path_factory.mktemp("atari") / "runs"
    run(DUMP, str(runs.parent / "dumps"), "pqn_lake.py", *TINY_ATARI, "--runs-dir", str(runs), "--capture-video")
    return only_run_dir(runs)


def dumps_of(run_dir: Path, agent: int, phase: int) -> dict:
    return dict(np.load(run_dir.parent.parent / "dumps" / f"agent{agent}_phase_{phase:04d}.npz"))


def test_two_phase_atari_run_logs_metrics_and_saves_checkpoints(atari_run):
    assert sorted(p.name for p in (atari_run / "checkpoints").iterdir()) == [
        "best.pt",
        "phase_0001.pt",
        "phase_0002.pt",
    ]
    rows = metrics(atari_run)
    assert all("global_frames" in r for r in rows)
    frames = [r["global_frames"] for r in rows]
    assert frames == sorted(frames) and frames[-1] == 2 * 3 * 2 * 4 * 16 * FRAME_SKIP
    keys = set().union(*rows)
    for key in [
        "charts/SPS",
        "charts/phase",
        "charts/replay_ratio",
        "eval/return",
        "big_agent/eval/return",
        "agent0/eval/return",
        "agent1/eval/return",
        "agent0/losses/td_loss",
        "agent0/losses/q_values",
        "agent0/charts/epsilon",
        "big_agent/losses/td_loss",
        "agent0/charts/episodic_return",
        "charts/episodic_return",
        "charts/episodic_length",
    ]:
        assert key in keys, key
    evals = [r for r in rows if "eval/return" in r]
    assert [r["global_frames"] for r in evals] == [3 * 2 * 4 * 16 * FRAME_SKIP, 6 * 2 * 4 * 16 * FRAME_SKIP]
    # --big-replay-ratio: updates = ceil(ratio x the phase's new transitions / batch), and the achieved replay ratio
    # = gradient-sampled transitions / new transitions
    config, fresh = json.loads((atari_run / "config.json").read_text()), 3 * 2 * 4 * 16
    updates = math.ceil(config["big_replay_ratio"] * fresh / config["big_batch_size"])
    assert updates == 3 and [r["big_agent/charts/updates"] for r in rows if "big_agent/charts/updates" in r] == [3] * 2
    ratios = [r["charts/replay_ratio"] for r in rows if "charts/replay_ratio" in r]
    assert ratios == [updates * config["big_batch_size"] / fresh] * 2
    ckpt = load(atari_run / "checkpoints" / "phase_0002.pt")
    assert ckpt["phase"] == 2 and ckpt["global_frames"] == frames[-1] and ckpt["run_name"] == atari_run.name
    assert ckpt["lake_transitions"] == Lake(atari_run / "lake", mode="r").num_transitions
    assert set(ckpt["rng"]) >= {"torch", "numpy", "python"} and "target_network" in ckpt["big_agent"]
    # config.json: every flag, and the identity compare.py groups runs by
    config = json.loads((atari_run / "config.json").read_text())
    assert config["script"] == "pqn_lake" and config["run_name"] == atari_run.name
    assert config["env_id"] == "Breakout-v5" and config["seed"] == 1 and config["num_agents"] == 2
    assert set(vars(pqn_lake.Args())) <= set(config)
    assert compare.read_run_identity(str(atari_run)) == ("Breakout-v5", "pqn_lake", 1, "pqn_lake")


def check_clone_metrics(rows: list, num_agents: int) -> None:
    """distill/* and recovery/* equal what the agents' evaluation lines of metrics.jsonl give: the agents' last
    evaluation of a phase is the level before the clone; the one right after it (frames_since_clone 0, logged with
    the next phase) is the BigAgent's; recovery = frames since the clone of the first evaluation at that level."""
    names = [f"agent{k}" for k in range(num_agents)]
    evals = [r for r in rows if "eval/agents_mean" in r]
    for r in evals:
        assert r["eval/agents_mean"] == pytest.approx(np.mean([r[f"{n}/eval/return"] for n in names]))
    big_rows = [r for r in rows if "distill/big_minus_agents" in r]
    recovery_rows = {r["charts/phase"]: r for r in rows if "recovery/frames" in r}
    assert len(big_rows) >= 2 and sorted(recovery_rows) == list(range(2, len(big_rows) + 1))
    for big in big_rows:
        phase = big["charts/phase"]
        before = [r for r in evals if r["charts/phase"] == phase][-1]
        after = [r for r in evals if r["charts/phase"] == phase + 1][0]
        assert (
            after["eval/frames_since_clone"] == 0
            and after["global_frames"] == big["global_frames"] == before["global_frames"]
        )
        assert big["eval/return"] == big["big_agent/eval/return"] == pytest.approx(after["eval/agents_mean"])
        level = before["eval/agents_mean"]
        assert big["distill/big_minus_agents"] == pytest.approx(big["eval/return"] - level)
        assert big.get("distill/big_over_agents") == (pytest.approx(big["eval/return"] / level) if level > 0 else None)
        if phase + 1 in recovery_rows:
            recovery = recovery_rows[phase + 1]
            next_phase = [r for r in evals if r["charts/phase"] == phase + 1]
            frames = []
            for n in names:
                regained = [
                    r["eval/frames_since_clone"]
                    for r in next_phase
                    if r[f"{n}/eval/return"] >= before[f"{n}/eval/return"]
                ]
                frames.append(regained[0] if regained else recovery["global_frames"] - big["global_frames"])
                assert recovery[f"{n}/recovery/frames"] == frames[-1]
            assert recovery["recovery/frames"] == pytest.approx(np.mean(frames))


def test_evaluations_at_the_set_updates_and_after_each_clone(atari_run):
    """--eval-every-updates 2 in phases of 3 updates: after updates 2 and 3 (the last) of each phase, and right
    after each clone; the metrics of the clones equal values recomputed from metrics.jsonl."""
    rows = metrics(atari_run)
    F = 2 * 4 * 16 * FRAME_SKIP  # frames per agent update
    evals = [
        (r["global_frames"], r["eval/frames_since_clone"], r["charts/phase"]) for r in rows if "eval/agents_mean" in r
    ]
    assert evals == [
        (2 * F, 2 * F, 1),
        (3 * F, 3 * F, 1),
        (3 * F, 0, 2),
        (5 * F, 2 * F, 2),
        (6 * F, 3 * F, 2),
        (6 * F, 0, 3),
    ]
    check_clone_metrics(rows, num_agents=2)
    timing = [r for r in rows if "time/eval_seconds" in r]
    assert len(timing) == 2 and all(0 < r["time/eval_fraction"] < 1 for r in timing)


def best_evaluation(rows: list, num_agents: int) -> tuple:
    """(return, global_frames, network) of the first evaluation in `rows` that reached the best return: the best agent
    of each evaluation of the agents, and the BigAgent's (all its games) for the one right after a clone."""
    found = []
    for r in rows:
        if "big_agent/eval/return" in r:
            found.append((r["big_agent/eval/return"], r["global_frames"], "big_agent"))
        elif "eval/agents_mean" in r and r["eval/frames_since_clone"] > 0:  # not the after-clone one: the BigAgent's
            k = int(np.argmax([r[f"agent{k}/eval/return"] for k in range(num_agents)]))
            found.append((r[f"agent{k}/eval/return"], r["global_frames"], f"agent{k}"))
    top = max(f[0] for f in found)
    return next(f for f in found if f[0] == top)


def test_best_checkpoint_holds_the_best_evaluation_so_far(atari_run):
    """checkpoints/best.pt: the network of the best evaluation in metrics.jsonl, replaced only by a strictly better one
    (the first evaluation reaching the best return); each phase checkpoint carries the best return so far (--resume)."""
    rows = metrics(atari_run)
    best = load(atari_run / "checkpoints" / "best.pt")
    assert (best["best"]["return"], best["best"]["global_frames"], best["best"]["network"]) == best_evaluation(rows, 2)
    for p in (1, 2):
        ckpt = load(atari_run / "checkpoints" / f"phase_{p:04d}.pt")
        so_far = [r for r in rows if r["global_frames"] <= ckpt["global_frames"]]
        assert ckpt["best_return"] == best_evaluation(so_far, 2)[0]
    # one network as the BigAgent and as every agent, as in a phase checkpoint
    assert len(best["agents"]) == 2 and best["args"]["env_id"] == "Breakout-v5"
    network = best["big_agent"]["q_network"]
    assert all(torch.equal(a["q_network"][n], network[n]) for a in best["agents"] for n in network)
    if best["best"]["network"] == "big_agent":  # right after a clone: the BigAgent of that phase's checkpoint
        phase = load(atari_run / "checkpoints" / f"phase_{best['phase']:04d}.pt")["big_agent"]["q_network"]
        assert all(torch.equal(phase[n], network[n]) for n in phase)


def test_videos_film_the_big_agents_first_game_in_colour(atari_run):
    """--capture-video: after each clone an H.264 MP4 of the BigAgent's first evaluation game (agent0's, the
    agents being its copies), one frame per step, in colour at Breakout's native 210x160."""
    rows = metrics(atari_run)
    for p in (1, 2):
        after_clone = next(r for r in rows if r.get("charts/phase") == p + 1 and r.get("eval/frames_since_clone") == 0)
        video = read_video(atari_run / "videos" / f"phase_{p:04d}_big_agent.mp4")
        assert video.shape == (after_clone["agent0/eval/length"], 210, 160, 3)  # --eval-episodes 1: agent0's one game
        assert (np.abs(video[..., 0].astype(int) - video[..., 2]) > 50).any()  # colour: Breakout's red bricks


def test_camera_plays_the_filmed_game():
    """The camera env (210x160 RGB, the screen ale-py's vector env does not give), reset with env 0's seed and sent
    env 0's actions, plays env 0's very game: same rewards, flags, lives and ALE frame counts to the game's end
    (sticky actions, noops and the FIRE after a life loss included)."""
    args = pqn_lake.Args(env_id="Breakout-v5", repeat_action_probability=0.25)
    envs, camera = pqn_lake.make_envs(args, 3), envs_module.make_camera(args)
    assert camera.single_observation_space.shape == (1, 210, 160, 3)
    envs.reset(seed=11)
    camera.reset(seed=11)
    rng, lives_lost = np.random.default_rng(0), 0
    while True:
        actions = rng.integers(envs.single_action_space.n, size=3)
        _, rewards, terminated, truncated, info = envs.step(actions)
        _, c_rewards, c_terminated, c_truncated, c_info = camera.step(actions[:1])
        assert (rewards[0], terminated[0], truncated[0]) == (c_rewards[0], c_terminated[0], c_truncated[0])
        assert (info["lives"][0], info["frame_number"][0]) == (c_info["lives"][0], c_info["frame_number"][0])
        lives_lost += bool(terminated[0])
        if truncated[0] or (terminated[0] and info["lives"][0] == 0):
            break
    envs.close()
    camera.close()
    assert lives_lost == 5


def test_lake_holds_what_the_agents_saw(atari_run):
    """Every transition poured into the Ponds is in the Lake, frame for frame, in order; nothing else is."""
    lake = Lake(atari_run / "lake", mode="r")
    assert set(lake.stats()["groups"]) == {"agent0", "agent1"}
    for k in range(2):
        dumps = [dumps_of(atari_run, k, p) for p in (1, 2)]
        assert all(d["episode_start"][0].all() for d in dumps)  # every phase starts with reset envs
        for n in range(4):
            expected = {key: [] for key in ("obs", "next_obs", "actions", "rewards", "terminated", "truncated")}
            for d in dumps:
                for t in range(len(d["actions"]) - 1):
                    if d["episode_start"][t + 1, n]:  # an autoreset step (final obs -> reset obs) is no transition
                        continue
                    expected["obs"].append(d["obs"][t, n])
                    expected["next_obs"].append(d["obs"][t + 1, n])
                    for key in ("actions", "rewards", "terminated", "truncated"):
                        expected[key].append(d[key][t, n])
            stream = lake.read_stream(f"agent{k}", n)
            assert len(stream.actions) == len(expected["actions"]) > 0
            for key, values in expected.items():
                assert np.array_equal(np.asarray(getattr(stream, key)), np.stack(values)), (k, n, key)
    # the run saw life losses or game ends, so the masking paths ran
    assert any(dumps_of(atari_run, 0, p)["truncated"].any() for p in (1, 2))


def test_frame_accounting_matches_ale_frame_counters(atari_run):
    """global_frames = frame_skip x env steps. ALE's info["frame_number"] moves by frame_skip on every step
    except: a step that ends a game emulates k <= frame_skip frames (the game is over after frame k), and
    the autoreset step after it emulates the reset's noop/FIRE frames. So, exactly,
    ALE frames = global_frames - sum over game ends of (frame_skip - k)
               - sum over autoresets of (frame_skip - reset frames)."""
    steps, ale_frames, predicted = 0, 0, 0
    saw = {"normal": 0, "game_over": 0, "autoreset": 0, "forced_fire": 0}
    for k in range(2):
        for p in (1, 2):
            d = dumps_of(atari_run, k, p)
            T, N = d["actions"].shape
            fn = np.concatenate([d["reset_frame_number"][None], d["frame_number"]])
            delta = np.diff(fn, axis=0)  # ALE frames emulated by each step
            game_over = d["truncated"] | (d["terminated"] & (d["lives"] == 0))
            autoreset = np.zeros_like(game_over)
            autoreset[1:] = game_over[:-1]
            normal = ~game_over & ~autoreset
            forced_fire = np.zeros_like(game_over)  # the FIRE after a life loss: an ordinary step
            forced_fire[1:] = (d["terminated"] & ~game_over)[:-1]
            saw["forced_fire"] += int((forced_fire & normal).sum())
            assert (delta[normal] == FRAME_SKIP).all()
            assert ((1 <= delta[game_over]) & (delta[game_over] <= FRAME_SKIP)).all()
            assert (delta[autoreset] == d["episode_frame_number"][autoreset]).all()  # the reset's own frames
            assert ((1 <= delta[autoreset]) & (delta[autoreset] <= 30 + 2)).all()  # noop_max + FIRE
            steps += T * N
            ale_frames += int(delta.sum())
            predicted += (
                FRAME_SKIP * T * N
                - int((FRAME_SKIP - delta[game_over]).sum())
                - int((FRAME_SKIP - delta[autoreset]).sum())
            )
            saw["normal"] += int(normal.sum())
            saw["game_over"] += int(game_over.sum())
            saw["autoreset"] += int(autoreset.sum())
    global_frames = metrics(atari_run)[-1]["global_frames"]
    assert global_frames == FRAME_SKIP * steps
    assert ale_frames == predicted
    assert min(saw.values()) > 0, saw


def test_clone_copies_the_big_agent_and_resets_epsilon(atari_run):
    for p in (1, 2):
        ckpt = load(atari_run / "checkpoints" / f"phase_{p:04d}.pt")
        big = ckpt["big_agent"]["q_network"]
        for agent in ckpt["agents"]:
            assert all(torch.equal(agent["q_network"][name], big[name]) for name in big)
            assert agent["optimizer"]["state"] == {}  # a fresh RAdam
            schedule = agent["epsilon_schedule"]
            assert schedule["frames_at_reset"] == agent["frames"]
            assert pqn_lake.epsilon(schedule, agent["frames"]) == 0.5  # --agent-epsilon-reset
            assert schedule["decay_frames"] == 1000
    # the agents learned between the clones: phase 2's BigAgent differs from phase 1's
    one, two = (load(atari_run / "checkpoints" / f"phase_{p:04d}.pt")["big_agent"]["q_network"] for p in (1, 2))
    assert not all(torch.equal(one[n], two[n]) for n in one)


def sigterm_at(prefix: str, *flags: str) -> tuple:
    """pqn_lake.py with `flags`, SIGTERM when a line of its output starts with `prefix`: (its output, exit code)."""
    proc = start("pqn_lake.py", *flags)
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith(prefix):
            proc.send_signal(signal.SIGTERM)
            break
    output += proc.stdout.readlines()
    return output, proc.wait(timeout=300)


def test_resume_after_sigterm_ends_identical_to_uninterrupted_run(atari_run, tmp_path):
    """SIGTERM during the phase's last update: no mid-phase stop there (the phase is nearly done); the agents' part
    ends, its end is checkpointed as the BigAgent's part begins, and the BigAgent stops after its first update of the
    phase's 3. --resume goes on from that checkpoint (the BigPond drawn again, the same draws): the run ends identical
    to the uninterrupted one, metrics line for line."""
    runs = tmp_path / "runs"
    # past the last mid-phase stop point: it stops in the BigAgent's part
    output, code = sigterm_at("phase 1 update 3/3", *TINY_ATARI, "--runs-dir", str(runs))
    assert code == 0, "".join(output)
    run_dir = only_run_dir(runs)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["best.pt", "phase_0001_update_000003.pt"], "".join(output)
    assert "got SIGTERM" in "".join(output) and "stopping in phase 1's BigAgent part" in "".join(output)
    assert load(run_dir / "checkpoints" / checkpoints[1])["big_agent"]["updates"] == 0  # the part's start
    config = (run_dir / "config.json").read_text()
    run_script("--resume", str(run_dir))
    assert (run_dir / "config.json").read_text() == config  # the resume keeps the run's config.json

    a, b = (load(r / "checkpoints" / "phase_0002.pt") for r in (atari_run, run_dir))
    assert a["global_frames"] == b["global_frames"] and a["lake_transitions"] == b["lake_transitions"]
    for sa, sb in zip(a["agents"] + [a["big_agent"]], b["agents"] + [b["big_agent"]]):
        for net in ("q_network", "target_network"):
            if net in sa:
                assert all(torch.equal(sa[net][n], sb[net][n]) for n in sa[net]), net
        assert sa.get("epsilon_schedule") == sb.get("epsilon_schedule") and sa.get("frames") == sb.get("frames")
    big_a, big_b = a["big_agent"]["optimizer"]["state"], b["big_agent"]["optimizer"]["state"]
    assert all(torch.equal(big_a[i]["exp_avg"], big_b[i]["exp_avg"]) for i in big_a)

    # same metrics, line for line (timings aside), one metrics.jsonl continued across the stop
    def strip(rows):
        return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]

    assert strip(metrics(atari_run)) == strip(metrics(run_dir))
    # the best evaluation so far came through the stop: best.pt is the uninterrupted run's
    best_a, best_b = (load(r / "checkpoints" / "best.pt") for r in (atari_run, run_dir))
    assert best_a["best"] == best_b["best"]
    net_a, net_b = best_a["big_agent"]["q_network"], best_b["big_agent"]["q_network"]
    assert all(torch.equal(net_a[n], net_b[n]) for n in net_a)


def test_sigterm_mid_phase_checkpoints_after_the_update_and_resumes(atari_run, tmp_path):
    """slurm's lead time is shorter than a phase: a stop request during the agents' updates checkpoints after
    the current update; --resume finishes the phase and the run (envs reset there: a continuation, not a
    bit-exact replay), and the finished phase's checkpoint supersedes the mid-phase one."""
    runs = tmp_path / "runs"
    flags = TINY_ATARI
    output, code = sigterm_at("phase 1 update 1/3", *flags, "--runs-dir", str(runs))
    assert code == 0, "".join(output)
    run_dir = only_run_dir(runs)
    (partial,) = (run_dir / "checkpoints").glob("phase_*.pt")
    assert partial.name in ("phase_0001_update_000001.pt", "phase_0001_update_000002.pt"), "".join(output)
    state = load(partial)
    update = state["update"]
    frames_per_update = 2 * 4 * 16 * FRAME_SKIP
    assert state["phase"] == 1 and state["global_frames"] == update * frames_per_update
    with Lake(run_dir / "lake", mode="r") as lake:  # every step of the updates done is in the Lake, committed
        assert lake.num_transitions == state["lake_transitions"] >= update * 2 * 4 * 16 - 2 * 4
    # --resume takes the best return so far from the checkpoint: given one no evaluation can beat, best.pt stays as it
    # was (none if no evaluation came before the stop)
    best_path = run_dir / "checkpoints" / "best.pt"
    best_before = load(best_path)["best"] if best_path.exists() else None
    assert (best_before is not None) == (update == 2)  # --eval-every-updates 2
    torch.save({**state, "best_return": 1e9}, partial)

    out = run_script("--resume", str(run_dir))
    assert f"phase 1: agents acting from {update * frames_per_update:,} frames" in out
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("phase_*.pt")) == ["phase_0001.pt", "phase_0002.pt"]
    assert (load(best_path)["best"] if best_path.exists() else None) == best_before
    final, reference = (
        load(run_dir / "checkpoints" / "phase_0002.pt"),
        load(atari_run / "checkpoints" / "phase_0002.pt"),
    )
    assert final["global_frames"] == reference["global_frames"]
    assert [a["frames"] for a in final["agents"]] == [a["frames"] for a in reference["agents"]]
    rows = [r for r in metrics(run_dir) if "charts/SPS" in r]
    assert [r["global_frames"] for r in rows] == [k * frames_per_update for k in range(1, 7)]  # each update once
    # the evaluations of the resumed run fall on the same updates, and the recovery of phase 1's clone is measured
    evals = [(r["global_frames"], r["eval/frames_since_clone"]) for r in metrics(run_dir) if "eval/agents_mean" in r]
    assert evals == [
        (e["global_frames"], e["eval/frames_since_clone"]) for e in metrics(atari_run) if "eval/agents_mean" in e
    ]


def test_checkpoints_keep_the_newest_after_a_mid_phase_stop(tmp_path):
    folder = tmp_path / "checkpoints"

    def saved(*names, keep):
        for name in names:
            pqn_lake.save_checkpoint(folder / name, {"name": name}, keep)
        return sorted(p.name for p in folder.glob("*.pt"))

    # a finished phase is newer than its partials, which it replaces, though its name sorts before theirs
    assert saved("phase_0001.pt", "phase_0002.pt", "phase_0003_update_000050.pt", "phase_0003.pt", keep=1) == [
        "phase_0003.pt"
    ]
    # `keep` counts finished phases; a mid-phase checkpoint stays until its phase ends
    assert saved("phase_0004_update_000007.pt", "phase_0004_update_000050.pt", keep=1) == [
        "phase_0003.pt",
        "phase_0004_update_000007.pt",
        "phase_0004_update_000050.pt",
    ]
    assert saved("phase_0004.pt", keep=2) == ["phase_0003.pt", "phase_0004.pt"]
    assert saved("phase_0005_update_000100.pt", keep=2) == [
        "phase_0003.pt",
        "phase_0004.pt",
        "phase_0005_update_000100.pt",
    ]
    # killed after the phase's checkpoint was in place, before its partials were deleted: resume from the phase
    pqn_lake.save_checkpoint(folder / "phase_0005.pt", {"name": "phase_0005.pt"}, 0)
    torch.save({"name": "stale"}, folder / "phase_0005_update_000300.pt")
    # files that are not checkpoints (a user's copy, an odd name) are neither resumed from nor pruned
    for stray in ("best.pt", "phase_0002.backup.pt", "phase_0002_0001.pt", "phase_9999_update_.pt"):
        torch.save({"name": "stray"}, folder / stray)
    assert pqn_lake.latest_checkpoint(tmp_path).name == "phase_0005.pt"
    assert torch.load(pqn_lake.latest_checkpoint(tmp_path))["name"] == "phase_0005.pt"
    # the next finished phase also removes the partials a kill left behind
    assert saved("phase_0006.pt", keep=2) == [
        "best.pt",
        "phase_0002.backup.pt",
        "phase_0002_0001.pt",
        "phase_0005.pt",
        "phase_0006.pt",
        "phase_9999_update_.pt",
    ]


def test_write_video_round_trip(tmp_path):
    """PyAV decodes the MP4 back: one frame per step, grayscale as RGB, odd sizes padded to even (yuv420p), the
    picture kept up to the codec's loss."""
    bars = np.zeros((6, 36, 40), np.uint8)  # a bar moving across, as PondGlyph's
    for t in range(6):
        bars[t, :, 6 * t : 6 * t + 6] = 255
    envs.write_video(tmp_path / "gray.mp4", list(bars))
    video = read_video(tmp_path / "gray.mp4")
    assert video.shape == (6, 36, 40, 3) and np.abs(video.astype(int) - bars[..., None]).mean() < 2
    red = np.full((3, 21, 25, 3), (200, 72, 72), np.uint8)
    envs.write_video(tmp_path / "odd.mp4", red)
    video = read_video(tmp_path / "odd.mp4")
    assert video.shape == (3, 22, 26, 3) and np.abs(video[:, 8, 8].astype(int) - red[:, 8, 8]).max() <= 3


def test_q_lambda_returns_stop_at_episode_ends():
    g, lam = 0.9, 0.5
    r = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    v = torch.tensor([[10.0], [20.0], [30.0], [40.0]])  # V(s_{t+1})
    zero = torch.zeros(4, 1)
    lambdas = torch.full((4, 1), lam)
    lambdas[-1] = 0  # the rollout ends
    # no episode end: plain recursive Q(λ)
    out = pqn_lake.q_lambda_returns(r, zero, v, lambdas, g)
    expect3 = 4 + g * 40
    expect2 = 3 + g * ((1 - lam) * 30 + lam * expect3)
    assert torch.allclose(out[3, 0], torch.tensor(expect3)) and torch.allclose(out[2, 0], torch.tensor(expect2))
    # step 1 terminates (life loss): its return is its reward; step 0 may not look past it with λ
    term = zero.clone()
    term[1] = 1
    out = pqn_lake.q_lambda_returns(r, term, v, lambdas, g)
    assert out[1, 0] == 2 and torch.allclose(out[0, 0], torch.tensor(1 + g * ((1 - lam) * 10 + lam * 2)))
    # step 1 is truncated (a game over without terminal): λ_1 = 0 cuts the chain, V(final obs) bootstraps
    cut = lambdas.clone()
    cut[1] = 0
    out = pqn_lake.q_lambda_returns(r, zero, v, cut, g)
    assert torch.allclose(out[1, 0], torch.tensor(2 + g * 20))


def test_env_ids():
    assert envs_module.atari_game("Breakout-v5") == "breakout"
    assert envs_module.atari_game("MsPacman-v5") == "ms_pacman"
    assert envs_module.atari_game("UpNDown-v5") == "up_n_down"
    assert envs_module.atari_game("CartPole-v1") is None
    envs.check_env_id("Gravitar-v5")
    envs.check_env_id("tests.synthetic_env:PondGlyph-v0")
    with pytest.raises(ValueError, match="--env-id 'Breakot-v5'.*Breakout-v5"):
        envs.check_env_id("Breakot-v5")


def test_learning_on_synthetic_env(tmp_path):
    """Each PQN agent and the BigAgent (default --big-replay-ratio, batch and learning rate) reach >= 90% of the
    optimal return (16) on PondGlyph, and in every phase the BigAgent reaches >= 0.9 x the agents' return just
    before the clone; best.pt is the best evaluation's network."""
    runs = tmp_path / "runs"
    # the probe draws from its own generator
    run_script(
        "--env-id",
        "tests.synthetic_env:PondGlyphSmall-v0",
        "--frame-height",
        "36",
        "--frame-width",
        "36",
        "--runs-dir",
        str(runs),
        "--num-agents",
        "4",
        *SMALL_AGENTS,
        "--agent-updates-per-phase",
        "12",
        "--total-frames",
        str(2 * 12 * 4 * 8 * 16),
        "--agent-epsilon-reset",
        "0.2",
        "--agent-epsilon-reset-decay-frames",
        "500",
        "--big-pond-size",
        "4000",
        "--big-target-network-frequency",
        "50",
        "--eval-episodes",
        "4",
        "--eval-every-updates",
        "4",
        "--eval-epsilon",
        "0",
        "--collapse-probe-states",
        "256",
    )
    run_dir = only_run_dir(runs)
    rows = metrics(run_dir)
    best = load(run_dir / "checkpoints" / "best.pt")["best"]  # here the returns vary (the Breakout run's are all 0)
    assert (best["return"], best["global_frames"], best["network"]) == best_evaluation(rows, 4)
    last_eval = [r for r in rows if "eval/agents_mean" in r][-1]
    assert last_eval["eval/frames_since_clone"] == 0  # after the last clone: the agents are the BigAgent
    for name in ["agent0", "agent1", "agent2", "agent3"]:
        assert last_eval[f"{name}/eval/return"] >= 0.9 * 16, last_eval
    distill = [r["distill/big_over_agents"] for r in rows if "distill/big_over_agents" in r]
    assert len(distill) == 2 and min(distill) >= 0.9, distill
    check_clone_metrics(rows, num_agents=4)


def test_rgb_and_other_flags(tmp_path):
    """Colour frames, --big-replay-ratio, videos during training and --track;
    an agent's stream in the Lake is what it saw."""
    runs = tmp_path / "runs"
    agent_frames = 2 * 2 * 8 * 2  # per phase: agents x envs x steps x updates
    # wandb offline (script_runs.ENV)
    run(
        DUMP,
        str(tmp_path / "dumps"),
        "pqn_lake.py",
        "--env-id",
        "tests.synthetic_env:PondGlyphSmallRGB-v0",
        "--rgb",
        "--frame-height",
        "36",
        "--frame-width",
        "36",
        "--runs-dir",
        str(runs),
        "--num-agents",
        "2",
        "--num-envs",
        "2",
        "--num-steps",
        "8",
        "--num-minibatches",
        "2",
        "--pond-steps",
        "8",
        "--agent-updates-per-phase",
        "2",
        "--total-frames",
        str(2 * agent_frames),
        "--big-replay-ratio",
        "0.5",
        "--big-batch-size",
        "8",
        "--big-pond-size",
        "100",
        "--big-pond-slice-steps",
        "8",
        "--capture-video",
        "--eval-episodes",
        "1",
        "--track",
    )
    run_dir = only_run_dir(runs)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "phase_0001.pt", "phase_0002.pt"]
    ckpt = load(run_dir / "checkpoints" / "phase_0002.pt")
    assert ckpt["global_frames"] == 2 * agent_frames == metrics(run_dir)[-1]["global_frames"]
    for p in (1, 2):  # the observations themselves for a gymnasium id; 16-step games
        assert read_video(run_dir / "videos" / f"phase_{p:04d}_big_agent.mp4").shape == (16, 36, 36, 3)
    # --track: the videos went to the (offline) wandb run too, as media/video
    videos = run_dir / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "**" / "*.mp4"
    assert len(glob.glob(str(videos), recursive=True)) == 2
    # updates = ceil(ratio x transitions new to the BigPond / batch) = ceil(0.5 x 64 / 8) a phase
    assert [r["charts/replay_ratio"] for r in metrics(run_dir) if "charts/replay_ratio" in r] == [4 * 8 / 64] * 2
    lake = Lake(run_dir / "lake", mode="r")
    assert lake.frame_shape == (36, 36, 3) and set(lake.stats()["groups"]) == {"agent0", "agent1"}
    dumps = [dumps_of(run_dir, 0, p) for p in (1, 2)]
    stream = lake.read_stream("agent0", 0)
    expected = [d["obs"][t, 0] for d in dumps for t in range(len(d["actions"]) - 1) if not d["episode_start"][t + 1, 0]]
    assert np.array_equal(stream.obs, np.stack(expected))


def test_sigterm_in_the_last_phases_bigagent_part_resumes_to_the_uninterrupted_end(tmp_path):
    """The run's frames are spent in phase 2's agents' part; a SIGTERM then stops the BigAgent's part (150 updates)
    at once: the run exits 0 with the part's start checkpointed, and --resume, though no frame is left to spend,
    makes that phase's BigAgent and clone and ends as the uninterrupted run (MinAtar, the same metrics)."""
    flags = [
        *TINY_MINATAR,
        "--num-agents",
        "2",
        "--big-replay-ratio",
        "0",
        "--big-agent-updates-per-phase",
        "150",
        "--total-frames",
        str(2 * 8 * 16 * 4 * 2),
    ]
    run("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "whole"))
    output, code = sigterm_at("phase 2 update 4/4", *flags, "--runs-dir", str(tmp_path / "cut"))
    assert code == 0 and "stopping in phase 2's BigAgent part" in "".join(output), "".join(output)
    cut, whole = only_run_dir(tmp_path / "cut"), only_run_dir(tmp_path / "whole")
    assert sorted(p.name for p in (cut / "checkpoints").glob("phase_*.pt")) == [
        "phase_0001.pt",
        "phase_0002_update_000004.pt",
    ]
    run("pqn_lake.py", "--resume", str(cut))
    assert sorted(p.name for p in (cut / "checkpoints").glob("phase_*.pt")) == ["phase_0001.pt", "phase_0002.pt"]

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]

    assert strip(metrics(cut)) == strip(metrics(whole))
