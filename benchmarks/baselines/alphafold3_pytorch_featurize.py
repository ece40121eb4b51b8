"""alphafold3-pytorch's per-example training featurization, timed: the baseline of
``benchmarks/vs_alphafold3_pytorch.py``. Runs with the Python of the venv that
``setup_alphafold3_pytorch.sh`` made (alphafold3-pytorch 0.8.3, torch 2.13.0 CPU), not featurecache's.

    DIR/venv/bin/python benchmarks/baselines/alphafold3_pytorch_featurize.py A.cif B.cif \
        --msa-dir MSAS --workdir DIR/cwd --repeats 3 --cleared-repeats 3 --json OUT.json

Per example, the path its training DataLoader runs (alphafold3_pytorch 0.8.3, ``inputs.py``):
``PDBDataset(folder, crop_size=384, training=True, msa_dir=...).get_item(file_id)`` → ``PDBInput``
(with AF3's cropping weights), ``pdb_input_to_molecule_input`` (mmCIF parse by Biopython, MSA
parse and pairing, crop, an RDKit molecule and conformer per ligand), ``molecule_to_atom_input``,
``default_none_fields_atom_input`` (``INPUT_TO_ATOM_TRANSFORM[PDBInput]``), then apart
``collate_inputs_to_batched_atom_input([x], atoms_per_window=27)`` (its trainer's collate). The
functions are called directly: ``PDBDataset.__getitem__`` catches every exception and returns
another random file's example, which would hide a failure.

Timed per example: wall seconds and CPU seconds of this process (every thread;
``time.process_time``). Caches: its mmCIF parse is ``lru_cache(16)`` on the file's text, so an entry's
first example is "cold" and the next ``--repeats`` − 1 "warm"; ``--cleared-repeats`` more run with
that cache (and its MSA-header cache) cleared first, as a training run over more than 16 files
meets every example. Its caches of standard residues, shared by every file, are never cleared.

It reads its CCD at import time from ``data/ccd_data/components_smiles.json`` relative to the
current directory (made from ``components.cif`` there on the first import): the script changes
into ``--workdir`` first. Imports are warmed up once, untimed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _cpu() -> float:
    """CPU seconds of this process, every thread (it starts no child process)."""
    return time.process_time()


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mmcifs", nargs="+", type=Path, help="structure files (names containing 'assembly')")
    ap.add_argument(
        "--msa-dir", type=Path, default=None, help="MSAs named <file id><chain>_*.a3m, not gzipped"
    )
    ap.add_argument("--workdir", type=Path, required=True, help="holds data/ccd_data/components.cif")
    ap.add_argument("--repeats", type=int, default=3, help="examples per entry with its caches as they are")
    ap.add_argument("--cleared-repeats", type=int, default=3, help="examples per entry, parse cache cleared")
    ap.add_argument("--crop-size", type=int, default=384)
    ap.add_argument(
        "--max-msas-per-chain",
        type=int,
        default=None,
        help="PDBInput's cap on each chain's MSA rows (default: its own, None in 0.8.3: every row)",
    )
    ap.add_argument(
        "--seed", type=int, default=0, help="random / numpy / torch seed, set before each example"
    )
    ap.add_argument("--json", type=Path, required=True)
    return ap.parse_args()


def main() -> int:
    args = _arguments()
    started = time.perf_counter()
    paths = [p.absolute() for p in args.mmcifs]  # links keep their names: the file id
    msa_dir = str(args.msa_dir.resolve()) if args.msa_dir else None
    out = args.json.resolve()
    if not (args.workdir / "data" / "ccd_data").is_dir():
        sys.stderr.write(f"{args.workdir}: no data/ccd_data (run setup_alphafold3_pytorch.sh)\n")
        return 2
    os.chdir(args.workdir)
    w, c = time.perf_counter(), _cpu()
    from importlib.metadata import version

    import numpy as np
    import torch
    from alphafold3_pytorch import inputs
    from alphafold3_pytorch.data import mmcif_parsing, msa_parsing
    from alphafold3_pytorch.tensor_typing import USE_NIM

    meta: dict[str, Any] = {
        "alphafold3_pytorch": version("alphafold3-pytorch"), "torch": torch.__version__,
        "rdkit": version("rdkit"), "biopython": version("biopython"), "torch_threads": torch.get_num_threads(),
        "nim": bool(USE_NIM), "ccd_smiles": len(inputs.CCD_COMPONENTS_SMILES or {}), "crop_size": args.crop_size,
        "import_wall_s": time.perf_counter() - w, "import_cpu_s": _cpu() - c,
        "max_msas_per_chain": args.max_msas_per_chain,
    }  # fmt: skip

    def example(path: Path, clear: bool) -> dict[str, Any]:
        file_id = path.stem
        if clear:
            mmcif_parsing.parse.cache_clear()
            msa_parsing.get_identifiers.cache.clear()
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        ds = inputs.PDBDataset(str(path.parent), sample_only_pdb_ids={file_id}, crop_size=args.crop_size,
                               training=True, inference=False, msa_dir=msa_dir,
                               **({} if args.max_msas_per_chain is None else {"max_msas_per_chain": args.max_msas_per_chain}))  # fmt: skip
        w0, c0 = time.perf_counter(), _cpu()
        try:
            pdb_input = ds.get_item(file_id)
            if pdb_input is None:
                raise RuntimeError("PDBDataset.get_item returned None")
            atom = inputs.default_none_fields_atom_input(
                inputs.molecule_to_atom_input(inputs.pdb_input_to_molecule_input(pdb_input))
            )
            w1, c1 = time.perf_counter(), _cpu()
            inputs.collate_inputs_to_batched_atom_input([atom], atoms_per_window=27)
            w2, c2 = time.perf_counter(), _cpu()
        except Exception as exc:  # timeout_decorator's TimeoutError too
            return {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}"[:500],
                "wall_s": time.perf_counter() - w0,
            }
        return {"ok": True, "wall_s": w1 - w0, "cpu_s": c1 - c0, "collate_wall_s": w2 - w1,
                "collate_cpu_s": c2 - c1, "tokens": int(atom.molecule_ids.shape[0]),
                "atoms": int(atom.atom_inputs.shape[0]),
                "msa_depth": 0 if atom.msa is None else int(atom.msa.shape[0])}  # fmt: skip

    entries = []
    for path in paths:
        runs = [dict(example(path, False), mode="cold" if r == 0 else "warm") for r in range(args.repeats)]
        runs += [dict(example(path, True), mode="cleared") for _ in range(args.cleared_repeats)]
        ok = [r for r in runs if r["ok"]]
        summary: dict[str, Any] = {}
        for mode in ("cold", "warm", "cleared"):
            mine = [r for r in ok if r["mode"] == mode]
            if mine:
                summary[f"{mode}_wall_s"] = statistics.median(r["wall_s"] for r in mine)
                summary[f"{mode}_cpu_s"] = statistics.median(r["cpu_s"] for r in mine)
        if ok:
            summary["collate_cpu_s"] = statistics.median(r["collate_cpu_s"] for r in ok)
            summary["collate_wall_s"] = statistics.median(r["collate_wall_s"] for r in ok)
            summary.update({k: ok[0][k] for k in ("tokens", "atoms", "msa_depth")})
        failed = [r for r in runs if not r["ok"]]
        entry = {"path": str(path), "runs": runs, "summary": summary}
        if failed:
            entry["error"] = failed[0]["error"]
        entries.append(entry)
        line = ", ".join(f"{k} {v:.3g}" for k, v in summary.items()) or f"failed: {entry.get('error')}"
        print(f"{path.name}: {line}", flush=True)
    meta["script_wall_s"] = time.perf_counter() - started
    out.write_text(json.dumps({"meta": meta, "examples": entries}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
