#!/usr/bin/env bash
# One H200 session: the same training run fed from a store path and from `featurecache serve` on
# 127.0.0.1 (the client's workers fetch each sample over HTTP), side by side: step time and the
# fraction of it spent waiting for data. Run from the repo root on the device:
#   PYTHONPATH=. bash benchmarks/gpu_e2e_http.sh OUTDIR STORE [SERVE_WORKERS]
# The device image has neither zarr nor the service's packages: carry their wheels (python 3.12) in
# .whl (as benchmarks/gpu_e2e.sh says) and .whl_http, made here with
#   pip download -d .whl_http --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     fastapi==0.165.0 uvicorn==0.54.0 httpx==0.28.1 pydantic-settings prometheus-client
set -uo pipefail
OUT=${1:?out dir}; STORE=${2:?store dir}; SERVE_WORKERS=${3:-4}
PORT=18765
mkdir -p "$OUT"
wheels=$(ls .whl/*.whl .whl_http/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-.}
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
nproc | tee "$OUT/nproc.txt"
python3 -m featurecache.cli serve "$STORE" --port "$PORT" --workers "$SERVE_WORKERS" > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 120); do
  python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/ready', timeout=2)" 2>/dev/null && break
  sleep 1
done
for src in store url; do
  if [ "$src" = store ]; then arg=(--store "$STORE"); else arg=(--url "http://127.0.0.1:$PORT"); fi
  # each variant's step log stays on the device (the device returns a few files only): the summary
  # JSON of each source comes back
  python3 benchmarks/train_e2e.py "${arg[@]}" --steps 120 --crop 384 --compare-graphs --search-crops 256 \
    --out "/tmp/gpu_e2e_http/$src" 2>&1 | tee "$OUT/train_e2e_$src.log" | grep -v "^{" | tail -20
  cp "/tmp/gpu_e2e_http/$src/train_e2e.json" "$OUT/train_e2e_$src.json"
done
