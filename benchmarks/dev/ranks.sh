#!/usr/bin/env bash
# featurecache train on one GPU and on two (torchrun, one rank per GPU) over the same store, fused
# kernels, eager steps, crop 384; then a two-rank run stopped at a checkpoint and resumed, against
# the same run uninterrupted (one client worker per rank, so the samples arrive in the same order).
#   PYTHONPATH=... bash benchmarks/dev/ranks.sh OUT STORE [STEPS]
set -euo pipefail
out=$1 store=$2 steps=${3:-60}
mkdir -p "$out"
fc=(-m featurecache.cli train --store "$store" --crop 384 --device cuda)
run2=(python3 -m torch.distributed.run --standalone --nproc-per-node 2)
python3 "${fc[@]}" --steps "$steps" --log-file "$out/ranks1.json" > "$out/ranks1.log" 2>&1
"${run2[@]}" "${fc[@]}" --steps "$steps" --log-file "$out/ranks2.json" > "$out/ranks2.log" 2>&1
"${run2[@]}" "${fc[@]}" --steps 8 --workers 1 --checkpoint "$out/ck_{step}.pt" --checkpoint-every 4 \
  --log-file "$out/full.json" > "$out/full.log" 2>&1
"${run2[@]}" "${fc[@]}" --steps 8 --workers 1 --resume "$out/ck_4.pt" --checkpoint "$out/resumed.pt" \
  --log-file "$out/resumed.json" > "$out/resumed.log" 2>&1
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
import torch
out = Path(sys.argv[1])
rows = {}
for name in ("ranks1", "ranks2", "ranks2.rank1"):
    d = json.loads((out / f"{name}.json").read_text())
    s = d["summary"]
    rows[name] = {k: s[k] for k in ("median_step_time_s", "tokens_per_s", "world_tokens_per_s",
                                    "median_tokens_per_s", "data_wait_fraction", "peak_mem_bytes")}
    rows[name]["world_size"] = d["world_size"]
print(f"{'run':<14} {'ranks':>5} {'median step ms':>15} {'tok/s (rank)':>13} {'tok/s (all)':>12} {'exposed wait':>12}")
for k, r in rows.items():
    print(f"{k:<14} {r['world_size']:>5} {1e3 * r['median_step_time_s']:>15.1f} {r['tokens_per_s']:>13.0f} "
          f"{r['world_tokens_per_s']:>12.0f} {100 * r['data_wait_fraction']:>11.1f}%")
full, res = (json.loads((out / f"{n}.json").read_text()) for n in ("full", "resumed"))
a = torch.load(out / "ck_8.pt", map_location="cpu", weights_only=True)
b = torch.load(out / "resumed.pt", map_location="cpu", weights_only=True)
check = {
    "resumed_losses_equal": [r["loss"] for r in res["steps"]] == [r["loss"] for r in full["steps"][4:]],
    "resumed_positions_equal": [r["positions"] for r in res["steps"]] == [r["positions"] for r in full["steps"][4:]],
    "final_parameters_bitwise_equal": all(torch.equal(v, b["model"][k]) for k, v in a["model"].items()),
}
print(check)
(out / "ranks.json").write_text(json.dumps({"runs": rows, "resume": check}, indent=2))
PY
