"""What does one training sample cost at train's settings, and what did the per-step MSA reads
cost before session 26? CPU time per sample, side by side in one process.

Settings are ``featurecache train``'s: ``FeatureDataset(crop_size=384, weighting="af3",
max_msa_rows=1024, pair_msa=True)`` (default crop weights, per-token crops), seed 0. Under af3
weighting the large multi-chain entries dominate the stream (on the real corpus 1ffk is a third
of the samples), so this is not the uniform-weighting ``sample_ms`` of benchmarks/loader.py.

(a) ``--samples`` stream positions (after 5 warm-up samples) drawn one at a time in this process,
    ``--repeats`` rounds; CPU time (``time.process_time``: every thread of this process, zarr's
    event-loop thread included) and wall time per sample. Reported: median, mean, p90 per side,
    and the medians of the entries that cost most.
    With ``--baseline REV`` the same positions are drawn a second time by REV's per-step MSA path,
    interleaved position by position (the order of the sides alternates): REV's
    ``featurecache/client/assemble.py:msa_features`` and ``featurecache/store/msa.py:MSAReader.msa``
    (from ``git archive REV``, loaded as modules of their own and swapped in around each of its
    samples; every other part of the sample is this tree's code). Meant for a REV whose other code
    is this tree's (the parent of a change to those two functions); the ratio is baseline / this tree.
(b) ``--http``: the same over ``featurecache serve`` on 127.0.0.1 (a child process; with
    ``--baseline``, a second server runs REV's whole package from a ``git archive`` copy). Wall time
    per sample (the server's CPU is another process's).
(d) ``--crop-first``: the same positions drawn by this tree twice, interleaved, crop first
    (``SampleJob.crop_first_atoms=0``: every entry that the crop cuts has its tokens read, cropped,
    then only the atom rows its sample needs) and whole (``None``: the entry read whole before the
    crop, as before 0.7.0), with the default (``CROP_FIRST_MIN_ATOMS``) as a third side; the
    samples are checked equal, byte for byte. Needs a store of featurizer 0.7.0 or later (tokens
    with ``centre_coords``; older parts are read whole either way).
    With ``--http`` too, the same three sides over ``featurecache serve`` (this tree, 1 worker), one
    server a side (``POST /v1/entries/{id}:rows`` for the atom rows), ``--http-samples`` positions:
    wall time per sample in this process and the CPU its server spent on it (``server_cpu``: the
    server process's threads' run time, ``/proc/PID/task/*/schedstat``, before and after each sample).
(c) ``--deletions``: ``MSAReader.msa`` on client-like draws (the query and a uniform subset of
    1 … min(depth, 1024) rows, a random window of up to 384 columns) over every MSA of the store
    with deletion cells: CPU per call under ``read_all_deletions``'s rule, always reading all the
    MSA's cells in the first round trip, and always in a second one, interleaved.

Rows: ``entry="(all)"`` is one side over every timed sample of its part (median, mean, p90); ``side="per
entry"`` rows give, for the six entries that cost most of the stream (median CPU x share of the
samples), each side's medians over that entry's samples only, and ``stream_share`` its share.

Usage: ``.venv/bin/python benchmarks/sample_cost.py [--store DIR] [--samples N] [--repeats R]
[--baseline REV] [--http] [--deletions] [--crop-first]``. Without ``--store`` the real corpus is built once into a
temp dir (benchmarks/harness.py ``corpus_store``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import logging
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
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
    same_sample,
    store_argument,
    store_label,
)
from featurecache.client import FeatureDataset  # noqa: E402

log = logging.getLogger("benchmarks.sample_cost")

TRAIN: dict[str, Any] = {"crop_size": 384, "weighting": "af3", "max_msa_rows": 1024, "pair_msa": True}
WARMUP = 5


def _archive(rev: str, dest: Path, *paths: str) -> Path:
    blob = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, *paths], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Baseline:
    """REV's ``msa_features`` and ``MSAReader.msa``, swapped in by ``with baseline.active():``."""

    def __init__(self, rev: str, tmp: Path) -> None:
        import featurecache.client.assemble as assemble
        import featurecache.store.msa as msa

        src = _archive(rev, tmp / "files", "featurecache/client/assemble.py", "featurecache/store/msa.py")
        old_assemble = _load(src / "featurecache/client/assemble.py", "_baseline_assemble")
        old_msa = _load(src / "featurecache/store/msa.py", "_baseline_msa")
        self._assemble, self._msa = assemble, msa
        self._new = (assemble.msa_features, msa.MSAReader.msa)
        self._old = (old_assemble.msa_features, old_msa.MSAReader.msa)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        self._assemble.msa_features, self._msa.MSAReader.msa = self._old  # type: ignore[method-assign]
        try:
            yield
        finally:
            self._assemble.msa_features, self._msa.MSAReader.msa = self._new  # type: ignore[method-assign]


