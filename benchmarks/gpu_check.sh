#!/usr/bin/env bash
# The GPU path checked on a GPU node in one command of at most 8 minutes (timeouts 15 + max(90, 140) + 320 s), so that
# a rerun still fits the node's 15 minutes with its start-up; the speed measured in another. Each part has its own
# timeout and writes its output to a file as it goes (a part that times out leaves what it had); summary.txt gets a
# line per part as it ends.
#
#   bash benchmarks/gpu_check.sh prepare          # here, with git and the registry: .gpu/ (git-ignored, ~15 MB)
#   bash benchmarks/gpu_check.sh run "$OUT"       # on the node (carry .gpu): parts 0, a, b, d into $OUT (~8 min)
#   bash benchmarks/gpu_check.sh bench "$OUT"     # on the node: parts 0, c into $OUT (~9 min)
#   LEARN_EXTRA="<flags>" bash benchmarks/gpu_check.sh learn "$OUT"   # parts 0, d; the flags added (the smoke test)
#
# prepare: the serial reference, pqn_lake.py at f3004fc (before the agents acted in threads on CUDA streams of their
# own), written out of git into .gpu/reference/f3004fc/ (the node gets a copy of the working tree, not its history);
# and the cp312 wheels of the packages a bare node image lacks, unzipped into .gpu/site/
# (../shared/notes/gpu.md: of hdf5plugin only its zstd filter; an empty av/ stands in for PyAV).
# run: (0) the device, torch and CUDA versions, and a loud line if torch is not requirements.txt's pin; (a)
# tests/test_cuda_graphs.py: graphs against eager, MinAtar with two agents and Atari with four on their streams,
# metrics and weights bit for bit; (b) beside it, the default threaded, per-stream loop against the serial reference
# on CUDA, --torch-deterministic, same seed: a short MinAtar and a short Atari mixture, metrics line for line; (d) the
# first learning run (below). bench: (c) benchmarks/gpu_bench.py, with one whole phase end to end.
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

PART=${1:-}
case "$PART" in run | bench | learn) ;; *) echo "usage: bash benchmarks/gpu_check.sh prepare | run | bench | learn OUTDIR"; exit 2 ;; esac
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

if [ "$PART" = run ]; then  # (a) CUDA graphs against eager, beside (b)
    { timeout 90 python -m pytest -q -p no:cacheprovider -n 2 --dist load tests/test_cuda_graphs.py \
        > "$OUT/a_cuda_graphs.txt" 2>&1
      echo "a (CUDA graphs against eager, MinAtar x 2 agents and Atari x 4): exit $?" | tee -a "$OUT/summary.txt"; } &
fi

# (b) the threaded, per-stream loop against the serial reference (f3004fc: the constant rate only), on CUDA: a
# MinAtar and an Atari mixture side by side, metrics line for line
TINY=(--num-agents 2 --num-envs 8 --num-steps 16 --num-minibatches 4 --pond-steps 32 --agent-updates-per-phase 4
      --eval-episodes 2 --eval-every-updates 2 --eval-max-frames 2000 --big-pond-size 2000 --big-pond-slice-steps 16
      --big-batch-size 32 --total-frames 3072)
[ "$PART" = run ] && rm -rf "$OUT/same" && mkdir -p "$OUT/same"
for game in $([ "$PART" = run ] && echo MinAtar/Breakout-v1 Breakout-v5); do
    dir="$OUT/same/${game//\//_}"
    timeout 140 python pqn_lake.py "${TINY[@]}" --env-id "$game" --no-anneal-lr --runs-dir "$dir/now" \
        > "$dir.now.txt" 2>&1 &
    timeout 140 python "$GPU/reference/f3004fc/pqn_lake.py" "${TINY[@]}" --env-id "$game" --runs-dir "$dir/before" \
        > "$dir.before.txt" 2>&1 &
done
wait
[ "$PART" = run ] && python - "$OUT/same" 2>&1 <<'EOF' | tee -a "$OUT/summary.txt"
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

if [ "$PART" = bench ]; then  # (c) where the time goes, the env ceiling measured fairly, one whole phase end to end
    timeout 560 python benchmarks/gpu_bench.py --phase-updates 25 > "$OUT/c_gpu_bench.txt" 2>&1
    echo "c (gpu_bench.py): exit $?" | tee -a "$OUT/summary.txt"
    exit 0
fi

# (d) the first learning run (read here with python studies/atari_study.py --table-only --gpu-runs
# benchmarks/gpu_runs/<node>/d_learning: its curves beside the CPU seeds'): Breakout-v5 seed 1, the mixture (three whole phases of the CPU study's 25 updates) and
# one PQN agent (300 updates) side by side, ~4.9M frames each, with the CPU study's 10M-frame schedules, so that each
# curve is a prefix of a committed record in studies/atari_runs/. Metrics are copied into $OUT/d_learning as the
# runs go; a timeout's SIGTERM makes a run checkpoint and stop, its partial curve kept.
LEARN=$(mktemp -d)
COMMON=(--env-id Breakout-v5 --seed 1 --total-frames 10000000 --runs-dir "$LEARN")
start=$(date +%s)
read -ra EXTRA <<< "${LEARN_EXTRA:-}"
PHASE=${LEARN_PHASE_UPDATES:-25}  # (the smoke test's: 1)
timeout 320 python pqn_lake.py "${COMMON[@]}" --exp-name Breakout__mixture__1 --agent-updates-per-phase "$PHASE" \
    --stop-after-phases 3 "${EXTRA[@]}" > "$OUT/d_mixture.txt" 2>&1 &
timeout 320 python pqn_lake.py "${COMMON[@]}" --exp-name Breakout__pqn__1 --num-agents 1 --big-agent-schedule none \
    --stop-after-updates $((3 * 4 * PHASE)) "${EXTRA[@]}" > "$OUT/d_pqn.txt" 2>&1 &
shopt -s nullglob
copy() {
    for run in "$LEARN"/*/; do
        mkdir -p "$OUT/d_learning/$(basename "$run")"
        cp "$run"/config.json "$run"/metrics.jsonl "$OUT/d_learning/$(basename "$run")/" 2>/dev/null
    done
}
while [ -n "$(jobs -r)" ]; do copy; sleep 10; done
wait
copy
python - "$OUT/d_learning" "$(( $(date +%s) - start ))" 2>&1 <<'EOF' | tee -a "$OUT/summary.txt"
import json, math, sys
from pathlib import Path
for run in sorted(Path(sys.argv[1]).iterdir()):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["global_frames"], r["eval/return"]) for r in rows if "eval/return" in r]
    random = next((r["eval/random_return"] for r in rows if "eval/random_return" in r), float("nan"))
    finite = all(math.isfinite(v) for _, v in evals)
    print(f"d ({run.name}): {len(evals)} evaluations to {evals[-1][0] if evals else 0:,} frames, last "
          f"{evals[-1][1] if evals else float('nan'):.1f}, random play {random:.1f}, all finite: {finite}; "
          f"{sys.argv[2]} s for both runs side by side")
EOF
rm -rf "$LEARN"
