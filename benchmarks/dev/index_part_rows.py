"""Same-run A/B: ``index/.part-rows`` written uncompressed vs zstd (store.index.PART_ROWS_COMPRESSION).

Builds an index-only copy of a real store whose structure parts' ``_index`` tables are replicated
COPIES times (entry ids made unique; MSA and component parts as they are), then, alternately for
each setting, adds one structure part and times the incremental index rebuild (CPU seconds of this
process: the machine is shared) and reports the sizes. Replicated rows compress better than a real
store's (the real store's own .part-rows: about 2x).

    .venv/bin/python benchmarks/dev/index_part_rows.py STORE WORKDIR [--copies 1000] [--reps 8]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import pyarrow as pa

import featurecache.store.index as ix
from featurecache.store.index import complete_parts, read_table, rebuild_index, write_table


def _copy_index(src: Path, dst: Path, suffix: str) -> None:
    """A part's ``_index`` with every entry id suffixed (a new entry each)."""
    dst.mkdir(parents=True)
    for f in (src / "_index").glob("*.arrow"):
        t = read_table(f, memory_map=False)
        for col in ("id", "entry_id"):
            if col in t.column_names and t.num_rows:
                ids = [f"{v}~{suffix}" for v in t.column(col).to_pylist()]
                t = t.set_column(t.column_names.index(col), col, pa.array(ids))
        write_table(dst / f.name, t)
    shutil.copy(src / "_index" / "part.json", dst / "part.json")


def make(src: Path, dst: Path, copies: int) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "parts").mkdir(parents=True)
    shutil.copy(src / "zarr.json", dst / "zarr.json")
    s_parts = [p for p in complete_parts(src) if p.name.startswith("s-")]
    for p in complete_parts(src):
        if not p.name.startswith("s-"):
            shutil.copytree(p / "_index", dst / "parts" / p.name / "_index")
    n = 0
    for k in range(copies):
        for p in s_parts:
            _copy_index(p, dst / "parts" / f"s-{n:06d}" / "_index", str(k))
            n += 1


def main() -> None:
    first = (__doc__ or "").split("\n\n")[0]
    ap = argparse.ArgumentParser(description=first)
    ap.add_argument("store", type=Path, help="a built store whose parts' _index tables are replicated")
    ap.add_argument("work", type=Path, help="a scratch directory (replaced)")
    ap.add_argument("--copies", type=int, default=1000, help="times the structure parts are replicated")
    ap.add_argument("--reps", type=int, default=8, help="incremental rebuilds per setting")
    args = ap.parse_args()
    if args.copies < 1 or args.reps < 1:
        ap.error("--copies and --reps must be at least 1")
    src, work, copies, reps = args.store, args.work, args.copies, args.reps
    base = work / "base"
    make(src, base, copies)
    settings: dict[str, str | None] = {"none": None, "zstd": "zstd"}
    stores = {}
    for name, comp in settings.items():
        d = work / name
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        ix.PART_ROWS_COMPRESSION = comp
        rebuild_index(d, incremental=False)
        stores[name] = d
    times: dict[str, list[float]] = {n: [] for n in stores}
    for k in range(reps):
        for name, d in stores.items():
            ix.PART_ROWS_COMPRESSION = settings[name]
            _copy_index(d / "parts" / "s-000000", d / "parts" / f"s-9{k:05d}" / "_index", f"new{k}")
            t0 = time.process_time()
            rebuild_index(d)
            times[name].append(time.process_time() - t0)
    n_entries = read_table(stores["none"] / "index" / "entries.arrow").num_rows
    print(f"{n_entries} entries, {len(complete_parts(stores['none']))} parts")
    print(
        "| .part-rows | incremental rebuild, one new part (CPU s, median / min) | .part-rows bytes | index bytes |"
    )
    print("| --- | --- | --- | --- |")
    for name, d in stores.items():
        rows = sum(f.stat().st_size for f in (d / "index" / ".part-rows").glob("*.arrow"))
        index = sum(f.stat().st_size for f in (d / "index").glob("*.arrow"))
        t = times[name]
        print(f"| {name} | {statistics.median(t):.3f} / {min(t):.3f} | {rows} | {index} |")


if __name__ == "__main__":
    main()
