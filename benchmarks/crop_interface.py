"""Interface detection for spatial-interface crops (review R14 s40): the tokens of a chain within
15 A of another chain, found by k-d trees (``client.crop.interface_tokens``, now) against the dense
comparison it replaced (blocks of 2048 of the chain's tokens against every other token, float64
``[2048, n_other, 3]``), side by side in one process: milliseconds, numpy memory (tracemalloc peak)
and whether both find the same tokens.

Cases: the largest chain of 1ffk (the 50S ribosomal subunit: its 23S rRNA against the other chains)
and every chain of it in turn (an entry whose interface table is empty), read from
../shared/data/real/structures; and a synthetic chain of 3,000 tokens among 12,000 tokens of 40
other chains in a 150 A box.

    .venv/bin/python benchmarks/crop_interface.py [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, Bench, add_out_argument, require_shared
from featurecache.client.crop import INTERFACE_CROP_CUTOFF, CropInput, interface_tokens
from featurecache.featurize.entry import featurize_bytes

#: rows of a distance block in the dense comparison (what bounded its memory)
DENSE_BLOCK = 2048


def dense_interface_tokens(
    inp: CropInput, chains: list[int], cutoff: float = INTERFACE_CROP_CUTOFF
) -> np.ndarray:
    """The baseline: ``interface_tokens`` as it was (one chain, or every chain in turn), by dense blocks."""
    res = inp.is_resolved
    groups = [chains] if chains else [[c] for c in np.unique(inp.asym_id[res]).tolist()]
    out = []
    for group in groups:
        a = np.flatnonzero(res & np.isin(inp.asym_id, group))
        b = np.flatnonzero(res & ~np.isin(inp.asym_id, group))
        near = np.zeros(a.size, dtype=bool)
        if a.size and b.size:
            pa, pb = inp.centre[a].astype(np.float64), inp.centre[b].astype(np.float64)
            in_a = np.all((pa >= pb.min(0) - cutoff) & (pa <= pb.max(0) + cutoff), axis=1)
            in_b = np.all((pb >= pa.min(0) - cutoff) & (pb <= pa.max(0) + cutoff), axis=1)
            ia, ib = np.flatnonzero(in_a), np.flatnonzero(in_b)
            for s in range(0, ia.size, DENSE_BLOCK):
                rows = ia[s : s + DENSE_BLOCK]
                d2 = ((pa[rows, None, :] - pb[None, ib, :]) ** 2).sum(-1)
                near[rows] = (d2 < cutoff * cutoff).any(1)
        out.append(a[near])
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def _measure(fn: Callable[[], np.ndarray], repeat: int) -> tuple[float, float, np.ndarray]:
    """(median ms, peak numpy MiB of one call, result)."""
    got = fn()  # warm (scipy's import, first allocations)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return float(np.median(times)), peak / 2**20, got


def _synthetic(n_a: int, n_b: int, box: float) -> CropInput:
    rng = np.random.default_rng(0)
    n = n_a + n_b
    asym = np.concatenate([np.zeros(n_a, np.int64), 1 + np.arange(n_b) % 40])
    return CropInput(asym_id=asym, is_resolved=np.ones(n, bool), centre=(rng.random((n, 3)) * box).astype(np.float32),
                     atom_count=np.full(n, 8), group=np.arange(n, dtype=np.int64),
                     interfaces=np.zeros((0, 2), np.int64))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="timed calls per case and method (median)")
    add_out_argument(ap, "crop_interface")
    args = ap.parse_args(argv)
    require_shared(__file__)
    path = REAL / "structures" / "1ffk.cif.gz"
    s = featurize_bytes(path.read_bytes(), path.name, "1ffk")

    def cols(records: np.ndarray) -> dict[str, np.ndarray]:  # an entry's columns, as the reader gives them
        return {n: records[n] for n in records.dtype.names or ()}

    ffk = CropInput.from_arrays(cols(s.tokens), cols(s.atoms), cols(s.bonds), cols(s.interfaces)).per_token()
    largest = int(np.bincount(ffk.asym_id).argmax())
    cases: list[tuple[str, CropInput, list[int]]] = [
        ("1ffk, its largest chain", ffk, [largest]),
        ("1ffk, every chain in turn", ffk, []),
        ("synthetic: 3,000 tokens among 15,000", _synthetic(3000, 12000, 150.0), [0]),
    ]
    bench = Bench(
        "crop_interface", repeat=args.repeat, cutoff_A=INTERFACE_CROP_CUTOFF, dense_block=DENSE_BLOCK
    )
    for name, inp, chains in cases:
        dense_ms, dense_mib, want = _measure(partial(dense_interface_tokens, inp, chains), args.repeat)
        kd_ms, kd_mib, got = _measure(partial(interface_tokens, inp, chains), args.repeat)
        chain_tokens = int(np.isin(inp.asym_id, chains).sum()) if chains else None
        bench.add(case=name, tokens=inp.n_tokens, chain_tokens=chain_tokens, interface_tokens=int(got.size),
                  same_tokens=bool(np.array_equal(got, want)), dense_ms=dense_ms, kdtree_ms=kd_ms,
                  speedup=dense_ms / kd_ms, dense_peak_mib=dense_mib, kdtree_peak_mib=kd_mib)  # fmt: skip
    bench.finish(args.out)


if __name__ == "__main__":
    main()
