"""MinAtar in both scripts: the vector env, the Lake round trip of its grids, PQN's MinAtar network, the family
defaults, the video palette, a seeded learning run against random play, and a bit-exact resume."""

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import dqn_single_baseline as dqn
import pqn_lake
import envs
import networks
from envs import MINATAR_GAMES, MinAtarVectorEnv
from lake import Lake
from script_runs import ENV, SMALL_AGENTS, load, metrics, only_run_dir, read_video, run, run_any, run_together

GAMES = {"Asterix": 4, "Breakout": 4, "Freeway": 7, "Seaquest": 10, "SpaceInvaders": 6}  # game: channels
TINY_MIXTURE = [
    "--env-id",
    "MinAtar/Breakout-v1",
    "--num-agents",
    "2",
    *SMALL_AGENTS,
    "--agent-updates-per-phase",
    "4",
    "--total-frames",
    str(2 * 2 * 8 * 16 * 4),
    "--big-pond-size",
    "2000",
    "--big-pond-slice-steps",
    "16",
    "--eval-episodes",
    "2",
    "--eval-every-updates",
    "2",
]


def random_steps(envs, steps: int, seed: int = 0):
    """Step `envs` with uniform random actions; returns the Pond-like arrays (obs the actions were taken on)."""
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    episode_start, ended = np.ones(envs.num_envs, bool), np.zeros(envs.num_envs, bool)
    out = {k: [] for k in ("obs", "actions", "rewards", "terminated", "truncated", "episode_start")}
    for _ in range(steps):
        actions = rng.integers(envs.single_action_space.n, size=envs.num_envs)
        next_obs, rewards, terminated, truncated, _ = envs.step(actions)
        for key, value in (
            ("obs", obs),
            ("actions", actions),
            ("rewards", rewards),
            ("terminated", terminated),
            ("truncated", truncated),
            ("episode_start", episode_start),
        ):
            out[key].append(value)
        # next-step autoreset: a step after a game's end returns the next game's reset obs
        episode_start, ended, obs = ended, terminated | truncated, next_obs
    return {k: np.stack(v) for k, v in out.items()}


@pytest.mark.parametrize("stack_size", [1, 2])
def test_minatar_stream_through_the_lake_is_bit_exact(tmp_path, stack_size):
    """Every transition of a MinAtar stream (Space Invaders' 6 channels, game ends and truncations inside) comes
    back from the Lake bit for bit: obs, next obs, actions, rewards, flags."""
    envs = MinAtarVectorEnv("space_invaders", 3, stack_size, True, 0.1, max_steps=40)
    steps = random_steps(envs, 300)
    assert steps["terminated"].any() and steps["truncated"].any() and steps["rewards"].any()
    with Lake(
        tmp_path / "lake", frame_shape=(10, 10, 6), stack_size=stack_size, env_id="MinAtar/SpaceInvaders-v1"
    ) as lake:
        lake.append(
            "agent0",
            steps["obs"],
            steps["actions"],
            steps["rewards"],
            steps["terminated"],
            steps["truncated"],
            steps["episode_start"],
        )
        lake.commit(wait=True)
    lake = Lake(tmp_path / "lake", mode="r")
    for n in range(3):
        keep = [t for t in range(299) if not steps["episode_start"][t + 1, n]]  # autoreset steps are no transition
        stream = lake.read_stream("agent0", n)
        assert np.array_equal(stream.obs, steps["obs"][keep, n])
        assert np.array_equal(stream.next_obs, steps["obs"][[t + 1 for t in keep], n])
        for key in ("actions", "rewards", "terminated", "truncated"):
            assert np.array_equal(np.asarray(getattr(stream, key)), steps[key][keep, n]), key


def test_minatar_vector_env_seeds_stacks_and_autoresets():
    envs = MinAtarVectorEnv("breakout", 4, 2, True, 0.1, max_steps=25)
    assert envs.single_action_space.n == 3 and envs.single_observation_space.shape == (2, 10, 10, 4)
    first = random_steps(envs, 120, seed=7)
    again = random_steps(MinAtarVectorEnv("breakout", 4, 2, True, 0.1, max_steps=25), 120, seed=7)
    assert all(np.array_equal(first[k], again[k]) for k in first)  # a fresh process' envs play the same games
    assert np.array_equal(random_steps(envs, 120, seed=7)["obs"], first["obs"])  # a reset forgets the sticky action
    obs, ends = first["obs"], first["terminated"] | first["truncated"]
    assert first["truncated"].any() and not (first["truncated"] & first["terminated"]).any()
    for t, n in zip(*np.nonzero(ends[:-2])):  # the next step is the reset: reward 0, stack zeros then the reset grid
        assert first["rewards"][t + 1, n] == 0 and first["episode_start"][t + 2, n]
        assert not obs[t + 2, n, 0].any() and obs[t + 2, n, 1].any()
    stacked = ~first["episode_start"][1:]  # within a game the older frame is the previous step's newest
    assert np.array_equal(obs[1:, :, 0][stacked], obs[:-1, :, 1][stacked])


