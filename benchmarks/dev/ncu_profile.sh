#!/usr/bin/env bash
# Session 22: Nsight Compute counters for one attention fwd+bwd and one transition fwd+bwd at N = 768.
#   bash benchmarks/dev/ncu_profile.sh OUT        (H200, Firecracker runtime; ~3 min)
# Writes OUT/k.ncu-rep, OUT/details.csv (every section of every kernel), OUT/raw.csv (every metric),
# OUT/source_<kernel>.csv (per-SASS-instruction stall samples of our Triton kernels).
set -uo pipefail
OUT=${1:?out dir}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; "$NCU" --version | tail -1
cd "$(dirname "$0")"   # benchmarks/dev: the script puts the repo root on sys.path itself
timeout 420 "$NCU" --clock-control none --profile-from-start off --set full --import-source no \
  -o "$OUT/k" -f python3 ncu_profile.py attention transition > "$OUT/ncu.log" 2>&1
echo "ncu exit $?"; tail -5 "$OUT/ncu.log"
"$NCU" --import "$OUT/k.ncu-rep" --page details --csv > "$OUT/details.csv" 2> "$OUT/export.err"
"$NCU" --import "$OUT/k.ncu-rep" --page raw --csv > "$OUT/raw.csv" 2>> "$OUT/export.err"
for k in _fwd_kernel _bwd_dq_kernel _bwd_dkv_kernel _bwd_dbias_kernel _bwd_kernel; do
  "$NCU" --import "$OUT/k.ncu-rep" --page source --print-source sass --csv -k "regex:^${k}$" \
    > "$OUT/source_${k}.csv" 2>> "$OUT/export.err" || true
done
ls -la "$OUT"; cat "$OUT/export.err" | tail -5
