"""The work a training step does per sample: alphafold3-pytorch's own featurization of an mmCIF
file and its MSAs, against featurecache's sample from a store built once over the same files.
Side by side in one run, the same structures, MSAs and CCD definitions, on this machine.

alphafold3-pytorch (lucidrains, PyPI ``alphafold3-pytorch``) featurizes each training example in
its DataLoader: ``PDBInput`` → ``pdb_input_to_molecule_input`` (mmCIF parse, MSA parse and
pairing, crop, RDKit conformers) → ``molecule_to_atom_input`` → ``collate_inputs_to_batched_atom_input``.
``benchmarks/baselines/alphafold3_pytorch_featurize.py`` times that path per example in its own
environment (its dependencies conflict with none of ours but are many: a separate venv, made by
``benchmarks/baselines/setup_alphafold3_pytorch.sh``), and this script runs it as a child process,
after featurecache's side, never at the same time.

featurecache's side: ``featurecache build`` over the same structures (the one-time cost, wall
time), then per entry ``--samples`` samples at ``featurecache train``'s settings (crop 384, af3
weighting, per-step MSA row sampling; ``max_msa_rows`` 1024, train's default, and 16384, all of
the MSAs here) restricted to that entry (``SamplerFilter(ids=[entry])``), each collated into a
batch of one as the loader does: CPU time (``time.process_time``, every thread of this process)
and wall time per sample, medians (``cpu_ms``, ``wall_ms``; ``_16384`` for every row), and the
CPU time of ``ds.sample`` and of ``collate`` apart (``sample_cpu_ms``, ``collate_cpu_ms``, their
own medians).

alphafold3-pytorch's side, per entry (its input a copy without water atoms, as its training set is
and as featurecache leaves them out): the first example (its mmCIF parse cache cold), the
median of the next ``--repeats`` − 1 (warm: it keeps the parsed text of the last 16 files), and the
median of ``--repeats`` with its parse cache cleared before each (what a training run over more
than 16 files meets on every step): CPU and wall seconds, and its collate apart. It needs two
things its package does not take as arguments (``baselines/alphafold3_pytorch_featurize.py`` says
why; this script does them, untimed): a file name containing "assembly" (it otherwise rebuilds the first
biological assembly, and fails on these asymmetric units), and MSAs not gzipped (it opens a
``.a3m.gz`` in binary mode and silently falls back to a query-only MSA). It keeps an MSA only when
its query has the chain's number of *modelled* residues, so the SEQRES-length MSAs of 5zyh and
2q2k (OpenFold layout) give it a query-only MSA, where featurecache uses them: the rows show each
side's MSA depth. Its default keeps every MSA row, where featurecache's train samples at most 1024
rows a step: the ratio ``af3pt_over_featurecache_cpu_all_rows`` compares every row on both sides
(featurecache at ``max_msa_rows=16384``), ``_1024_rows`` at most 1024 on both (alphafold3-pytorch run a
second time with ``max_msas_per_chain=1024`` for the entries whose MSAs are deeper).

Usage::

    bash benchmarks/baselines/setup_alphafold3_pytorch.sh /tmp/af3pt   # once: venv + offline CCD
    .venv/bin/python benchmarks/vs_alphafold3_pytorch.py --af3pt /tmp/af3pt [--samples 30] [--repeats 3]

Without ``--af3pt`` (or ``FEATURECACHE_AF3PT``) it exits 2 saying how to set it up.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.harness import REAL, SHARED, Bench, add_out_argument, require_shared  # noqa: E402
from benchmarks.sample_cost import TRAIN  # noqa: E402  (featurecache train's sample settings)

log = logging.getLogger("benchmarks.vs_alphafold3_pytorch")

HERE = Path(__file__).resolve().parent
FEATURIZE = HERE / "baselines" / "alphafold3_pytorch_featurize.py"
SETUP = HERE / "baselines" / "setup_alphafold3_pytorch.sh"

#: structure file names under ../shared/data/real/structures: the three of alphafold3-pytorch's
#: own test data (with their MSAs in its layout), myoglobin with its heme (Protenix MSA), two
#: entries with OpenFold-layout MSAs, and two without MSAs (a ligand complex, a protease + inhibitor)
ENTRIES = ("721p-assembly1.cif", "7a4d-assembly1.cif", "209d-assembly1.cif", "102m.cif", "5zyh.cif",
           "2q2k.cif", "4CUP.cif", "1GBT.cif")  # fmt: skip
SETTINGS = {k: v for k, v in TRAIN.items() if k != "max_msa_rows"}
MSA_ROWS: tuple[int, int] = (TRAIN["max_msa_rows"], 16384)  # train's default, and every row of these MSAs
WARMUP = 3


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--af3pt", type=Path, default=os.environ.get("FEATURECACHE_AF3PT"),
                    help="the directory setup_alphafold3_pytorch.sh prepared (its venv and CCD work dir); "
                    "default $FEATURECACHE_AF3PT")  # fmt: skip
    ap.add_argument(
        "--samples", type=int, default=30, help="featurecache samples timed per entry and setting"
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="alphafold3-pytorch examples timed per entry and mode"
    )
    ap.add_argument("--entries", default=",".join(ENTRIES), help="structure files of the shared corpus")
    ap.add_argument("--workers", type=int, default=2, help="featurecache build workers")
    add_out_argument(ap, "vs_alphafold3_pytorch")
    return ap.parse_args(argv)


def _af3pt_python(root: Path | None) -> Path:
    python = (root / "venv" / "bin" / "python") if root else None
    if python is None or not python.exists():
        where = f"{root}: no venv/bin/python there" if root else "no --af3pt given"
        sys.stderr.write(f"{Path(__file__).name}: {where}; make one with `bash {SETUP.relative_to(REPO)} DIR` "
                         "(a venv with alphafold3-pytorch and an offline CCD), then pass --af3pt DIR\n")  # fmt: skip
        raise SystemExit(2)
    return python


def _inputs(tmp: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """(featurecache's structure dir, alphafold3-pytorch's structure dir, its MSA dir), of links and
    uncompressed copies of the shared files."""
    ours, theirs, msas = tmp / "structures", tmp / "af3pt_structures", tmp / "af3pt_msas"
    for d in (ours, theirs, msas):
        d.mkdir()
    for name in names:
        src = REAL / "structures" / name
        if not src.is_file():
            raise SystemExit(f"{Path(__file__).name}: {src}: no such structure file")
        (ours / name).symlink_to(src)
        stem = name.removesuffix(".cif")
        _without_waters(src, theirs / (name if "assembly" in stem else f"{stem}-assembly1.cif"))
    for f in sorted((REAL / "msas" / "alphafold3-pytorch").iterdir()):
        if f.name.endswith(".gz"):
            with gzip.open(f, "rb") as zin, open(msas / f.name.removesuffix(".gz"), "wb") as out:
                shutil.copyfileobj(zin, out)
        else:
            shutil.copyfile(f, msas / f.name)
    # 102m's MSA is in Protenix's layout (mmcif_msa/3: its unpaired and pairing files): the same
    # rows, in alphafold3-pytorch's naming (the pairing file's query line left out)
    protenix = REAL / "msas" / "Protenix" / "mmcif_msa" / "3"
    if protenix.is_dir():
        rows = (protenix / "non_pairing.a3m").read_text().rstrip("\n") + "\n"
        rows += "".join((protenix / "pairing.a3m").read_text().splitlines(keepends=True)[2:])
        (msas / "102m-assembly1A_protein.a3m").write_text(rows)
    return ours, theirs, msas


def _without_waters(src: Path, dest: Path) -> None:
    """``src`` as ``dest`` without its waters: alphafold3-pytorch tokenizes them (102m: 155 of 357
    tokens), where its own training set has them removed beforehand, and featurecache leaves them
    out as AF3 does. Their rows of atom_site and of the non-polymer scheme (which alphafold3-pytorch
    reads as residues whose atoms are missing: tokens all the same) go; every other table stays."""
    import gemmi

    doc = gemmi.cif.read(str(src))
    block = doc.sole_block()
    for category, column in (("_atom_site.", "label_comp_id"), ("_pdbx_nonpoly_scheme.", "mon_id")):
        table = block.find(category, [column])
        for i in reversed([i for i, row in enumerate(table) if row[0] in ("HOH", "DOD")]):
            table.remove_row(i)
    doc.write_file(str(dest))


def _featurecache_side(store: Path, ids: list[str], n: int) -> dict[str, dict[str, Any]]:
    from featurecache.client import FeatureDataset
    from featurecache.client.assemble import collate
    from featurecache.client.sampler import SamplerFilter

    out: dict[str, dict[str, Any]] = {}
    for eid in ids:
        row: dict[str, Any] = {}
        for rows in MSA_ROWS:
            ds = FeatureDataset(store, infinite=True, seed=0, max_msa_rows=rows,
                                filters=SamplerFilter(ids=[eid]), **SETTINGS)  # fmt: skip
            cpu, wall, sample_cpu, collate_cpu, msa_rows, tokens = [], [], [], [], [], []
            for p in range(WARMUP + n):
                c, t = time.process_time(), time.perf_counter()
                s = ds.sample(p)
                c_sampled = time.process_time()
                collate([s])
                c_end, t = time.process_time(), time.perf_counter() - t
                if p >= WARMUP:
                    cpu.append((c_end - c) * 1e3)
                    wall.append(t * 1e3)
                    sample_cpu.append((c_sampled - c) * 1e3)
                    collate_cpu.append((c_end - c_sampled) * 1e3)
                    msa_rows.append(int(s["msa"].shape[0]))
                    tokens.append(int(s["restype"].shape[0]))
            ds.close()
            key = "" if rows == MSA_ROWS[0] else f"_{rows}"
            row[f"cpu_ms{key}"] = statistics.median(cpu)
            row[f"wall_ms{key}"] = statistics.median(wall)
            # the two parts of cpu_ms apart (medians of each: they need not add up to its median);
            # with every MSA row the batch's collate is a large share of the sample
            row[f"sample_cpu_ms{key}"] = statistics.median(sample_cpu)
            row[f"collate_cpu_ms{key}"] = statistics.median(collate_cpu)
            row[f"msa_rows{key}"] = statistics.median(msa_rows)
            row["crop_tokens"] = statistics.median(tokens)
        out[eid] = row
    return out


def _af3pt_side(
    python: Path,
    root: Path,
    structures: list[Path],
    msas: Path,
    repeats: int,
    tmp: Path,
    cap: int | None = None,
) -> dict[str, Any]:
    result = tmp / f"af3pt_{cap}.json"
    cmd = [str(python), str(FEATURIZE), *sorted(str(p) for p in structures), "--msa-dir", str(msas),
           "--workdir", str(root / "cwd"), "--repeats", str(repeats), "--cleared-repeats", str(repeats),
           "--json", str(result)] + ([] if cap is None else ["--max-msas-per-chain", str(cap)])  # fmt: skip
    log.info("alphafold3-pytorch: %s", " ".join(cmd))
    proc = subprocess.run(cmd, text=True, capture_output=True, check=False)
    if proc.returncode != 0 or not result.exists():
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"{FEATURIZE.name} exited {proc.returncode}")
    return json.loads(result.read_text())


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    python = _af3pt_python(args.af3pt)
    require_shared(__file__, ccd=True)
    names = [n.strip() for n in args.entries.split(",") if n.strip()]
    from featurecache.build.run import run_build
    from featurecache.store.reader import open_store

    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-vs-af3pt-"))
    try:
        ours, theirs, msas = _inputs(tmp, names)
        store = tmp / "store"
        t0 = time.perf_counter()
        summary = run_build(pdb_dir=ours, out=store, msa_dir=REAL / "msas", ccd=SHARED / "data" / "ccd",
                            workers=args.workers, progress=False)  # fmt: skip
        build_s = time.perf_counter() - t0
        reader = open_store(store)
        by_file = {Path(str(p)).name: str(i) for i, p in zip(reader.entries.column("id").to_pylist(),
                                                              reader.entries.column("source_path").to_pylist(), strict=True)}  # fmt: skip
        ids = [by_file[n] for n in names if n in by_file]
        whole = {
            str(r["id"]): r for r in reader.entries.select(["id", "token_count", "atom_count"]).to_pylist()
        }
        reader.close()
        bench = Bench("vs_alphafold3_pytorch", entries=names, samples=args.samples, repeats=args.repeats,
                      settings=SETTINGS, msa_rows=list(MSA_ROWS), build_workers=args.workers)  # fmt: skip
        ours_rows = _featurecache_side(store, ids, args.samples)
        theirs_doc = _af3pt_side(python, args.af3pt, list(theirs.iterdir()), msas, args.repeats, tmp)
        bench.params["af3pt"] = {k: v for k, v in theirs_doc.items() if k != "examples"}
        # its default keeps every MSA row, featurecache's train samples at most MSA_ROWS[0]: the same
        # cap on its side too (its max_msas_per_chain) for the entries whose MSAs are deeper
        deep = [
            Path(e["path"]) for e in theirs_doc["examples"] if e["summary"].get("msa_depth", 0) > MSA_ROWS[0]
        ]
        capped = (
            _af3pt_side(python, args.af3pt, deep, msas, args.repeats, tmp, cap=MSA_ROWS[0]) if deep else {}
        )
        theirs_by, capped_by = (
            {Path(e["path"]).name.replace("-assembly1.cif", ".cif"): e for e in doc.get("examples", [])}
            for doc in (theirs_doc, capped)
        )
        for name in names:
            eid = by_file.get(name)
            key = name.replace("-assembly1.cif", ".cif")
            row: dict[str, Any] = {"entry": eid or name, "tokens": whole.get(eid or "", {}).get("token_count"),
                                   "atoms": whole.get(eid or "", {}).get("atom_count")}  # fmt: skip
            row.update(ours_rows.get(eid or "", {"featurecache": "not built (see the build's failures)"}))
            for prefix, doc in (("af3pt", theirs_by.get(key)), ("af3pt_capped", capped_by.get(key))):
                if doc is not None:
                    row.update({f"{prefix}_{k}": v for k, v in doc.get("summary", {}).items()})
                    if doc.get("error"):
                        row[f"{prefix}_error"] = str(doc["error"])[:200]
            step = row.get("af3pt_cleared_cpu_s")
            if step is not None and row.get("cpu_ms"):
                # per example: its data path with its caches as a long run meets them, and its collate
                every = (step + (row.get("af3pt_collate_cpu_s") or 0.0)) * 1e3
                # every MSA row on both sides (featurecache: at most 16384, all of these MSAs)
                row["af3pt_over_featurecache_cpu_all_rows"] = every / row["cpu_ms_16384"]
                # at most 1024 on both sides (its cap is per chain; no cap binds on a shallower MSA)
                capped_step = row.get("af3pt_capped_cleared_cpu_s")
                at_cap = (
                    every if capped_step is None else (capped_step + row["af3pt_capped_collate_cpu_s"]) * 1e3
                )
                row["af3pt_over_featurecache_cpu_1024_rows"] = at_cap / row["cpu_ms"]
            bench.add(**row)
        bench.add(entry="(featurecache build, once)", build_wall_s=build_s, built=summary.n_built,
                  failed=summary.n_failed, build_s_per_entry=build_s / max(summary.n_built, 1))  # fmt: skip
        bench.finish(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