@pytest.mark.parametrize("game", list(GAMES))
def test_minatar_network_shapes_and_parameter_count(game):
    """PQN's MinAtar network: conv 16 3x3 (valid) -> 8x8x16, LayerNorm over channels, dense 128 + LayerNorm, head."""
    args = pqn_lake.Args(env_id=f"MinAtar/{game}-v0")
    C = GAMES[game]
    assert pqn_lake.frame_shape(args) == (10, 10, C) and args.stack_size == 1
    network = pqn_lake.make_q_network(args, 6, torch.device("cpu"))
    assert isinstance(network, pqn_lake.MinAtarQNetwork)
    count = (16 * 9 * C + 16) + 2 * 16 + (16 * 8 * 8 * 128 + 128) + 2 * 128 + (128 * 6 + 6)
    assert sum(p.numel() for p in network.parameters()) == count
    assert network(torch.zeros((5, 1, 10, 10, C), dtype=torch.uint8)).shape == (5, 6)
    stacked = pqn_lake.make_q_network(pqn_lake.Args(env_id=f"MinAtar/{game}-v0", stack_size=2), 6, torch.device("cpu"))
    assert stacked(torch.zeros((5, 2, 10, 10, C), dtype=torch.uint8)).shape == (5, 6)


@pytest.mark.parametrize(
    "flags",
    [{"env_id": "MinAtar/Asterix-v1"}, {"env_id": "Breakout-v5"}, {"env_id": "Breakout-v5", "rgb": True}],
    ids=["minatar", "atari", "atari-rgb"],
)
def test_the_baseline_learns_with_the_loops_network(flags):
    """networks.py (the baseline's) and pqn_lake.py's own copy: from the same seed the same weights, on the same
    observations the same Q-values, bit for bit; and the baseline makes networks.py's."""
    args, device = pqn_lake.Args(**flags), torch.device("cpu")
    made = []
    for make in (pqn_lake.make_q_network, networks.make_q_network, dqn.make_q_network):
        torch.manual_seed(0)
        made.append(make(args, 5, device))
    states = [m.state_dict() for m in made]
    assert all(s.keys() == states[0].keys() and all(torch.equal(s[k], states[0][k]) for k in s) for s in states)
    obs = torch.randint(
        0, 256, (3, args.stack_size, *pqn_lake.frame_shape(args)), generator=torch.Generator().manual_seed(1)
    )
    q_values = [m(obs.to(torch.uint8)) for m in made]
    assert all(torch.equal(q, q_values[0]) for q in q_values) and q_values[0].std() > 0


@pytest.mark.parametrize("module", [pqn_lake, dqn], ids=["pqn_lake", "dqn_single_baseline"])
def test_family_defaults_a_given_flag_wins_and_help_names_both(module):
    for name, (atari, minatar) in module.FAMILY_DEFAULTS.items():
        assert getattr(module.Args(), name) == atari
        assert getattr(module.Args(env_id="MinAtar/Breakout-v1"), name) == minatar
        given = module.Args(env_id="MinAtar/Breakout-v1", **{name: 3})
        assert getattr(given, name) == 3, name
    help_text = run_any(module.__name__ + ".py", "--help", env={**ENV, "COLUMNS": "200"}).stdout
    help_text = " ".join(help_text.replace("│", " ").split())  # tyro's box and padding gone
    for name in module.FAMILY_DEFAULTS:
        flag = "--" + name.replace("_", "-")
        text = help_text[help_text.index(flag + " {None}") :][:600]  # the flag's own entry, not a mention
        assert "Atari" in text and "MinAtar" in text, (flag, text)


