#!/usr/bin/env bash
# GPU checks of the model kernels (bf16, N up to 768) on a CUDA machine; junit XML with the errors.
#   benchmarks/gpu_tests.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/results}"
mkdir -p "$out"
export PYTHONPATH="${PYTHONPATH:-}:." PYTHONUNBUFFERED=1
python3 -m pytest -m gpu tests/model -q -rA -p no:cacheprovider -o junit_family=legacy --junitxml="$out/gpu_tests.xml" 2>&1 | tee "$out/gpu_tests.log"
