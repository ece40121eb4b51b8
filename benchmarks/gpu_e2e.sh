#!/usr/bin/env bash
# One H200 session: end-to-end training on a real store (fused vs torch references, largest crop,
# peak memory per crop) and the memory planner's validation. Run from the repo root on the device:
#   PYTHONPATH=. bash benchmarks/gpu_e2e.sh OUTDIR STORE
# zarr/numcodecs are not in the device image: carry their wheels (python 3.12) in .whl, made here with
#   pip download -d .whl --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 zarr==3.1.6
set -uo pipefail
OUT=${1:?out dir}; STORE=${2:?store dir}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-.}
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 benchmarks/train_e2e.py --store "$STORE" --steps 120 --crop 384 --compare-padding --compare-compile --compare-graphs --compare-prefetch --out "$OUT" 2>&1 | tee "$OUT/train_e2e.log" | tail -40
python3 benchmarks/plan_validate.py 2>&1 | tee "$OUT/plan_validate.log" | tail -30
cp benchmarks/results/plan_validate.json "$OUT/" 2>/dev/null || true
