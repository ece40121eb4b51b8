"""Sampler(weighting="af3") construction at scale: the vectorised units and weights against the per-row Python code they replaced (review F3), side by side in one run.

A store's real index tables (entries, chains, interfaces; default: the real corpus built once into
the temp dir by benchmarks/harness.py ``corpus_store``, 57 entries, 4.4 chains and 5.5 interfaces per
entry) are repeated under distinct entry ids to each of ``--sizes`` entries and sorted as a store
sorts them. Per size: seconds of ``Sampler(entries, chains, interfaces, weighting="af3")`` with this
tree's code and with the old ``_af3_units`` (kept below as ``OLD_*``, swapped in around its calls),
and of ``weighting="uniform"`` for scale; both af3 sides are checked to give the same units and
bitwise the same probabilities. Memory (unless ``--skip-memory``): a fresh interpreter per size and
side builds the tables, then measures the construction alone: RSS it still holds after it (the
sampler alive; before and after, garbage collected and the free memory of Arrow's pool and of
glibc's heap handed back, so allocator caches do not count) and its peak RSS over the RSS before it
(``VmHWM`` reset through ``/proc/self/clear_refs``).

    .venv/bin/python benchmarks/sampler_scale.py [--store STORE] [--sizes N,N,...] [--repeat N]
                                                 [--skip-memory] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import logging
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS_DIR, Bench, corpus_store, store_argument, store_label, timeit
from featurecache.client import sampler as sampler_module
from featurecache.client.sampler import AF3_BETA_CHAIN, AF3_BETA_INTERFACE, Sampler, _type_weight
from featurecache.errors import InvalidRequest

log = logging.getLogger("sampler_scale")
SIZES = (2_000, 10_000, 50_000, 200_000)
SIDES = ("old", "new")


# ------------------------------------------------------------------------------------------------
# OLD CODE, for the A/B only: featurecache/client/sampler.py's _af3_units, _cluster_sizes and
# _chain_clusters before the vectorised rewrite (commit 975d523), verbatim but for the OLD_ names
# (_type_weight, which the rewrite kept as it was, is imported).
def OLD_af3_units(
    entry_ids: list[str], chains: pa.Table, interfaces: pa.Table, cluster_table: pa.Table | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Units (entry row, (chain_a, chain_b)) and their unnormalized AF3 weights."""
    row_of = {e: i for i, e in enumerate(entry_ids)}
    ids = pa.array(entry_ids, pa.string())
    ch = chains.filter(pc.is_in(chains.column("entry_id"), ids))
    if "n_resolved" in ch.column_names:
        ch = ch.filter(pc.greater(pc.fill_null(ch.column("n_resolved"), 0), 0))
    ch_entry = [str(x) for x in ch.column("entry_id").to_pylist()]
    ch_asym = np.asarray(ch.column("asym_id").to_pylist(), dtype=np.int64)
    ch_type = np.asarray(ch.column("mol_type").to_pylist(), dtype=np.int64)
    ch_cluster = OLD_chain_clusters(ch, ch_entry, ch_asym, cluster_table)
    chain_key = {(e, int(a)): i for i, (e, a) in enumerate(zip(ch_entry, ch_asym.tolist(), strict=True))}

    itf = interfaces.filter(pc.is_in(interfaces.column("entry_id"), ids))
    i_entry = [str(x) for x in itf.column("entry_id").to_pylist()]
    i_a = itf.column("chain_i").to_pylist()
    i_b = itf.column("chain_j").to_pylist()
    i_rows: list[tuple[int, int]] = []
    i_pairs: list[tuple[int, int]] = []
    for e, a, b in zip(i_entry, i_a, i_b, strict=True):
        ka, kb = chain_key.get((e, int(a))), chain_key.get((e, int(b)))
        if ka is not None and kb is not None:  # both chains resolved and kept
            i_rows.append((ka, kb))
            i_pairs.append((int(a), int(b)))

    # chain units
    n_c = len(ch_entry)
    c_entry = np.asarray([row_of[e] for e in ch_entry], dtype=np.int64)
    c_size = OLD_cluster_sizes(ch_cluster)
    c_w = AF3_BETA_CHAIN / c_size * _type_weight(ch_type)
    c_units = (
        np.stack([ch_asym, np.full(n_c, -1, dtype=np.int64)], axis=1) if n_c else np.zeros((0, 2), np.int64)
    )

    # interface units
    if i_rows:
        ra = np.asarray([r[0] for r in i_rows], dtype=np.int64)
        rb = np.asarray([r[1] for r in i_rows], dtype=np.int64)
        pair_cluster = [
            "|".join(sorted((ch_cluster[x], ch_cluster[y])))
            for x, y in zip(ra.tolist(), rb.tolist(), strict=True)
        ]
        i_size = OLD_cluster_sizes(pair_cluster)
        i_w = AF3_BETA_INTERFACE / i_size * (_type_weight(ch_type[ra]) + _type_weight(ch_type[rb]))
        i_entry_rows = c_entry[ra]
        i_units = np.asarray(i_pairs, dtype=np.int64)
    else:
        i_w = np.zeros(0)
        i_entry_rows = np.zeros(0, dtype=np.int64)
        i_units = np.zeros((0, 2), dtype=np.int64)
    return (
        np.concatenate([c_entry, i_entry_rows]),
        np.concatenate([c_units, i_units]),
        np.concatenate([c_w, i_w]).astype(np.float64),
    )