def _server(store: Path, package: Path | None) -> contextlib.AbstractContextManager[str]:
    """``featurecache serve STORE`` on 127.0.0.1 run by ``package`` (a source tree; None: this one)."""
    from services.lookup.server import background_server

    cwd = package or REPO
    return background_server(store, env={"PYTHONPATH": str(cwd)}, cwd=cwd)


def _server_pid(url: str) -> int:
    """The process of the ``featurecache serve`` (1 worker: it answers itself) listening at ``url``."""
    port = url.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and b"--port" in args and args[args.index(b"--port") + 1] == port.encode():
            return int(proc.name)
    raise SystemExit(f"no featurecache serve process listens on port {port}")


def _run_ms(pid: int | None) -> float:
    """Milliseconds process ``pid``'s threads have run (their ``schedstat``; 0 for None)."""
    if pid is None:
        return 0.0
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e6


def _draw(
    ds: FeatureDataset, p: int, around: Callable[[], Any] | None, server: int | None = None
) -> tuple[float, float, str, dict[str, Any], float]:
    """(CPU ms, wall ms, entry, sample, ms the server process ``server`` ran meanwhile)."""
    ctx = around() if around is not None else contextlib.nullcontext()
    with ctx:
        r = _run_ms(server)
        c, t = time.process_time(), time.perf_counter()
        s = ds.sample(p)
        c, t = (time.process_time() - c) * 1e3, (time.perf_counter() - t) * 1e3
        return c, t, str(s["entry_id"]), s, _run_ms(server) - r


