#!/usr/bin/env bash
# On a CUDA machine: the reference training loop over a real store as users run it (CUDA graphs,
# crop 384), then the same run stopped by SIGTERM (what SLURM/torchrun send) mid-run, and resumed.
# Checks the exit status (143), that the log on disk is valid strict JSON while and after the run,
# and that the resumed run continues the steps. Writes OUT/train_*.json and OUT/signals.txt.
#   PYTHONPATH=. bash benchmarks/dev/train_signals.sh OUT STORE
set -uo pipefail
OUT=${1:?out dir}; STORE=${2:?store dir}
mkdir -p "$OUT"
run() { python3 -m featurecache.cli train --store "$STORE" --crop 384 --device cuda --cuda-graphs "$@"; }
run --steps 60 --log "$OUT/train_graphs.json" 2>&1 | tail -4
# not through run(): a background function is a subshell, and SIGTERM would reach bash, not python
python3 -m featurecache.cli train --store "$STORE" --crop 384 --device cuda --cuda-graphs --steps 20000 \
  --log "$OUT/train_term.json" --checkpoint "$OUT/ck/last.pt" --checkpoint-every 100 > "$OUT/term.out" 2>&1 &
pid=$!
sleep 30
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('log while running:', len(d['steps']), 'steps')" "$OUT/train_term.json" 2>&1 | tee "$OUT/signals.txt"
kill -TERM $pid; wait $pid; echo "exit status after SIGTERM: $?" | tee -a "$OUT/signals.txt"
python3 - "$OUT/train_term.json" <<'PY' 2>&1 | tee -a "$OUT/signals.txt"
import json, sys
d = json.loads(open(sys.argv[1]).read(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
print("log after SIGTERM:", len(d["steps"]), "steps; summary status:", d.get("summary", {}).get("status", d.get("status")))
PY
n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['steps']) + 5)" "$OUT/train_term.json")
run --steps "$n" --resume "$OUT/ck/last.pt" --log "$OUT/train_term.json" 2>&1 | tail -2 | tee -a "$OUT/signals.txt"
python3 -c "import json,sys; s=[r['step'] for r in json.load(open(sys.argv[1]))['steps']]; print('steps after resume:', s[0], '...', s[-1], 'count', len(s), 'unique', len(set(s)))" "$OUT/train_term.json" | tee -a "$OUT/signals.txt"
rm -rf "$OUT/ck"
