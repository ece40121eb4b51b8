"""Reference conformers: what computing them costs per component and per entry (cold), against
reading them from the store (cached) — the cost the cache takes out of every training step.

cold   = parse the component's CCD file + build the RDKit molecule + ETKDGv3 embedding (with the
         fallbacks), for every distinct component of the entry, as an uncached data pipeline
         would on each step that samples the entry.
cached = ``LocalStore.reference_features(entry)``: the join of the entry's atoms onto the
         in-memory component table (loaded once per process; its load time is its own row).

Both sides are timed in wall and CPU time (``time.process_time``; the machine is shared, CPU time is
the steadier one): cold as the median of ``--repeat // 2`` (at least 1) runs, cached as the median of
``4 × --repeat`` (at least 20) measurements of 50 back-to-back joins each (one join is well under a
millisecond). Speed-ups are given in both.

Run: ``.venv/bin/python benchmarks/chem.py [--entries 721p-assembly1.cif 102m.cif ...] [--repeat 5]
[--out FILE]``
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, SHARED, Bench, add_out_argument, percentile, require_shared, timeit

DEFAULT_ENTRIES = [
    "721p-assembly1.cif", "102m.cif", "8f9h.cif", "7CFN.cif", "7DDO.pdb", "2q2k.cif", "5zyh.cif",
    "1pfe.cif.gz", "209d-assembly1.cif", "7a4d-assembly1.cif",
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--entries",
        nargs="*",
        default=DEFAULT_ENTRIES,
        help="structure files under shared/data/real/structures",
    )
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each case (default 5)")
    ap.add_argument(
        "--timeout", type=float, default=20.0, help="conformer timeout per embedding attempt (s, default 20)"
    )
    add_out_argument(ap, "chem")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    require_shared(__file__, ccd=True)
    logging.basicConfig(level=logging.WARNING)

    import featurecache
    from featurecache.build.config import BuildConfig
    from featurecache.build.run import run_build
    from featurecache.chem.conformer import conformer_for_component
    from featurecache.const import decode_res_name
    from featurecache.parse.ccd import parse_component_file

    ccd_dir = SHARED / "data" / "ccd"
    bench = Bench("chem", entries=args.entries, repeat=args.repeat, timeout_s=args.timeout, ccd=str(ccd_dir))
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "in"
        inputs.mkdir()
        for name in args.entries:
            (inputs / name).symlink_to(REAL / "structures" / name)
        store_path = Path(tmp) / "store"
        t0 = time.perf_counter()
        summary = run_build(pdb_dir=inputs, out=store_path, ccd=ccd_dir, workers=2, progress=False,
                            config=BuildConfig(conformer_timeout_s=args.timeout))  # fmt: skip
        build_s = time.perf_counter() - t0
        chem = summary.stages.get("chem", {})
        store = featurecache.open_store(store_path)

        # one-time cost per process: the component table
        t0 = time.perf_counter()
        table = store.component_table()
        load_s = time.perf_counter() - t0
        rows = {r["key"]: r for r in store.components.to_pylist()}

        # cold, per component: parse + molecule + embedding, timed in this process
        cold: dict[str, float] = {}
        for key in sorted(rows):
            if "#" in key or not (ccd_dir / f"{key}.cif").is_file():
                continue
            path = ccd_dir / f"{key}.cif"

            def one(p: Path = path) -> None:
                conformer_for_component(parse_component_file(p), timeout_s=args.timeout)

            t = timeit(one, repeat=args.repeat, warmup=1)
            cold[key] = t["median_s"]
            bench.add(kind="component", name=key, n_heavy=rows[key]["n_heavy"], strategy=rows[key]["strategy"],
                      cold_ms=1e3 * t["median_s"], cold_cpu_ms=1e3 * t["cpu_median_s"],
                      cold_max_ms=1e3 * t["max_s"])  # fmt: skip

        # per entry: cold = every distinct component of the entry recomputed; cached = the join
        ratios, cpu_ratios = [], []
        for entry_id in store.ids:
            e = store.entry(entry_id, ["atoms", "tokens"])
            codes = sorted({decode_res_name(r) for r in e.tokens["res_name"]})
            codes = [c for c in codes if c in cold]
            paths = [ccd_dir / f"{c}.cif" for c in codes]

            def recompute(paths: list[Path] = paths) -> None:
                for p in paths:
                    conformer_for_component(parse_component_file(p), timeout_s=args.timeout)

            cold_t = timeit(recompute, repeat=max(1, args.repeat // 2), warmup=0)

            def join(e: Any = e) -> None:
                store.reference_features(e)

            cached_t = timeit(join, repeat=max(20, args.repeat * 4), warmup=5, number=50)
            ratios.append(cold_t["median_s"] / cached_t["median_s"])
            cpu_ratio = (
                cold_t["cpu_median_s"] / cached_t["cpu_median_s"] if cached_t["cpu_median_s"] > 0 else None
            )
            if cpu_ratio is not None:
                cpu_ratios.append(cpu_ratio)
            bench.add(kind="entry", name=entry_id, n_atoms=len(e.atoms["name"]), n_components=len(codes),
                      cold_ms=1e3 * cold_t["median_s"], cold_cpu_ms=1e3 * cold_t["cpu_median_s"],
                      cached_ms=1e3 * cached_t["median_s"], cached_cpu_ms=1e3 * cached_t["cpu_median_s"],
                      speedup=ratios[-1], speedup_cpu=cpu_ratio)  # fmt: skip

        vals = list(cold.values())
        bench.add(kind="summary", name="per component (cold)", n_components=len(vals),
                  cold_ms=1e3 * statistics.median(vals), cold_p95_ms=1e3 * percentile(vals, 95),
                  cold_max_ms=1e3 * max(vals))  # fmt: skip
        bench.add(kind="summary", name="per entry speedup cold/cached", speedup=statistics.median(ratios),
                  speedup_min=min(ratios), speedup_cpu=statistics.median(cpu_ratios) if cpu_ratios else None,
                  speedup_cpu_min=min(cpu_ratios) if cpu_ratios else None)  # fmt: skip
        bench.add(kind="summary", name="component table load (once per process)", cached_ms=1e3 * load_s,
                  n_components=len(table))  # fmt: skip
        bench.add(kind="summary", name="build (structures + chem stage, 2 workers)", cold_ms=1e3 * build_s,
                  chem_stage_s=chem.get("stage seconds"))  # fmt: skip
        for label in ("strategies (store)", "strategies (this run)"):
            if label in chem:
                bench.add(kind="strategy", name=label, count=chem[label])
        store.close()
    bench.finish(args.out)


if __name__ == "__main__":
    main()
