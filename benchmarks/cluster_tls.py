"""What TLS costs the embedded cluster (review R42c s52 #3): ``featurecache build`` with its
embedded cluster on TLS with per-build credentials (``featurecache.build.run._embedded_security``:
``Security.temporary()``, what the build does) against the same cluster on plain ``tcp://`` (what
it did before: this script swaps ``_embedded_security`` for Dask's ``Security()`` in the build's
process, nothing else changes).

Each run is one ``featurecache build`` CLI run (fork server, ``--workers N``) in a fresh process over
the same inputs into a new store: the repo's samples/structures and the first ``--real`` entries of
the shared corpus (data/real/structures; names the samples have are left out), with an
``--msa-dir`` holding both MSA trees (samples/msas and data/real/msas) and the shared CCD. Measured:
the run's wall time, the CPU of its whole process tree (the fork server and the workers reaped
through a child subreaper), and inside the build the time of ``_make_client`` (the cluster's start:
credentials, scheduler, workers, client) and of the credentials alone. The variants run strictly
alternating (tcp, tls, tcp, tls, ...), ``--repeat`` runs each after one warm-up run of each (page
cache, pyc files); medians. The machine is shared with other work: compare the ratios.

Run: ``.venv/bin/python benchmarks/cluster_tls.py [--workers 2] [--repeat 3] [--real 20] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, REPO, SHARED, Bench, add_out_argument, require_shared
from benchmarks.worker_start import _become_subreaper, run_tree

VARIANTS = ("tcp", "tls")
SAMPLES = REPO / "samples"

#: one CLI build (argv: variant, report file, the CLI's arguments); writes what it timed to the report
BUILD = """
import json, sys, time
from featurecache.build import run

variant, report, args = sys.argv[1], sys.argv[2], sys.argv[3:]
timed = {}
if variant == "tcp":  # the cluster as it was before R42c s52 #3: Dask's settings, plain tcp://
    from distributed.security import Security
    run._embedded_security = Security
credentials, make_client = run._embedded_security, run._make_client

def timed_credentials():
    t0 = time.perf_counter()
    try:
        return credentials()
    finally:
        timed["credentials_s"] = time.perf_counter() - t0

def timed_make_client(*a, **k):
    t0 = time.perf_counter()
    client, cluster = make_client(*a, **k)
    timed["cluster_start_s"] = time.perf_counter() - t0
    timed["scheduler"] = cluster.scheduler_address if cluster is not None else None
    return client, cluster

run._embedded_security, run._make_client = timed_credentials, timed_make_client
from featurecache.cli import app

sys.argv = ["featurecache", *args]
try:
    app()
finally:
    with open(report, "w") as f:
        json.dump(timed, f)