def OLD_cluster_sizes(labels: Sequence[str]) -> np.ndarray:
    if not labels:
        return np.zeros(0)
    enc = pa.array(list(labels), pa.string()).dictionary_encode()
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.bincount(codes)[codes].astype(np.float64)


def OLD_chain_clusters(
    ch: pa.Table, ch_entry: list[str], ch_asym: np.ndarray, cluster_table: pa.Table | None
) -> list[str]:
    default = [f"seq:{h}" for h in ch.column("sequence_hash").to_pylist()]
    if cluster_table is None:
        return default
    cols = set(cluster_table.column_names)
    if "cluster_id" not in cols or "entry_id" not in cols or not ({"asym_id", "label_id"} & cols):
        raise InvalidRequest("cluster_table needs columns entry_id, cluster_id and asym_id or label_id")
    t_entry = [str(x) for x in cluster_table.column("entry_id").to_pylist()]
    t_cluster = [f"table:{x}" for x in cluster_table.column("cluster_id").to_pylist()]
    out = list(default)
    n_hit = 0
    if "asym_id" in cols:
        lookup = {
            (e, int(a)): c
            for e, a, c in zip(t_entry, cluster_table.column("asym_id").to_pylist(), t_cluster, strict=True)
        }
        for i, (e, a) in enumerate(zip(ch_entry, ch_asym.tolist(), strict=True)):
            c = lookup.get((e, int(a)))
            if c is not None:
                out[i], n_hit = c, n_hit + 1
    else:
        lookup_l = {
            (e, str(lbl)): c
            for e, lbl, c in zip(
                t_entry, cluster_table.column("label_id").to_pylist(), t_cluster, strict=True
            )
        }
        labels = [str(x) for x in ch.column("label_id").to_pylist()]
        for i, (e, lbl) in enumerate(zip(ch_entry, labels, strict=True)):
            c = lookup_l.get((e, lbl))
            if c is not None:
                out[i], n_hit = c, n_hit + 1
    if n_hit < len(out):
        log.info(
            "cluster table covers %d of %d chains; the rest cluster by identical sequence", n_hit, len(out)
        )
    return out


# END OF OLD CODE --------------------------------------------------------------------------------


@contextlib.contextmanager
def side(name: str) -> Iterator[None]:
    """The Sampler of this tree (``new``) or with the old ``_af3_units`` swapped in (``old``)."""
    current = sampler_module._af3_units
    if name == "old":
        sampler_module._af3_units = OLD_af3_units
    try:
        yield
    finally:
        sampler_module._af3_units = current


