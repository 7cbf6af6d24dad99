#!/usr/bin/env bash
# Halyard on a real GPU server, in one run: calibrate, the performance model against the hardware, and the
# gpu backend end to end (docs/gpu-check.md shows one run's results).
#
#   benchmarks/gpu_check.sh OUT_DIR [PYTHON]
#
# Needs: an NVIDIA GPU with its driver, PyTorch (a CUDA build) and torchvision, nvidia-ml-py, and Halyard
# installed in PYTHON's environment (default python3) with its test extras (pytest, pytest-asyncio);
# `transformers` adds the BERT/RoBERTa/GPT-2 models. Writes into OUT_DIR:
#   nvidia-smi.txt      the GPU, its driver, memory and top SM clock
#   calibration.toml    the profile in the catalog's schema (halyard calibrate --out)
#   calibration.json    every measurement (--json): GPU specs, matmul by dtype, each model's training step
#   predicted.md        the performance model's iteration times beside the measured ones (docs/gpu-check.md's
#                       page for this run; copy calibration.json to docs/gpu-check.json to publish it)
#   end-to-end.log      a control plane and a gpu agent running examples/train_torch.py: a time-shift, a
#                       CPU/memory change, a preemption and a resume (tests/test_gpu_end_to_end.py)
#   daemons.log         the same as an operator runs it: `halyard controlplane`, `halyard agent --backend
#                       gpu` and the CLI, two PyTorch jobs under SRTF (the short one preempts the long one);
#                       the daemons' own logs and the jobs' files stay in a temporary folder it names
# Exits 2 at once, saying why, where there is no GPU; otherwise with the number of steps that failed.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_check.sh OUT_DIR [PYTHON]}
py=${2:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
failed=0

if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no GPU here: $py has no CUDA build of PyTorch or it sees no CUDA device" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee "$out/nvidia-smi.txt"

echo "== 1. halyard calibrate"
"$py" -m halyard.cli calibrate --out "$out/calibration.toml" --json "$out/calibration.json" --models all \
  || failed=$((failed + 1))

echo "== 2. the performance model against the measured steps"
"$py" "$here/benchmarks/gpu_predicted_vs_measured.py" --calibration "$out/calibration.json" \
  --out "$out/predicted.md" 2>&1 | tail -40 || failed=$((failed + 1))

echo "== 3. the gpu backend end to end (pytest)"
(cd "$here" && "$py" -m pytest -q -s -p no:cacheprovider tests/test_gpu_end_to_end.py) 2>&1 \
  | tee "$out/end-to-end.log" | grep -E '^\[gpu-check\]|passed|failed|skipped|Error' || true
grep -qE '^1 passed' "$out/end-to-end.log" || { echo "end-to-end test did not pass"; failed=$((failed + 1)); }

echo "== 4. the daemons and the CLI"
daemons=$(mktemp -d "${TMPDIR:-/tmp}/halyard-gpu-check.XXXXXX")
"$here/benchmarks/gpu_check_daemons.sh" "$daemons" "$py" 2>&1 | tee "$out/daemons.log" || failed=$((failed + 1))

echo "gpu_check: $failed step(s) failed; outputs in $out"
exit "$failed"
