"""The shape a researcher forks: from pqn_lake.py's phase loop (main) a reader reaches the PQN loss and the BigAgent's
loss through at most two of the script's functions, each named where it is used (called, or handed to the speed
machinery, as the agents' update is to speed.in_agent_threads); and no module but the tests imports a script."""

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


SCRIPTS = {"pqn_lake", "pqn_lake_live", "dqn_single_baseline"}


def imported(path: Path) -> set:
    """The top-level modules a Python file imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_outside_tests_imports_a_script():
    """The scripts are forked, not imported: what they share lives in the modules beside them; benchmarks run them
    as programs (benchmarks/timed_run.py) and studies launch them."""
    files = [
        p
        for p in ROOT.rglob("*.py")
        if not any(part.startswith(".") or part in ("tests", "runs") for part in p.relative_to(ROOT).parts)
    ]
    assert len(files) > 10
    importers = {str(p.relative_to(ROOT)): sorted(imported(p) & SCRIPTS) for p in files}
    assert {p: s for p, s in importers.items() if s} == {}
