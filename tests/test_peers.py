"""The peers run from their own code (studies/cleanrl_peer.py, studies/pqn_peer.py), without their packages here: each
says it is skipped, and reads its records as the studies do."""

import sys
from pathlib import Path

from script_runs import run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))


def test_the_cleanrl_peer_says_it_is_skipped_without_envpool_and_records_the_peers_games(tmp_path):
    """Without envpool (the peer's own environment has it) the peer script says so and exits 0; its record holds the
    peer's full games at 4 frames a step, compressed, and is found again (a recorded seed is not run twice)."""
    import cleanrl_peer
    import compare

    assert "envpool is not installed" in run("studies/cleanrl_peer.py", "--steps", "10")
    args = cleanrl_peer.Args(record_dir=str(tmp_path), steps=1000)
    rows = cleanrl_peer.rows_of([(992, 0.0), (1224, 3.0)], [(992, 124.0), (1224, 150.0)])
    record = cleanrl_peer.write_record(args, "Breakout-v5", 2, rows, "fe8d8a03", ["python", "x.py"])
    frames, values, *_ = compare.read_metrics(record, "charts/episodic_return")
    assert list(frames) == [3968, 4896] and list(values) == [0.0, 3.0]
    assert cleanrl_peer.recorded(args, "Breakout-v5", 2) and not cleanrl_peer.recorded(args, "Breakout-v5", 1)


def test_the_pqn_peer_says_it_is_skipped_without_jax_and_finds_its_records_by_decay_horizon(tmp_path):
    """Without JAX and purejaxql's other packages (the peer's own environment has them: requirements.txt never does)
    the peer script says so and exits 0; a recorded (game, seed) is found under its arm, as shipped or with its decays
    over --decay-steps, so the next call does not run it again."""
    import pqn_peer

    assert "jax" in pqn_peer.missing_packages()  # (the project's environment: the peer lives in its own)
    out = run("studies/pqn_peer.py", "--games", "Breakout", "--seeds", "1", "--record-dir", str(tmp_path))
    assert "pqn_peer: skipped, purejaxql's packages are missing here (jax" in out, out
    shipped, decay5m = pqn_peer.Args(), pqn_peer.Args(decay_steps=5_000_000)
    assert (pqn_peer.arm(shipped), pqn_peer.arm(decay5m)) == ("purejaxql", "purejaxql-decay5m")
    assert pqn_peer.recorded(shipped, "Breakout", 3) and pqn_peer.recorded(decay5m, "Breakout", 3)
    assert not pqn_peer.recorded(decay5m, "Asterix", 1)  # (only Breakout ran with its decays over 5M)
    assert not pqn_peer.recorded(pqn_peer.Args(record_dir=str(tmp_path)), "Breakout", 1)
