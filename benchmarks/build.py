"""Build throughput over the real structure corpus with 1 and 2 workers, and where the wall time goes.

Prints entries/s, atoms/s, MB written/s, the driver's wall time per phase (:class:`Phases` times
the build driver's steps: cluster start, worker warm-up (the version check), discover, structures,
msa, chem, index rebuilds, shutdown, other), from the scheduler's task stream (Dask's
``TaskStreamPlugin``) the number of tasks and the longest one per stage and how busy the workers
were during the structure phase, the per-entry stage time (read / parse / tokenize / featurize /
write, summed over workers), the 1-minute load average before each build (the machine is shared),
and store bytes vs input bytes. Each row is the median of ``--repeats`` builds; the builds of one
repeat run interleaved (1 worker, 2 workers, ...; with ``--ab`` the variants alternate first).

``--copies K`` builds K copies of the corpus (symlinks under distinct directory names, so distinct
entry ids) so start-up is amortised. ``--ab`` also runs the previous code's task cut of the MSA
stage (one task for every MSA up to 256 MSAs / 256 MiB, one scan task per 32 MiB of files; set on
the driver, which plans the cut), interleaved with the current one, and writes ``build_ab``.

    .venv/bin/python benchmarks/build.py [--ccd] [--msa] [--copies K] [--repeats R] [--ab] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, SHARED, Bench, add_out_argument, require_shared
from featurecache.build import chem_stage, msa_stage
from featurecache.build import run as build_run
from featurecache.build.run import run_build
from featurecache.store.layout import MSA_PART_PREFIX, PARTS_DIR, STRUCTURE_PART_PREFIX

ENTRY_STAGES = ("read", "parse", "tokenize", "featurize", "write")
#: the MSA stage's task cut of the code before granularity.cut_by_weight: only the maxima
BEFORE = {"TARGET_MSA_PARTS": 1, "TARGET_SCAN_BATCHES": 1}


#: phase -> (module, function): the build driver's steps timed by :class:`Phases`
STEPS: dict[str, list[tuple[Any, str]]] = {
    "cluster_start": [(build_run, "_make_client")],
    "worker_warm_up": [(build_run, "_check_worker_versions"), (build_run, "_forget_parsed_ccd")],
    "discover": [(build_run, "discover")],
    "structures": [(build_run, "_run_structure_parts")],
    "msa": [(msa_stage, "run_msa_stage")],
    "chem": [(chem_stage, "run_chem_stage")],
    "index": [(build_run, "rebuild_index")],
    "shutdown": [(build_run, "_shutdown")],
}
#: task key prefix -> stage, for the task stream
TASK_STAGES = {"structure-part": "structures", "msa-scan": "msa_scan", "msa-part": "msa_write",
               "chem-scan": "chem_scan", "component": "chem_conformers"}  # fmt: skip


class Phases:
    """Times the build driver's steps (:data:`STEPS`, wrapped while inside) and keeps the
    scheduler's task stream of the build (read just before the cluster is shut down)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.stream: list[dict[str, Any]] = []
        self.marks: dict[str, tuple[float, float]] = {}
        self._open: list[str] = []  # the steps running now, innermost last

    def _wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if phase == "shutdown" and args and args[0] is not None and not self.stream:
                self.stream = _task_stream(args[0])
            t0, w0 = time.perf_counter(), time.time()
            self._open.append(phase)
            try:
                result = fn(*args, **kwargs)
            finally:
                self._open.pop()
                took = time.perf_counter() - t0
                self.seconds[phase] += took
                if self._open:  # exclusive times: an index refresh inside structures is index
                    self.seconds[self._open[-1]] -= took
                self.marks.setdefault(phase, (w0, time.time()))
                self.marks[phase] = (self.marks[phase][0], time.time())
            if phase == "cluster_start":
                result[0].run_on_scheduler(_start_task_stream)
            return result

        return timed

    @contextmanager
    def timing(self) -> Iterator[None]:
        saved = [(mod, name, getattr(mod, name)) for steps in STEPS.values() for mod, name in steps]
        try:
            for phase, steps in STEPS.items():
                for mod, name in steps:
                    setattr(mod, name, self._wrap(phase, getattr(mod, name)))
            yield
        finally:
            for mod, name, fn in saved:
                setattr(mod, name, fn)

    def tasks(self, workers: int) -> dict[str, Any]:
        """Per stage: tasks, the longest (s); the workers' busy share of the structure phase."""
        out: dict[str, Any] = {}
        durations: dict[str, list[float]] = collections.defaultdict(list)
        busy = 0.0
        t0, t1 = self.marks.get("structures", (0.0, 0.0))
        for rec in self.stream:
            key = str(rec.get("key", ""))
            stage = next((v for k, v in TASK_STAGES.items() if key.startswith(k)), None)
            for ss in rec.get("startstops", []):
                if ss.get("action") != "compute" or stage is None:
                    continue
                durations[stage].append(ss["stop"] - ss["start"])
                if stage == "structures":
                    busy += max(0.0, min(ss["stop"], t1) - max(ss["start"], t0))
        for stage in TASK_STAGES.values():
            out[f"{stage}_tasks"] = len(durations[stage])
            out[f"{stage}_longest_s"] = max(durations[stage], default=0.0)
            out[f"{stage}_task_s"] = sum(durations[stage])  # the stage's work, summed over its tasks
        out["structures_busy_pct"] = 100 * busy / (workers * (t1 - t0)) if t1 > t0 else float("nan")
        return out


