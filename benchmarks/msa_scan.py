"""The MSA scan of a first build: each file read once and a3m queries found without rows, against
the scan before it (sniff_file, then parse_a3m / parse_sto reading and parsing each file in full).

Every file of the real MSA folder, scanned in one process (a build runs the same function in its Dask
tasks), ``--repeat`` times each way after a warm-up; wall and CPU seconds (the machine is shared: CPU
time is the steadier number), for the a3m files, the Stockholm files and all files. Both scans give the
same records (checked before timing).

    .venv/bin/python benchmarks/msa_scan.py [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, Bench, add_out_argument, require_shared
from featurecache.build.msa_stage import AlignmentScan, FileScan, _degap, _hashes, scan_msa_files
from featurecache.errors import InputError, MSAError
from featurecache.parse.a3m import parse_a3m, readable_queries
from featurecache.parse.hits import parse_hhr, parse_m8, sniff_file
from featurecache.parse.sto import StockholmAlignment, parse_sto, readable_alignments

MSAS = REAL / "msas"


def full_parse_scan(msa_dir: str, rels: list[str], wanted: set[str]) -> list[FileScan]:
    """The scan as it was: every file sniffed from disk, then parsed in full (read again)."""
    out = []
    for rel in rels:
        path = Path(msa_dir) / rel
        data = path.read_bytes()
        scan = FileScan(rel, len(data), sha256=hashlib.sha256(data).hexdigest())
        try:
            scan.fmt = sniff_file(path)
            if scan.fmt == "a3m":
                for msa in parse_a3m(path):
                    q = msa.query_sequence
                    scan.alignments.append(AlignmentScan(msa.block, 0, q, _hashes(q, wanted)))
                scan.n_alignments = len(scan.alignments)
            elif scan.fmt == "sto":
                for aln in parse_sto(path):
                    if aln.is_template_hits:
                        scan.n_template_hits += len(aln.names)
                        continue
                    scan.n_alignments += 1
                    matched = _matched_rows(aln, wanted)
                    scan.alignments += matched
                    if not matched and aln.names:
                        scan.alignments.append(AlignmentScan(aln.block, 0, _degap(aln.aligned[0]), ()))
            elif scan.fmt == "hhr":
                scan.n_template_hits = len(parse_hhr(path))
            elif scan.fmt == "m8":
                scan.n_template_hits = len(parse_m8(path))
        except (MSAError, InputError, UnicodeDecodeError, ValueError) as exc:
            scan.error_class, scan.message = type(exc).__name__, str(exc)[:2000]
            scan.alignments = []
            # what still reads of a failed a3m file: its queries (its failure names their chains); of
            # a failed Stockholm file, its rows that are a wanted chain's sequence
            if scan.fmt == "a3m":
                queries = readable_queries(data, path)
                scan.alignments = [AlignmentScan(k, 0, q, _hashes(q, wanted)) for k, q in enumerate(queries)]
            elif scan.fmt == "sto":
                for aln in readable_alignments(data, path):
                    if not aln.is_template_hits:
                        scan.alignments += _matched_rows(aln, wanted)
        out.append(scan)
    return out


def _matched_rows(aln: StockholmAlignment, wanted: set[str]) -> list[AlignmentScan]:
    """A Stockholm alignment's rows that are a wanted sequence: the first row of each hash."""
    found: dict[str, tuple[int, int]] = {}
    for i, row in enumerate(aln.aligned):
        for h, mt in _hashes(_degap(row), wanted):
            found.setdefault(h, (i, mt))
    by_row: dict[int, list[tuple[str, int]]] = {}
    for h, (i, mt) in found.items():
        by_row.setdefault(i, []).append((h, mt))
    return [AlignmentScan(aln.block, i, _degap(aln.aligned[i]), tuple(by_row[i])) for i in sorted(by_row)]


def _time(fn: object, rels: list[str], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``fn(MSAS, rels, set())`` over ``repeat`` runs after one."""
    walls, cpus = [], []
    for k in range(repeat + 1):
        w, c = time.perf_counter(), time.process_time()
        fn(str(MSAS), rels, set())  # type: ignore[operator]
        if k:
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each scan (default 5)")
    add_out_argument(ap, "msa_scan")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    require_shared(__file__)
    rels = sorted(p.relative_to(MSAS).as_posix() for p in MSAS.rglob("*") if p.is_file())
    new = scan_msa_files(str(MSAS), rels, set())
    assert new == full_parse_scan(str(MSAS), rels, set()), "the scans differ"
    groups = {
        "a3m": [sc.rel for sc in new if sc.fmt == "a3m"],
        "sto": [sc.rel for sc in new if sc.fmt == "sto"],
        "all": rels,
    }
    bench = Bench("msa_scan", repeat=args.repeat, files=len(rels))
    for name, group in groups.items():
        size = sum((MSAS / r).stat().st_size for r in group)
        old_wall, old_cpu = _time(full_parse_scan, group, args.repeat)
        new_wall, new_cpu = _time(scan_msa_files, group, args.repeat)
        bench.add(files=name, n=len(group), MiB=size / 2**20, parse_wall_s=old_wall, parse_cpu_s=old_cpu,
                  scan_wall_s=new_wall, scan_cpu_s=new_cpu, cpu_speedup=old_cpu / new_cpu)  # fmt: skip
    bench.finish(args.out)


if __name__ == "__main__":
    main()