def test_a_minatar_id_needs_no_ale_py(monkeypatch):
    """MinAtar runs on a machine without ale-py (a GPU node's image, say); an Atari id there says what is missing.
    (Both scripts check their --env-id with envs.check_env.)"""
    monkeypatch.setitem(sys.modules, "ale_py", None)  # `import ale_py` now raises ImportError
    monkeypatch.setitem(sys.modules, "ale_py.roms", None)
    envs.check_env(SimpleNamespace(env_id="MinAtar/Breakout-v1"))
    with pytest.raises(ImportError):
        envs.check_env(SimpleNamespace(env_id="Breakout-v5"))


def test_minatar_palette_is_the_packages_render():
    from minatar.gym import BaseEnv

    for game in GAMES:
        env = BaseEnv(MINATAR_GAMES[game], render_mode="rgb_array")
        env.reset(seed=3)
        for _ in range(30):
            env.step(env.action_space.sample())
        expected = (np.asarray(env.render()) * 255).round().astype(np.uint8)
        grid = env.game.state().astype(np.uint8)
        image = envs.minatar_rgb(grid, scale=4)
        assert image.shape == (40, 40, 3) and np.array_equal(image[::4, ::4], expected), game


def test_short_minatar_run_beats_random_play(tmp_path):
    """One PQN agent (the single-PQN arm: no BigAgent, no clone), MinAtar Breakout at the PQN MinAtar defaults with
    64 envs, 20 updates (40,960 frames), seeded: its last evaluation beats random play under the same protocol."""
    runs = tmp_path / "runs"
    out = run(
        "pqn_lake.py",
        "--env-id",
        "MinAtar/Breakout-v1",
        "--num-agents",
        "1",
        "--big-agent-schedule",
        "none",
        "--num-envs",
        "64",
        "--agent-updates-per-phase",
        "10",
        "--total-frames",
        str(20 * 64 * 32),
        "--eval-every-updates",
        "10",
        "--runs-dir",
        str(runs),
    )
    rows = metrics(only_run_dir(runs))
    (random_return,) = [r["eval/random_return"] for r in rows if "eval/random_return" in r]
    last = [r for r in rows if "eval/return" in r][-1]
    assert last["global_frames"] == 20 * 64 * 32
    assert last["eval/return"] >= max(2.0, 3 * random_return), (last, random_return, out[-2000:])
    assert not any("big_agent/charts/updates" in r or "distill/big_minus_agents" in r for r in rows)
    assert "(random play" in out.strip().splitlines()[-1]