def _start_task_stream(dask_scheduler: Any) -> None:
    from distributed.diagnostics.task_stream import TaskStreamPlugin

    if TaskStreamPlugin.name not in dask_scheduler.plugins:
        dask_scheduler.add_plugin(TaskStreamPlugin(dask_scheduler))


def _task_stream(client: Any) -> list[dict[str, Any]]:
    def read(dask_scheduler: Any) -> list[dict[str, Any]]:
        plugin = dask_scheduler.plugins.get("task-stream")
        if plugin is None:
            return []
        return [{"key": str(r["key"]), "startstops": list(r["startstops"])} for r in plugin.buffer]

    try:
        return list(client.run_on_scheduler(read))
    except Exception:  # a benchmark aid: a build that lost its cluster still reports its wall times
        return []


@contextmanager
def variant(name: str) -> Iterator[None]:
    """``before``: the MSA stage cuts its tasks as the previous code did (driver-side constants)."""
    saved = {k: getattr(msa_stage, k) for k in BEFORE}
    try:
        if name == "before":
            for k, v in BEFORE.items():
                setattr(msa_stage, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(msa_stage, k, v)


def corpus(copies: int, tmp: Path) -> Path:
    """The real structures, or ``copies`` copies of them as symlinks under c0/, c1/, ..."""
    src = REAL / "structures"
    if copies <= 1:
        return src
    root = tmp / "corpus"
    for k in range(copies):
        d = root / f"c{k}"
        d.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            if f.is_file():
                (d / f.name).symlink_to(f)
    return root


def one_build(pdb_dir: Path, workers: int, part_size: int, ccd: bool, msa: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-build-"))
    try:
        load = os.getloadavg()[0]
        phases = Phases()
        with phases.timing():
            s = run_build(
                pdb_dir=pdb_dir, out=tmp / "store", workers=workers, part_size=part_size, progress=False,
                ccd=SHARED / "data" / "ccd" if ccd else None, msa_dir=REAL / "msas" if msa else None,
            )  # fmt: skip
        parts = [p.name for p in (tmp / "store" / PARTS_DIR).iterdir()]
        structure_bytes = sum(
            f.stat().st_size
            for p in (tmp / "store" / PARTS_DIR).glob(f"{STRUCTURE_PART_PREFIX}*")
            for f in p.rglob("*")
            if f.is_file()
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    row: dict[str, Any] = {
        "structure_parts": sum(1 for p in parts if p.startswith(STRUCTURE_PART_PREFIX)),
        "msa_parts": sum(1 for p in parts if p.startswith(MSA_PART_PREFIX)),
        "entries": s.n_built, "failed": s.n_failed, "seconds": s.seconds, "load_1m": load,
        "entries_per_s": s.n_built / s.seconds, "atoms_per_s": s.n_atoms / s.seconds,
        "MB_written_per_s": s.bytes_written / 1e6 / s.seconds,
        "input_MB": s.input_bytes / 1e6, "msa_input_MB": s.msa_input_bytes / 1e6, "ccd_MB": s.ccd_bytes / 1e6,
        "store_MB": s.store_bytes / 1e6,
        # the whole store over everything read to make it (structures, MSAs, CCD: review R31b s47 #3),
        # and the structure parts alone over the structure files
        "store_over_input": s.store_bytes / s.all_input_bytes,
        "structure_store_over_input": structure_bytes / s.input_bytes,
    }  # fmt: skip
    timed = {f"{phase}_s": phases.seconds.get(phase, 0.0) for phase in STEPS}
    # exclusive wall times; other: argument checks, CCD fingerprint, store lock, planning
    row.update(timed, other_s=s.seconds - sum(timed.values()))
    for stage in ENTRY_STAGES:
        row[f"{stage}_sum_s"] = s.stage_seconds.get(stage, 0.0)
    row.update(phases.tasks(workers))
    return row


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in runs[0]:
        vals = [r[k] for r in runs]
        out[k] = statistics.median(vals) if all(isinstance(v, int | float) for v in vals) else vals[0]
    out["seconds_min"] = min(r["seconds"] for r in runs)
    out["seconds_max"] = max(r["seconds"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ccd", action="store_true", help="also pass ../shared/data/ccd")
    ap.add_argument("--msa", action="store_true", help="also pass ../shared/data/real/msas")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                    help="worker counts to compare, one row each (default 1 2)")  # fmt: skip
    ap.add_argument("--copies", type=int, default=1, help="build this many copies of the corpus (default 1)")
    ap.add_argument(
        "--repeats", type=int, default=1, help="builds per row, interleaved (rows: medians; default 1)"
    )
    ap.add_argument("--part-size", type=int, default=4, help="--part-size of the builds (default 4)")
    ap.add_argument("--ab", action="store_true", help="also run the previous MSA task cut (writes build_ab)")
    add_out_argument(ap, "build", "benchmarks/results/build.json, build_full.json with --ccd or --msa, "
                     "build_ab.json with --ab")  # fmt: skip
    args = ap.parse_args()
    require_shared(__file__, ccd=args.ccd)
    logging.basicConfig(level=logging.WARNING)
    name = "build_ab" if args.ab else "build_full" if (args.ccd or args.msa) else "build"
    variants = ["before", "after"] if args.ab else ["current"]
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-corpus-"))
    try:
        pdb_dir = corpus(args.copies, tmp)
        bench = Bench(name, corpus=str(REAL / "structures"), copies=args.copies, ccd=args.ccd, msa=args.msa,
                      repeats=args.repeats, part_size=args.part_size)  # fmt: skip
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for rep in range(args.repeats):
            order = variants if rep % 2 == 0 else variants[::-1]  # alternate which variant goes first
            for v in order:
                for workers in args.workers:
                    with variant(v):
                        row = one_build(pdb_dir, workers, args.part_size, args.ccd, args.msa)
                    logging.getLogger("benchmarks.build").warning(
                        "repeat %d %s %d workers: %.2f s (load %.2f)",
                        rep,
                        v,
                        workers,
                        row["seconds"],
                        row["load_1m"],
                    )
                    runs.setdefault((v, workers), []).append(row)
        for v in variants:
            for workers in args.workers:
                head = {"variant": v} if args.ab else {}
                bench.add(
                    **head, workers=workers, repeats=len(runs[v, workers]), **median_row(runs[v, workers])
                )
        bench.finish(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
