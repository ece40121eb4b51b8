"""How fast does the lookup service hand out entries, next to reading the same store locally?

One run, side by side, over the same request list (entry ids drawn uniformly, seeded):

* ``local``: ``LocalStore.entry(id)`` (every array) from threads of this process;
* ``http``: ``LookupClient.entry(id)`` against ``featurecache serve STORE --workers W`` (a child
  process on 127.0.0.1), from 1, 8 and 32 client threads sharing one pooled client;
* ``http batch``: ``entries_batch`` of 16 ids per request;
* ``msa``: a crop-sized MSA slice (up to 256 rows × 384 columns) of the deepest MSA, local vs HTTP.

Reported per row: latency p50/p99 (ms, per request), entries/s and MB/s of array payload
(numpy ``nbytes`` of what the caller gets back). Every measured pass follows a warm-up pass over
every id, so both sides read from the page cache. The client threads and the server share the
machine's cores (2 here): that is what a training node running its own lookup server looks like,
not a dedicated server.

Usage: ``.venv/bin/python benchmarks/serve.py [--store DIR] [--requests N] [--server-workers W] [--out FILE]``.
Without ``--store`` the real corpus (``../shared/data/real``: structures, MSAs, CCD) is built once
into a temp dir (resumable: a second run recomputes nothing).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.harness import (  # noqa: E402
    Bench,
    add_out_argument,
    corpus_store,
    percentile,
    store_argument,
    store_label,
)
from featurecache import open_store  # noqa: E402
from featurecache.client.http import LookupClient  # noqa: E402
from featurecache.types import Entry  # noqa: E402
from services.lookup.server import background_server  # noqa: E402

log = logging.getLogger("benchmarks.serve")

CONCURRENCY = (1, 8, 32)
BATCH = 16
MSA_ROWS, MSA_COLS = 256, 384


def entry_nbytes(e: Entry) -> int:
    return sum(a.nbytes for g in (e.atoms, e.tokens, e.bonds, e.interfaces) for a in g.values())


def run_pass(fn: Callable[[Any], int], items: Sequence[Any], threads: int) -> dict[str, float]:
    """Call ``fn(item)`` for every item from ``threads`` threads; per-call latency and totals."""
    latencies: list[float] = []

    def timed(item: Any) -> int:
        t0 = time.perf_counter()
        n = fn(item)
        latencies.append(time.perf_counter() - t0)
        return n

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        nbytes = sum(pool.map(timed, items))
    wall = time.perf_counter() - t0
    return {
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "wall_s": wall,
        "bytes": float(nbytes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--store",
        type=store_argument,
        default=None,
        help="An existing store (default: build the real corpus).",
    )
    ap.add_argument("--requests", type=int, default=600, help="Entry requests per pass (default 600).")
    ap.add_argument(
        "--server-workers", type=int, default=2, help="uvicorn worker processes of the server (default 2)."
    )
    ap.add_argument("--seed", type=int, default=0, help="Seed of the requested ids (default 0).")
    add_out_argument(ap, "serve")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("distributed", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    store_path = corpus_store(args.store, "serve-corpus", log)
    local = open_store(store_path)
    ids = local.ids
    rng = random.Random(args.seed)
    requests = [rng.choice(ids) for _ in range(args.requests)]
    mean_bytes = float(np.mean([entry_nbytes(local.entry(i)) for i in ids]))
    bench = Bench(
        "serve", store=store_label(args.store), entries=len(ids), requests=len(requests), seed=args.seed,
        server_workers=args.server_workers, mean_entry_kb=round(mean_bytes / 1e3, 1), batch=BATCH,
    )  # fmt: skip

    def add(source: str, threads: int, n_entries: int, r: dict[str, float]) -> None:
        bench.add(
            source=source, concurrency=threads, requests=n_entries, p50_ms=r["p50_ms"], p99_ms=r["p99_ms"],
            entries_per_s=n_entries / r["wall_s"], MB_per_s=r["bytes"] / r["wall_s"] / 1e6,
        )  # fmt: skip

    def local_entry(i: str) -> int:
        return entry_nbytes(local.entry(i))

    run_pass(local_entry, ids, 4)  # warm the page cache and zarr handles
    for threads in CONCURRENCY:
        add("local", threads, len(requests), run_pass(local_entry, requests, threads))

    with background_server(store_path, workers=args.server_workers) as url:
        client = LookupClient(url, max_connections=max(CONCURRENCY))

        def http_entry(i: str) -> int:
            return entry_nbytes(client.entry(i))

        def http_batch(batch: list[str]) -> int:
            return sum(entry_nbytes(e) for e in client.entries_batch(batch))

        run_pass(http_entry, ids, 8)  # warm-up: connections, server-side zarr handles, page cache
        for threads in CONCURRENCY:
            add("http", threads, len(requests), run_pass(http_entry, requests, threads))
        batches = [requests[k : k + BATCH] for k in range(0, len(requests), BATCH)]
        r = run_pass(http_batch, batches, 8)
        bench.add(source=f"http batch({BATCH})", concurrency=8, requests=len(batches), p50_ms=r["p50_ms"],
                  p99_ms=r["p99_ms"], entries_per_s=len(requests) / r["wall_s"],
                  MB_per_s=r["bytes"] / r["wall_s"] / 1e6)  # fmt: skip

        if local.msas.num_rows:
            deepest = max(local.msas.to_pylist(), key=lambda m: m["depth"] * m["length"])
            key, depth, length = deepest["key"], deepest["depth"], deepest["length"]
            picks = []
            for _ in range(64):
                rows = np.sort(np.r_[0, rng.sample(range(1, depth), min(MSA_ROWS, depth) - 1)]).astype(
                    np.int64
                )
                start = rng.randrange(max(1, length - MSA_COLS + 1))
                picks.append((rows, np.arange(start, min(length, start + MSA_COLS))))

            def msa_local(p: tuple[np.ndarray, np.ndarray]) -> int:
                b = local.msa(key, p[0], p[1])
                return int(b.residues.nbytes + b.deletions.nbytes)

            def msa_http(p: tuple[np.ndarray, np.ndarray]) -> int:
                b = client.msa(key, p[0], p[1])
                return int(b.residues.nbytes + b.deletions.nbytes)

            run_pass(msa_local, picks[:8], 1)
            run_pass(msa_http, picks[:8], 1)
            label = f"msa {min(MSA_ROWS, depth)}x{min(MSA_COLS, length)} of {depth}x{length}"
            for source, fn in (("local " + label, msa_local), ("http " + label, msa_http)):
                for threads in (1, 8):
                    r = run_pass(fn, picks, threads)
                    bench.add(source=source, concurrency=threads, requests=len(picks), p50_ms=r["p50_ms"],
                              p99_ms=r["p99_ms"], slices_per_s=len(picks) / r["wall_s"],
                              MB_per_s=r["bytes"] / r["wall_s"] / 1e6)  # fmt: skip
        client.close()
    bench.finish(args.out)


if __name__ == "__main__":
    main()
