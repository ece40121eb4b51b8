"""A no-op rebuild with and without the structure digest cache (``STORE/cache/structure_digests.arrow``).

``--copies N`` copies of small real structure files (cycling through :data:`FILES`, distinct names,
so distinct entries) under ``--dir`` are built once; then no-op rebuilds (nothing to build) alternate,
``--repeats`` times each, in one process: *before* lists ``--pdb-dir`` as the build did before the
cache (``discover`` without ``cache_root``: every file read and hashed, 4 threads), *after* as it
does now (a file whose stat is the one kept is not read). Per variant, medians of the build's wall
time, of ``discover``'s own time, and the bytes this process read (``rchar`` of ``/proc/self/io``:
the driver lists --pdb-dir; a no-op build's workers read no input). The files sit in the page cache,
so the seconds are those of a local disk at best; on network storage each byte read costs more.
The first build is timed apart (``first_build_s`` in the parameters); the result's ``seconds``
cover the whole run, copies and first build included.

    .venv/bin/python benchmarks/structure_digests.py [--copies 2000] [--dir DIR] [--workers 1]
        [--repeats 3] [--out FILE]

``--dir`` defaults to ``featurecache-structure-digests`` under the temp dir (``$TMPDIR``, else /tmp);
its inputs are kept for the next run with the same ``--copies``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, Bench, add_out_argument, require_shared
from featurecache.build import run as build_run
from featurecache.build.run import run_build

#: small real inputs of several formats (8-43 kB)
FILES = ("1lzh.pdb.gz", "2n0n_M1.pdb", "209d-assembly1.cif", "1pfe.cif.gz")


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def _inputs(where: Path, copies: int) -> Path:
    pdb = where / "pdb"
    if pdb.is_dir() and len(list(pdb.iterdir())) == copies:
        return pdb
    shutil.rmtree(pdb, ignore_errors=True)
    pdb.mkdir(parents=True)
    for k in range(copies):
        name = FILES[k % len(FILES)]
        shutil.copy(REAL / "structures" / name, pdb / f"c{k:05d}_{name}")
    return pdb


def default_dir() -> Path:
    """Where inputs and store go without ``--dir``: under the temp dir, which honours ``$TMPDIR``."""
    return Path(tempfile.gettempdir()) / "featurecache-structure-digests"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=2000, help="structure files (default 2000)")
    ap.add_argument("--dir", type=Path, default=None, metavar="DIR",
                    help="where inputs and store go (default TMPDIR/featurecache-structure-digests)")  # fmt: skip
    ap.add_argument("--workers", type=int, default=1, help="build workers (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="no-op builds of each variant (default 3)")
    add_out_argument(ap, "structure_digests")
    args = ap.parse_args(argv)
    args.dir = args.dir or default_dir()
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    require_shared(__file__)
    # started before the copies and the first build, so that its seconds cover the whole run
    bench = Bench("structure_digests", copies=args.copies, workers=args.workers, repeats=args.repeats)
    pdb, store = _inputs(args.dir, args.copies), args.dir / "store"
    input_bytes = sum(p.stat().st_size for p in pdb.iterdir())
    time.sleep(2.5)  # copies just written keep no digest (the racy window): let them settle
    t0 = time.perf_counter()
    first = run_build(pdb_dir=pdb, out=store, workers=args.workers, progress=False, dashboard=False)
    first_s = time.perf_counter() - t0
    bench.params.update(input_MB=input_bytes / 1e6, first_build_s=round(first_s, 2))
    print(f"first build: {first.n_built} built, {first.n_failed} failed, {first.n_skipped} skipped "
          f"in {first_s:.1f} s", file=sys.stderr)  # fmt: skip

    real_discover = build_run.discover
    discover_s: list[float] = []

    def timed_discover(*a: Any, before: bool, **kw: Any) -> Any:
        if before:
            kw.pop("cache_root", None)
        t = time.perf_counter()
        try:
            return real_discover(*a, **kw)
        finally:
            discover_s.append(time.perf_counter() - t)

    rows: dict[str, dict[str, list[float]]] = {
        v: {"wall": [], "discover": [], "read": []} for v in ("before", "after")
    }
    for _ in range(args.repeats):
        for variant in ("before", "after"):
            before = variant == "before"
            build_run.discover = lambda *a, _b=before, **kw: timed_discover(*a, before=_b, **kw)  # type: ignore[assignment]
            try:
                r0, t = _rchar(), time.perf_counter()
                s = run_build(pdb_dir=pdb, out=store, workers=args.workers, progress=False, dashboard=False)
                wall, read = time.perf_counter() - t, _rchar() - r0
            finally:
                build_run.discover = real_discover
            assert s.n_built == 0 and s.n_skipped == args.copies, (variant, s.n_built, s.n_skipped)
            rows[variant]["wall"].append(wall)
            rows[variant]["discover"].append(discover_s[-1])
            rows[variant]["read"].append(read)
    for variant, r in rows.items():
        bench.add(variant=variant, build_s=statistics.median(r["wall"]), discover_s=statistics.median(r["discover"]),
                  read_MB=statistics.median(r["read"]) / 1e6, build_s_all=" ".join(f"{x:.1f}" for x in r["wall"]),
                  discover_s_all=" ".join(f"{x:.2f}" for x in r["discover"]))  # fmt: skip
    bench.finish(args.out)


if __name__ == "__main__":
    main()
