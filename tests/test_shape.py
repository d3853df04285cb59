"""The shape a researcher forks: from pqn_lake.py's phase loop (main) a reader reaches the PQN loss and the BigAgent's
loss through at most two of the script's functions, each named where it is used (called, or handed to the speed
machinery, as the agents' update is to speed.in_agent_threads)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def named_within(script: str, start: str, hops: int) -> set:
    """The script's functions named in `start` (one hop), in those (two hops), ... up to `hops`."""
    tree = ast.parse((ROOT / script).read_text())
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    reached, frontier = set(), {start}
    for _ in range(hops):
        named = {n.id for f in frontier for n in ast.walk(functions[f]) if isinstance(n, ast.Name)}
        frontier = (named & set(functions)) - reached - {start}
        reached |= frontier
    return reached


def test_the_phase_loop_reaches_each_loss_within_two_calls():
    assert {"pqn_loss", "big_agent_loss"} <= named_within("pqn_lake.py", "main", 2)
    assert not {"pqn_loss", "big_agent_loss"} & named_within("pqn_lake.py", "main", 1)  # (the test can tell)
