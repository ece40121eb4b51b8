#!/usr/bin/env bash
# A/B: the same 120-step fused eager and CUDA-graph runs over one store, b92423c's package vs this tree's
set -u
# The old package: git archive b92423c | tar -x -C /tmp/old; cp -r /tmp/old/featurecache .devcarry/old/
# (carry .devcarry and .whl; the zarr wheels installed to /tmp/site first, as in gpu_e2e.sh)
OUT=$1; STORE=$2
for rep in 1 2; do
  for tree in old new; do
    if [ $tree = old ]; then PP=/tmp/site:.devcarry/old; else PP=/tmp/site:.; fi
    for g in "" "--cuda-graphs"; do
      tag=${tree}${g:+_graphs}_r$rep
      PYTHONPATH=$PP python3 -m featurecache.cli train --store $STORE --steps 120 --crop 384 --device cuda $g --log $OUT/ab_$tag.json > $OUT/ab_$tag.txt 2>&1
      python3 - $OUT/ab_$tag.json $tag <<'PY'
import json, sys, statistics as st
d = json.load(open(sys.argv[1])); s = d["summary"]; steps = d["steps"][1:]
print("%-16s median step %.1f ms  gpu %.1f ms  wall tok/s %.0f  median tok/s %.0f  data wait %.3f" % (sys.argv[2],
  1e3 * s["median_step_time_s"], 1e3 * st.median(r["gpu_s"] for r in steps), s["tokens_per_s"], s["median_tokens_per_s"], s["data_wait_fraction"]))
PY
    done
  done
done
