#!/usr/bin/env bash
# Same-run A/B of the fused training step between an older commit and the working tree, alternating
# (the device machine's speed differs between calls: compare only within one call).
#   here:   benchmarks/dev/ab_trees.sh prepare REV     (git archive REV's featurecache into ab_before/)
#   device: benchmarks/dev/ab_trees.sh run STORE [ROUNDS]   (ab_before/ and ab_step.py are untracked: never commit them)
# Prints one line per run: TREE <tree> median_step_ms … median_gpu_ms … (60 steps, crop 384, pad 128).
set -euo pipefail
cd "$(dirname "$0")/../.."
case "$1" in
  prepare)
    rm -rf ab_before && mkdir ab_before
    git archive "$2" featurecache | tar -x -C ab_before
    cp benchmarks/dev/ab_step.py ab_before/ && cp benchmarks/dev/ab_step.py ab_step.py ;;
  run)
    root=$(pwd)
    for _ in $(seq "${3:-3}"); do
      for t in ab_before .; do
        (cd "$root/$t" && python3 ab_step.py "$2" "$t") 2>&1 | grep -E "TREE|Error" | tail -3
      done
    done ;;
esac