def test_minatar_mixture_resumes_bit_exactly_and_films_in_colour(tmp_path):
    """A MinAtar mixture stopped after phase 1 and resumed ends identical to the uninterrupted run (the envs'
    sticky action is forgotten at every reset); its videos are MinAtar's palette, 10x10 cells of 32 pixels."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    run_together(
        ("pqn_lake.py", *TINY_MIXTURE, "--runs-dir", str(whole), "--capture-video"),
        ("pqn_lake.py", *TINY_MIXTURE, "--runs-dir", str(parts), "--stop-after-phases", "1"),
    )
    run_dir = only_run_dir(parts)
    run("pqn_lake.py", "--resume", str(run_dir))
    a, b = (load(only_run_dir(r) / "checkpoints" / "phase_0002.pt") for r in (whole, parts))
    for sa, sb in zip(a["agents"] + [a["big_agent"]], b["agents"] + [b["big_agent"]]):
        assert all(torch.equal(sa["q_network"][n], sb["q_network"][n]) for n in sa["q_network"])
    strip = lambda rows: [{k: v for k, v in r.items() if k != "charts/SPS" and not k.startswith("time/")} for r in rows]  # noqa: E731
    assert strip(metrics(only_run_dir(whole))) == strip(metrics(run_dir))
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["stack_size"], config["learning_rate"], config["repeat_action_probability"]) == (1, 5e-4, 0.1)
    video = read_video(only_run_dir(whole) / "videos" / "phase_0001_big_agent.mp4")
    assert video.shape[1:] == (320, 320, 3) and len(video) > 1
    with Lake(run_dir / "lake", mode="r") as lake:
        assert lake.frame_shape == (10, 10, 4) and lake.stack_size == 1


def test_dqn_baseline_runs_minatar_at_its_defaults(tmp_path):
    """The baseline on MinAtar: the MinAtar paper's DQN (batch 128 every 4 transitions: 32 samples per transition),
    evaluation games capped by --eval-max-frames, random play logged."""
    runs = tmp_path / "runs"
    run(
        "dqn_single_baseline.py",
        "--env-id",
        "MinAtar/Freeway-v1",
        "--total-frames",
        "4000",
        "--learning-starts",
        "2000",
        "--eval-every-frames",
        "2000",
        "--eval-max-frames",
        "300",
        "--eval-episodes",
        "2",
        "--runs-dir",
        str(runs),
    )
    run_dir = only_run_dir(runs)
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["batch_size"], config["replay_ratio"], config["buffer_size"], config["end_e"]) == (
        128,
        32.0,
        100_000,
        0.1,
    )
    assert config["exploration_fraction"] * 4000 == pytest.approx(100_000) or config["exploration_fraction"] == 1.0
    rows = metrics(run_dir)
    assert [r["eval/length"] for r in rows if "eval/length" in r] == [300, 300]  # Freeway runs 2,500 steps: capped
    updates = [r["charts/updates"] for r in rows if "charts/updates" in r][-1]
    assert updates == (4000 - 8 - 2000) * 32 // 128  # owed before each step of 8 envs: the last step's are not due yet
    assert any("eval/random_return" in r for r in rows)


def test_single_pqn_arm_never_clones_and_equals_a_mixture_before_its_first_clone(tmp_path):
    """--big-agent-schedule none: no BigPond fill, no BigAgent update, no clone, its evaluations are its eval/return;
    up to the first clone its agent plays and learns exactly as the same seed's one-agent mixture (config.json records
    the schedule, what tells the arms apart)."""
    flags = [
        "--env-id",
        "MinAtar/Breakout-v1",
        "--num-agents",
        "1",
        *SMALL_AGENTS,
        "--agent-updates-per-phase",
        "4",
        "--eval-every-updates",
        "2",
        "--eval-episodes",
        "2",
        "--total-frames",
        str(3 * 4 * 8 * 16),
        "--big-pond-size",
        "500",
    ]
    run_together(
        ("pqn_lake.py", *flags, "--big-agent-schedule", "none", "--runs-dir", str(tmp_path / "single")),
        ("pqn_lake.py", *flags, "--runs-dir", str(tmp_path / "mixture")),
    )
    single, mixture = (only_run_dir(tmp_path / name) for name in ("single", "mixture"))
    assert json.loads((single / "config.json").read_text())["big_agent_schedule"] == "none"
    rows = metrics(single)
    assert not any(k.startswith(("big_agent/", "distill/", "recovery/", "time/big")) for r in rows for k in r)
    checkpoint = load(single / "checkpoints" / "phase_0003.pt")
    assert checkpoint["big_agent"]["updates"] == 0 and checkpoint["agents"][0]["updates"] == 12
    assert [r["eval/frames_since_clone"] for r in rows if "eval/return" in r] == [256 * i for i in range(1, 7)]
    first_clone = [r for r in metrics(mixture) if "distill/big_minus_agents" in r][0]["global_frames"]

    def before_first_clone(rows):  # the agent's rows (the mixture's clone row and after-clone evaluation aside)
        keep = [
            r
            for r in rows
            if r["global_frames"] <= first_clone
            and r.get("eval/frames_since_clone") != 0
            and "distill/big_minus_agents" not in r
        ]
        return [
            {k: v for k, v in r.items() if k not in ("charts/SPS", "eval/return") and not k.startswith("time/")}
            for r in keep
        ]

    assert len(before_first_clone(rows)) > 4 and before_first_clone(rows) == before_first_clone(metrics(mixture))


@pytest.mark.parametrize(
    "env_id, flags",
    [("MinAtar/Breakout-v1", {}), ("Breakout-v5", {}), ("Breakout-v5", {"rgb": True, "frame_height": 96})],
    ids=["minatar", "atari", "atari-rgb-96"],
)
def test_the_baseline_and_the_loop_build_the_same_network(env_id, flags):
    """Each script has its network (a fork changes its own): from the same seed both build the same layers with the
    same weights, and give the same Q-values."""
    networks, args = [], {"env_id": env_id, **flags}
    for module in (pqn_lake, dqn):
        torch.manual_seed(7)
        networks.append(module.make_q_network(module.Args(**args), 4, torch.device("cpu")))
    a, b = (n.state_dict() for n in networks)
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert [type(m).__name__ for m in networks[0].modules()] == [type(m).__name__ for m in networks[1].modules()]
    shape = (3, *((1, 10, 10, 4) if env_id.startswith("MinAtar") else (4, 96 if flags else 84, 84)))
    obs = torch.randint(0, 2 if env_id.startswith("MinAtar") else 256, (*shape, *((3,) if flags else ())))
    assert torch.equal(networks[0](obs.to(torch.uint8)), networks[1](obs.to(torch.uint8)))