def compare(
    bench: Bench,
    part: str,
    sources: dict[str, tuple[Any, Callable[[], Any] | None]],
    n: int,
    repeats: int,
    crop_first: dict[str, int | None] | None = None,
    servers: dict[str, int] | None = None,
) -> None:
    """Draw positions ``WARMUP`` … ``WARMUP + n`` from each side, interleaved, ``repeats`` rounds.
    ``crop_first``: side → its ``SampleJob.crop_first_atoms``, and the sides' samples must be equal;
    ``servers``: side → the pid of the lookup service only it draws from (its CPU per sample)."""
    servers = servers or {}
    sets = {label: FeatureDataset(src, infinite=True, seed=0, **TRAIN) for label, (src, _) in sources.items()}  # type: ignore[arg-type]
    for label, atoms in (crop_first or {}).items():
        sets[label].job.crop_first_atoms = atoms
    around = {label: a for label, (_, a) in sources.items()}
    for label, ds in sets.items():
        for p in range(WARMUP):
            _draw(ds, p, around[label])
    got: dict[str, list[tuple[float, float, str, float]]] = defaultdict(list)
    labels = list(sets)
    differ = 0
    for rnd in range(repeats):
        for p in range(WARMUP, WARMUP + n):
            order = labels if (p + rnd) % 2 == 0 else labels[::-1]
            drawn = {}
            for label in order:
                c_ms, w_ms, entry, drawn[label], s_ms = _draw(
                    sets[label], p, around[label], servers.get(label)
                )
                got[label].append((c_ms, w_ms, entry, s_ms))
            if crop_first:
                first = drawn[labels[0]]
                differ += sum(not same_sample(first, s) for s in drawn.values())
    if crop_first:
        bench.params["samples_differ"] = differ
        if differ:
            raise SystemExit(f"{differ} samples differ between {labels}: the crop-first path is broken")
    for ds in sets.values():
        ds.close()
    by_entry: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for label, rows in got.items():
        cpu, wall = [r[0] for r in rows], [r[1] for r in rows]
        extra: dict[str, Any] = {}
        if label in servers:
            server = [r[3] for r in rows]
            extra = {"server_cpu_median_ms": round(statistics.median(server), 2),
                     "server_cpu_mean_ms": round(statistics.fmean(server), 2)}  # fmt: skip
        bench.add(part=part, side=label, entry="(all)", samples=len(rows),
                  cpu_median_ms=round(statistics.median(cpu), 2), cpu_mean_ms=round(statistics.fmean(cpu), 2),
                  cpu_p90_ms=round(percentile(cpu, 90), 2), wall_median_ms=round(statistics.median(wall), 2),
                  wall_mean_ms=round(statistics.fmean(wall), 2), **extra)  # fmt: skip
        for c, w, e, s_ms in rows:
            by_entry[e][label + " cpu"].append(c)
            by_entry[e][label + " wall"].append(w)
            by_entry[e][label + " server"].append(s_ms)
    base = labels[0]
    share = {e: len(v[base + " cpu"]) / len(got[base]) for e, v in by_entry.items()}
    costly = sorted(by_entry, key=lambda e: -statistics.median(by_entry[e][base + " cpu"]) * share[e])[:6]
    for e in costly:
        row: dict[str, Any] = {"part": part, "side": "per entry", "entry": e, "samples": len(by_entry[e][base + " cpu"]),
                               "stream_share": round(share[e], 3)}  # fmt: skip
        for label in labels:
            row[f"{label} cpu_median_ms"] = round(statistics.median(by_entry[e][label + " cpu"]), 2)
            row[f"{label} wall_median_ms"] = round(statistics.median(by_entry[e][label + " wall"]), 2)
            row[f"{label} wall_mean_ms"] = round(statistics.fmean(by_entry[e][label + " wall"]), 2)
            if label in servers:
                row[f"{label} server_cpu_median_ms"] = round(
                    statistics.median(by_entry[e][label + " server"]), 2
                )
        bench.add(**row)


