#!/usr/bin/env bash
# A venv with alphafold3-pytorch (the baseline of benchmarks/vs_alphafold3_pytorch.py) and an
# offline CCD for it, in DIR (default /tmp/af3pt). Needs only PyPI: ~2 min, ~1.5 GB.
#   bash benchmarks/baselines/setup_alphafold3_pytorch.sh [DIR]
# torch is pinned to the CPU build featurecache uses (an unpinned one pulls the CUDA packages), and every
# other package to the version of the committed run (alphafold3_pytorch_constraints.txt).
# alphafold3-pytorch reads data/ccd_data/components.cif relative to its working directory (its
# README has users download wwPDB's whole file); here DIR/cwd gets the shared CCD definitions
# (../shared/data/ccd, every component of the corpus), and the first import converts them into
# its components_smiles.json.
set -euo pipefail
DIR=$(realpath -m "${1:-/tmp/af3pt}")
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CCD=${FEATURECACHE_SHARED:-$REPO/../shared}/data/ccd
[ -d "$CCD" ] || { echo "no CCD definitions at $CCD (set FEATURECACHE_SHARED)" >&2; exit 2; }
mkdir -p "$DIR/cwd/data/ccd_data"
python3 -m venv "$DIR/venv"
PINS="$(dirname "$0")/alphafold3_pytorch_constraints.txt"  # every version, as the committed run had them
"$DIR/venv/bin/pip" install -q --upgrade pip
"$DIR/venv/bin/pip" install -q torch==2.13.0
"$DIR/venv/bin/pip" install -q -c "$PINS" alphafold3-pytorch==0.8.3  # unpinned, pip 23 backtracked > 13 min
for f in "$CCD"/*.cif; do cat "$f"; echo; done > "$DIR/cwd/data/ccd_data/components.cif"
(cd "$DIR/cwd" && "$DIR/venv/bin/python" -c "import alphafold3_pytorch.inputs as i; print(len(i.CCD_COMPONENTS_SMILES), 'CCD components')")
echo "ready: .venv/bin/python benchmarks/vs_alphafold3_pytorch.py --af3pt $DIR"
