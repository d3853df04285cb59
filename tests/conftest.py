import os
import sys
from pathlib import Path

# The scripts are top-level files (CleanRL style), not a package: make them importable from tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# One intra-op thread in the test processes too (read when torch loads, after this file), as in the runs they make
# (script_runs.ENV): two xdist workers on two cores with torch's two spinning OpenMP threads each ran in-process
# network work ~2.7x slower here (benchmarks/RESULTS.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
