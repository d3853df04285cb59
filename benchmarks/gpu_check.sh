#!/usr/bin/env bash
# The GPU path checked on a GPU node in one command of at most 8 minutes (timeouts 15 + 90 + 140 + 230 s), so that a
# rerun still fits the node's 15 minutes with its start-up. Each part has its own timeout and writes its output to a
# file as it goes (a part that times out leaves what it had); summary.txt gets a line per part as it ends.
#
#   bash benchmarks/gpu_check.sh prepare          # here, with git and the registry: .gpu/ (git-ignored, ~15 MB)
#   bash benchmarks/gpu_check.sh run "$OUT"       # on the node (carry .gpu): parts 0-c into $OUT
#
# prepare: the serial reference, pqn_lake.py at f3004fc (before the agents acted in threads on CUDA streams of their
# own), written out of git into .gpu/reference/f3004fc/ (the node gets a copy of the working tree, not its history);
# and the cp312 wheels of the packages a bare node image lacks, unzipped into .gpu/site/
# (../shared/notes/gpu.md: of hdf5plugin only its zstd filter; an empty av/ stands in for PyAV).
# run: (0) the device, torch and CUDA versions, and a loud line if torch is not requirements.txt's pin; (a)
# tests/test_cuda_graphs.py: graphs against eager, MinAtar with two agents and Atari with four on their streams,
# metrics and weights bit for bit; (b) the default threaded, per-stream loop against the serial reference on CUDA,
# --torch-deterministic, same seed: a short MinAtar and a short Atari mixture, metrics line for line; (c) benchmarks/gpu_bench.py at its defaults (~3 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
GPU=.gpu

if [ "${1:-}" = prepare ]; then
    mkdir -p "$GPU/reference/f3004fc" "$GPU/wheels" "$GPU/site/av"
    git show f3004fc:pqn_lake.py > "$GPU/reference/f3004fc/pqn_lake.py"
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$GPU/wheels" ale-py gymnasium farama-notifications tyro docstring-parser typeguard shtab zstandard \
        google-crc32c minatar==1.0.15 hdf5plugin pytest pluggy iniconfig pytest-xdist execnet || exit 1
    for w in "$GPU"/wheels/*.whl; do python -m zipfile -e "$w" "$GPU/site/"; done
    find "$GPU/site/hdf5plugin/plugins" -type f ! -name 'libh5zstd*' -delete
    # (each filter removed above would log an error line at every import, into the stderr the tests read: debug)
    sed -i 's/logger.error(\(.*\)File not found/logger.debug(\1File not found/' "$GPU/site/hdf5plugin/_utils.py"
    rm -f "$GPU"/site/zstandard/_cffi*.so  # (its C backend is the one imported: the cffi one is 12 MB more to carry)
    touch "$GPU/site/av/__init__.py"
    du -sh "$GPU/site"
    exit 0
fi

[ "${1:-}" = run ] || { echo "usage: bash benchmarks/gpu_check.sh prepare | run OUTDIR"; exit 2; }
OUT=${2:?an output folder}
mkdir -p "$OUT"
# the bundle, and the repository for the reference scripts' `import lake`
export PYTHONPATH="$PWD/$GPU/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline
PIN=$(sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements.txt)
{ nvidia-smi; timeout 15 python -c "import sys, torch
print(f'torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, '
      f'{torch.cuda.get_device_name()}, Python {sys.version.split()[0]}')
if torch.__version__.split('+')[0] != '$PIN':
    print(f'!!!!! torch {torch.__version__} is not the pinned torch==$PIN: figures and failures below are this torch\'s')"
} > "$OUT/0_device.txt" 2>&1
grep -E "^torch |!!!!!" "$OUT/0_device.txt" | tee -a "$OUT/summary.txt"

# (a) CUDA graphs against eager
timeout 90 python -m pytest -q -p no:cacheprovider -n 2 --dist load tests/test_cuda_graphs.py \
    > "$OUT/a_cuda_graphs.txt" 2>&1
echo "a (CUDA graphs against eager, MinAtar x 2 agents and Atari x 4): exit $?" | tee -a "$OUT/summary.txt"

# (b) the threaded, per-stream loop against the serial reference (f3004fc: the constant rate only), on CUDA: a
# MinAtar and an Atari mixture side by side, metrics line for line
TINY=(--num-agents 2 --num-envs 8 --num-steps 16 --num-minibatches 4 --pond-steps 32 --agent-updates-per-phase 4
      --eval-episodes 2 --eval-every-updates 2 --eval-max-frames 2000 --big-pond-size 2000 --big-pond-slice-steps 16
      --big-batch-size 32 --total-frames 3072)
rm -rf "$OUT/same"
mkdir -p "$OUT/same"
for game in MinAtar/Breakout-v1 Breakout-v5; do
    dir="$OUT/same/${game//\//_}"
    timeout 140 python pqn_lake.py "${TINY[@]}" --env-id "$game" --no-anneal-lr --runs-dir "$dir/now" \
        > "$dir.now.txt" 2>&1 &
    timeout 140 python "$GPU/reference/f3004fc/pqn_lake.py" "${TINY[@]}" --env-id "$game" --runs-dir "$dir/before" \
        > "$dir.before.txt" 2>&1 &
done
wait
python - "$OUT/same" 2>&1 <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
from pathlib import Path
def rows(run_dir):
    (run,) = run_dir.iterdir()
    skip = ("charts/SPS", "big_agent/losses/distill")  # wall-clock; a constant f3004fc logged
    return [{k: v for k, v in json.loads(line).items() if k not in skip and not k.startswith(("time/", "diversity/"))}
            for line in (run / "metrics.jsonl").read_text().splitlines()]
for game in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    now, before = rows(game / "now"), rows(game / "before")
    print(f"b ({game.name} mixture): {len(now)} rows, the same metrics as f3004fc's serial loop: {now == before}")
EOF

# (c) where the time goes
timeout 230 python benchmarks/gpu_bench.py > "$OUT/c_gpu_bench.txt" 2>&1
echo "c (gpu_bench.py): exit $?" | tee -a "$OUT/summary.txt"
