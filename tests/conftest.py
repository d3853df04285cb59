import sys
from pathlib import Path

# The scripts are top-level files (CleanRL style), not a package: make them importable from tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