"""


def _inputs(tmp: Path, real: int) -> tuple[Path, Path, int]:
    """(--pdb-dir, --msa-dir, entries): symlinks to the samples' structures and the first ``real``
    of the corpus whose names the samples do not have; both MSA trees under one directory."""
    pdb, msa = tmp / "pdb", tmp / "msa"
    pdb.mkdir()
    msa.mkdir()
    for f in sorted((SAMPLES / "structures").iterdir()):
        (pdb / f.name).symlink_to(f)
    taken = {f.name.lower() for f in pdb.iterdir()} | {f.name.split(".")[0].lower() for f in pdb.iterdir()}
    added = 0
    for f in sorted((REAL / "structures").iterdir()):
        if added == real:
            break
        if not f.is_file() or f.name.startswith(".") or f.name.split(".")[0].lower() in taken:
            continue
        (pdb / f.name).symlink_to(f)
        taken.add(f.name.split(".")[0].lower())
        added += 1
    (msa / "samples").symlink_to(SAMPLES / "msas")
    (msa / "real").symlink_to(REAL / "msas")
    return pdb, msa, len(list(pdb.iterdir()))


def _one_build(
    variant: str, pdb: Path, msa: Path, ccd: Path, out: Path, workers: int
) -> dict[str, float | str]:
    report = out.parent / f"{out.name}.json"
    cmd = [sys.executable, "-c", BUILD, variant, str(report), "build", "--pdb-dir", str(pdb), "--msa-dir", str(msa),
           "--ccd", str(ccd), "--out", str(out), "--workers", str(workers), "--no-progress"]  # fmt: skip
    env = dict(os.environ, FEATURECACHE_DASHBOARD="0", PYTHONPATH=str(REPO))
    cpu, wall, proc = run_tree(cmd, env)
    if proc.returncode not in (0, 1):  # 1: some inputs failed, part of a corpus build
        raise SystemExit(f"{variant} build failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    timed = json.loads(report.read_text())
    scheduler = str(timed.get("scheduler"))
    if not scheduler.startswith(f"{variant}://"):
        raise SystemExit(f"the {variant} variant's cluster listened on {scheduler}")
    from featurecache import open_store

    store = open_store(out)
    try:
        entries = len(store.ids)
    finally:
        store.close()
    return {"wall_s": wall, "cpu_s": cpu, "cluster_start_s": timed["cluster_start_s"],
            "credentials_s": timed["credentials_s"], "entries": entries, "exit": proc.returncode}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2, help="embedded workers (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="measured runs per variant (default 3)")
    ap.add_argument("--real", type=int, default=20, help="entries of data/real/structures added (default 20)")
    ap.add_argument(
        "--ccd", type=Path, default=SHARED / "data" / "ccd", help="CCD (default: the shared data/ccd)"
    )
    add_out_argument(ap, "cluster_tls")
    args = ap.parse_args()
    if args.repeat < 1 or args.workers < 1 or args.real < 0:
        ap.error("--repeat and --workers must be at least 1, --real at least 0")
    require_shared(sys.argv[0])
    if not args.ccd.is_dir():
        ap.error(f"--ccd {args.ccd}: not a directory")
    _become_subreaper()
    runs: dict[str, list[dict[str, float | str]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="cluster-tls-") as tmp_s:
        tmp = Path(tmp_s)
        pdb, msa, n_inputs = _inputs(tmp, args.real)
        bench = Bench("cluster_tls", workers=args.workers, repeat=args.repeat, inputs=n_inputs,
                      inputs_from=["samples/structures", f"data/real/structures (first {args.real} others)"],
                      msa_dir=["samples/msas", "data/real/msas"], ccd=str(args.ccd), order="tcp, tls alternating",
                      load_before=os.getloadavg()[0])  # fmt: skip
        for variant in VARIANTS:  # warm-up, not counted
            _one_build(variant, pdb, msa, args.ccd, tmp / f"warm-{variant}", args.workers)
        for rep in range(args.repeat):
            for variant in VARIANTS:
                run = _one_build(variant, pdb, msa, args.ccd, tmp / f"{variant}-{rep}", args.workers)
                runs[variant].append(run)
                print(f"rep {rep} {variant}: wall {run['wall_s']:.2f} s, cpu {run['cpu_s']:.2f} s, cluster start "
                      f"{run['cluster_start_s']:.3f} s (credentials {run['credentials_s']:.3f} s), "
                      f"{run['entries']} entries", flush=True)  # fmt: skip
    entries = {r["entries"] for v in VARIANTS for r in runs[v]}
    if len(entries) != 1:
        raise SystemExit(f"the variants' stores differ in entries: {runs}")
    (n_entries,) = entries
    medians: dict[str, dict[str, float]] = {}
    for variant in VARIANTS:
        medians[variant] = {key: statistics.median(float(r[key]) for r in runs[variant])
                            for key in ("wall_s", "cpu_s", "cluster_start_s", "credentials_s")}  # fmt: skip
        bench.add(variant=variant, entries=n_entries, **medians[variant])
    tcp, tls = medians["tcp"], medians["tls"]
    bench.add(
        variant="tls / tcp", **{key: tls[key] / tcp[key] for key in ("wall_s", "cpu_s", "cluster_start_s")}
    )
    bench.add(variant="tls - tcp", **{key: tls[key] - tcp[key] for key in tcp})
    bench.params["runs"] = {v: [{k: round(x, 4) if isinstance(x, float) else x for k, x in r.items()} for r in runs[v]]
                            for v in VARIANTS}  # fmt: skip
    bench.params["load_after"] = os.getloadavg()[0]
    bench.finish(args.out)


if __name__ == "__main__":
    main()