def deletions(bench: Bench, store: Path, rounds: int) -> None:
    import featurecache
    import featurecache.store.msa as msa_mod

    opened = featurecache.open_store(store)
    table = opened.msas
    opened.close()
    reader = msa_mod.MSAReader(store, table)
    rows = [r for r in table.to_pylist() if r["del_count"] > 0 and r["depth"] > 1]
    rng = np.random.default_rng(0)
    modes = {"rule": msa_mod.READ_ALL_DELETIONS_EXTRA, "one trip": 1 << 62, "two trips": -1}
    cpu: dict[str, list[float]] = defaultdict(list)
    folded = 0
    for r in rows:
        reader.msa(r["key"], [0], [0])  # arrays opened
    for rnd in range(rounds):
        for r in rows:
            depth, length = r["depth"], r["length"]
            k = int(rng.integers(1, min(depth, 1024) + 1))
            sel = np.r_[0, np.sort(rng.choice(np.arange(1, depth), k - 1, replace=False))]
            c0 = int(rng.integers(0, max(1, length - 384) + 1))
            cols = np.arange(c0, min(length, c0 + 384))
            fold = msa_mod.read_all_deletions(int(sel.max()) + 1, depth, r["del_count"])
            folded += int(fold)
            order = list(modes) if rnd % 2 == 0 else list(modes)[::-1]
            for mode in order:
                msa_mod.READ_ALL_DELETIONS_EXTRA = modes[mode]
                c = time.process_time()
                reader.msa(r["key"], sel, cols)
                cpu[mode].append((time.process_time() - c) * 1e3)
                if fold and mode != "rule":  # the calls the rule reads in one trip, both ways
                    cpu[f"{mode} (calls the rule folds)"].append(cpu[mode][-1])
    msa_mod.READ_ALL_DELETIONS_EXTRA = modes["rule"]
    reader.close()
    for mode, v in cpu.items():
        bench.add(part="deletions", side=mode, entry=f"{len(rows)} MSAs", samples=len(v),
                  cpu_median_ms=round(statistics.median(v), 3), cpu_mean_ms=round(statistics.fmean(v), 3),
                  cpu_p90_ms=round(percentile(v, 90), 3),
                  folded_share=round(folded / len(cpu["rule"]), 3) if mode == "rule" else None)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--store", type=store_argument, default=None, help="store (default: the real corpus, built)"
    )
    ap.add_argument("--samples", type=int, default=300,
                    help="stream positions per round of (a) and of (d) (default 300)")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=2,
                    help="rounds of (a), (b) and (d); (c) runs max(6, 3 x this) (default 2)")  # fmt: skip
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="(a), (b): also draw with REV's assemble.msa_features and MSAReader.msa swapped in")  # fmt: skip
    ap.add_argument(
        "--http",
        action="store_true",
        help="also run (b): the same over featurecache serve on 127.0.0.1 (with --crop-first: (d)'s sides)",
    )
    ap.add_argument(
        "--http-samples",
        type=int,
        default=150,
        help="positions per round of (b) and of (d) with --http (default 150)",
    )
    ap.add_argument("--deletions", action="store_true", help="also run (c): MSAReader.msa's deletion paths")
    ap.add_argument(
        "--crop-first",
        action="store_true",
        help="run (d) only: crop-first against whole-entry reads (this tree)",
    )
    add_out_argument(
        ap, "sample_cost", "benchmarks/results/sample_cost.json (--crop-first: sample_cost_crop_first.json)"
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    store = corpus_store(args.store, "sample-cost-corpus", log)
    bench = Bench("sample_cost", store=store_label(args.store), samples=args.samples, repeats=args.repeats,
                  baseline=args.baseline, settings=TRAIN, warmup=WARMUP)  # fmt: skip
    if args.crop_first:
        from featurecache.client.job import CROP_FIRST_MIN_ATOMS

        bench = Bench("sample_cost_crop_first", store=store_label(args.store), samples=args.samples,
                      repeats=args.repeats, settings=TRAIN, warmup=WARMUP,
                      crop_first_min_atoms=CROP_FIRST_MIN_ATOMS)  # fmt: skip
        three: dict[str, tuple[Any, Callable[[], Any] | None]] = {
            "crop first": (store, None), "whole entry": (store, None), "default": (store, None),
        }  # fmt: skip
        atoms: dict[str, int | None] = {"crop first": 0, "whole entry": None, "default": CROP_FIRST_MIN_ATOMS}
        compare(bench, "crop-first", three, args.samples, args.repeats, crop_first=atoms)
        if args.http:  # the same three sides over HTTP, one server each (its CPU is that side's)
            bench.params["http_samples"] = args.http_samples
            with contextlib.ExitStack() as stack:
                urls = {label: stack.enter_context(_server(store, None)) for label in atoms}
                web3: dict[str, tuple[Any, Callable[[], Any] | None]] = {
                    k: (u, None) for k, u in urls.items()
                }
                pids = {label: _server_pid(u) for label, u in urls.items()}
                compare(bench, "crop-first http", web3, args.http_samples, args.repeats, crop_first=atoms,
                        servers=pids)  # fmt: skip
        bench.finish(args.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Baseline(args.baseline, Path(tmp)) if args.baseline else None
        sides: dict[str, tuple[Any, Callable[[], Any] | None]] = {"this tree": (store, None)}
        if base is not None:
            sides[f"baseline {args.baseline}"] = (store, base.active)
        compare(bench, "local", sides, args.samples, args.repeats)
        if args.http:
            package = _archive(args.baseline, Path(tmp) / "pkg", "featurecache", "services") if base else None
            with contextlib.ExitStack() as stack:
                url = stack.enter_context(_server(store, None))
                web: dict[str, tuple[Any, Callable[[], Any] | None]] = {"this tree": (url, None)}
                if base is not None:
                    web[f"baseline {args.baseline}"] = (
                        stack.enter_context(_server(store, package)),
                        base.active,
                    )
                compare(bench, "http", web, args.http_samples, args.repeats)
        if args.deletions:
            deletions(bench, store, rounds=max(6, args.repeats * 3))
    bench.finish(args.out)


if __name__ == "__main__":
    main()