def repeated_tables(store: Path, n_entries: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The store's entries, chains and interfaces copied under ids ``<id>~<copy>`` until there are
    ``n_entries`` entries (chains and interfaces of those entries only), sorted as a store sorts them."""
    from featurecache import open_store
    from featurecache.store.index import sorted_index_table

    reader = open_store(store)
    try:
        entries, chains, interfaces = reader.entries, reader.chains, reader.interfaces
    finally:
        reader.close()
    copies = math.ceil(n_entries / entries.num_rows)

    def renamed(t: pa.Table, column: str, c: int) -> pa.Table:
        ids = pc.binary_join_element_wise(t.column(column), f"~{c}", "")
        return t.set_column(t.column_names.index(column), column, ids)

    big_entries = pa.concat_tables([renamed(entries, "id", c) for c in range(copies)]).slice(0, n_entries)
    keep = big_entries.column("id")
    out = [sorted_index_table("entries", big_entries)]
    for name, table in (("chains", chains), ("interfaces", interfaces)):
        big = pa.concat_tables([renamed(table, "entry_id", c) for c in range(copies)])
        out.append(sorted_index_table(name, big.filter(pc.is_in(big.column("entry_id"), keep))))
    return out[0], out[1], out[2]


def _memory(field: str) -> float:
    """MiB of ``Vm<field>`` of this process."""
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^Vm{field}:\s+(\d+) kB", text, re.M).group(1)) / 1024  # type: ignore[union-attr]


def _settle() -> None:
    """Free what is garbage and hand the allocators' free memory back (Arrow's pool, glibc's heap),
    so that RSS counts what is held, not what an allocator keeps for reuse."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _child(store: str, n_entries: int, side_name: str) -> None:
    """Runs in a fresh interpreter: RSS of one construction, one JSON line on stdout."""
    entries, chains, interfaces = repeated_tables(Path(store), n_entries)
    _settle()
    before = _memory("RSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    with side(side_name):
        t0 = time.perf_counter()
        sampler = Sampler(entries, chains, interfaces, weighting="af3")
        seconds = time.perf_counter() - t0
    _settle()
    doc = {"kept_mib": _memory("RSS") - before, "peak_mib": _memory("HWM") - before, "seconds": seconds,
           "units": sampler.n_units}  # fmt: skip
    sys.stdout.write(json.dumps(doc) + "\n")


def bench_size(bench: Bench, store: Path, n_entries: int, repeat: int, memory: bool) -> None:
    entries, chains, interfaces = repeated_tables(store, n_entries)
    built = {}
    times = {}
    for name in SIDES:
        with side(name):
            times[name] = timeit(lambda: Sampler(entries, chains, interfaces, weighting="af3"), repeat=repeat,
                                 warmup=0)  # fmt: skip
            built[name] = Sampler(entries, chains, interfaces, weighting="af3")
    old, new = built["old"], built["new"]
    identical = (
        np.array_equal(old._unit_entry, new._unit_entry)
        and np.array_equal(old._unit_chains, new._unit_chains)
        and np.array_equal(old.unit_probabilities, new.unit_probabilities)
    )
    if not identical:
        raise SystemExit(f"sampler_scale: old and new af3 units differ at {n_entries} entries")
    uniform = timeit(lambda: Sampler(entries), repeat=repeat, warmup=0)
    row = {
        "entries": n_entries, "chains": chains.num_rows, "interfaces": interfaces.num_rows, "units": new.n_units,
        "old_s": times["old"]["median_s"], "new_s": times["new"]["median_s"], "uniform_s": uniform["median_s"],
        "old_cpu_s": times["old"]["cpu_median_s"], "new_cpu_s": times["new"]["cpu_median_s"],
        "speedup": times["old"]["median_s"] / times["new"]["median_s"], "identical": identical,
    }  # fmt: skip
    if memory:
        for name in SIDES:
            out = subprocess.run([sys.executable, __file__, "--_child", str(store), str(n_entries), name],
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
            doc = json.loads(out.strip().splitlines()[-1])
            row[f"{name}_peak_mib"] = doc["peak_mib"]
            row[f"{name}_kept_mib"] = doc["kept_mib"]
    bench.add(**row)
    log.info("%d entries: old %.3f s, new %.3f s", n_entries, row["old_s"], row["new_s"])


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=store_argument, default=None, metavar="STORE",
                    help="store whose index tables are repeated (default: the real corpus, built once)")  # fmt: skip
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES), metavar="N,N,...",
                    help=f"entry counts to repeat the tables to (default {','.join(str(s) for s in SIZES)})")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=3, metavar="N",
                    help="timed constructions per size and side; the median is reported (default 3)")  # fmt: skip
    ap.add_argument("--skip-memory", action="store_true", help="leave out the RSS measurements")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "sampler_scale.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/sampler_scale.json)")  # fmt: skip
    ap.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes: comma-separated entry counts, got {args.sizes!r}")
    if args.repeat < 1 or min(args.sizes) < 1:
        ap.error("--repeat and every size must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    if args._child:
        store, n_entries, side_name = args._child
        _child(store, int(n_entries), side_name)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("featurecache").setLevel(logging.WARNING)
    store = corpus_store(args.store, "sampler-corpus", log)
    bench = Bench("sampler_scale", store=store_label(args.store), sizes=args.sizes, repeat=args.repeat)
    for n in args.sizes:
        bench_size(bench, store, n, args.repeat, not args.skip_memory)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
