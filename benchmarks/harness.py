"""Shared benchmark harness: every benchmark file only says how to set up and time its case.

``Bench(name)`` collects rows, prints them as a table at the end and writes
``benchmarks/results/<name>.json`` with the machine description, so BENCHMARKS.md can quote them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from featurecache.strict_json import finite

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("FEATURECACHE_SHARED", REPO.parent / "shared"))
REAL = SHARED / "data" / "real"


def corpus_store(path: Path | None, name: str, log: Any) -> Path:
    """``path``, or a store built over the real corpus (structures, MSAs, CCD) under the temp dir as
    ``featurecache-bench/<name>``. A build is resumable by construction: a second run over the same
    inputs recomputes nothing, so benchmarks share this cost once per machine. ``log``: the calling
    benchmark's logger (the build summary goes there)."""
    if path is not None:
        return path
    require_shared(sys.argv[0], ccd=True)
    import tempfile

    from featurecache.build.run import run_build

    out = Path(tempfile.gettempdir()) / "featurecache-bench" / name
    summary = run_build(pdb_dir=REAL / "structures", out=out, msa_dir=REAL / "msas", ccd=SHARED / "data" / "ccd",
                        workers=2, progress=False)  # fmt: skip
    log.info("corpus store %s: %d built, %d skipped, %d failed", out, summary.n_built, summary.n_skipped,
             summary.n_failed)  # fmt: skip
    return out


def store_argument(value: str) -> Path:
    """``type=`` of a benchmark's ``--store``: an existing featurecache store, else a usage error (one
    line naming the path and the reason, exit 2) instead of a StoreError traceback from deep inside."""
    from featurecache import open_store
    from featurecache.errors import FeatureCacheError

    path = Path(value)
    try:
        open_store(path).close()
    except (FeatureCacheError, OSError) as exc:
        raise argparse.ArgumentTypeError(
            str(exc).splitlines()[0] if str(exc) else f"{path}: unreadable"
        ) from exc
    return path


def store_label(path: Path | None) -> str:
    """What a result file records as its store: the path given, or the default real-corpus build
    (its temp-dir path is local to the machine that ran it)."""
    return str(path) if path is not None else "real corpus (built into the temp dir by corpus_store)"


def add_out_argument(ap: argparse.ArgumentParser, name: str, default: str | None = None) -> None:
    """``--out FILE``: where the results JSON goes (default ``benchmarks/results/<name>.json``), so a
    trial run need not overwrite the committed result."""
    where = default or f"benchmarks/results/{name}.json"
    ap.add_argument("--out", type=Path, default=None, metavar="FILE", help=f"results JSON (default {where})")


def require_shared(prog: str, *, ccd: bool = False) -> None:
    """Exit 2 with one line when the shared data a benchmark reads is not where ``SHARED`` points
    (a clone outside /work without ``FEATURECACHE_SHARED``): the line names the variable and what
    to set it to, instead of a traceback from deep inside a parser."""
    needed = [REAL / "structures", REAL / "msas"] + ([SHARED / "data" / "ccd"] if ccd else [])
    missing = [p for p in needed if not p.is_dir()]
    if missing:
        how = "set" if "FEATURECACHE_SHARED" not in os.environ else "fix"
        sys.stderr.write(
            f"{Path(prog).name}: no shared data at {missing[0]}: {how} FEATURECACHE_SHARED to the directory "
            f"that holds data/real/structures, data/real/msas and data/ccd (the project's shared/ folder, "
            f"e.g. FEATURECACHE_SHARED=/work/shared)\n"
        )
        raise SystemExit(2)


#: the libraries whose versions a result records (those installed; the benchmarks exercise them in
#: this process or in the children it starts from the same environment: a server, pool workers)
LIBRARIES = ("featurecache", "numpy", "zarr", "numcodecs", "pyarrow", "dask", "distributed", "gemmi", "rdkit",
             "scipy", "torch", "triton", "fastapi", "uvicorn", "httpx")  # fmt: skip


def library_versions() -> dict[str, str]:
    """Installed version of each of ``LIBRARIES`` (distribution metadata: nothing is imported)."""
    from importlib import metadata

    out: dict[str, str] = {}
    for name in LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    info["versions"] = library_versions()
    override = os.environ.get("FEATURECACHE_GIT_COMMIT")
    head, dirty_files, unknown = _git_state()
    if override:
        info["commit"], info["dirty"], info["git"] = override, None, override
        return info
    # a result that cannot be traced to code says why, as null: never "" (review R31b s47 #9)
    info["commit"] = head or None
    if not head:
        info["commit_unknown"] = unknown
    info["dirty"] = bool(dirty_files) if head else None
    if dirty_files:
        info["dirty_files"] = dirty_files
    info["git"] = (f"{head[:7]}+dirty" if dirty_files else head[:7]) if head else None
    return info


def _git_state() -> tuple[str, list[str], str]:
    """HEAD's full hash, the tracked files that differ from it (a copied tree whose .git is older
    than its files, as on the GPU machine, reads as its stale HEAD plus changes;
    ``FEATURECACHE_GIT_COMMIT`` overrides), and why the hash is "" when git cannot say (outside a
    git checkout, no git command)."""
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=False)  # fmt: skip
    except OSError as exc:
        return "", [], f"git could not run in {REPO}: {exc}"
    head = proc.stdout.strip()
    if proc.returncode != 0 or not head:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        return "", [], f"`git rev-parse HEAD` in {REPO} failed: {why}"
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                            capture_output=True, text=True, check=False).stdout  # fmt: skip
    return head, sorted(line[3:] for line in status.splitlines() if line.strip()), ""


def timeit(fn: Callable[[], Any], *, repeat: int = 5, warmup: int = 1, number: int = 1) -> dict[str, float]:
    """Seconds per call of ``fn()`` over ``repeat`` measurements of ``number`` calls each, after
    ``warmup`` calls: wall-clock median / min / max, and the median CPU time of this process
    (``time.process_time``: on a shared machine less disturbed by other processes than wall time).
    A ``number`` > 1 makes a sub-millisecond call measurable above the clocks' resolution."""
    for _ in range(warmup):
        fn()
    times, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(number):
            fn()
        cpus.append((time.process_time() - c0) / number)
        times.append((time.perf_counter() - t0) / number)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "cpu_median_s": statistics.median(cpus)}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Bench:
    def __init__(self, name: str, **params: Any) -> None:
        self.name = name
        self.params = params
        self.rows: list[dict[str, Any]] = []
        self.started = time.time()

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def table(self) -> str:
        if not self.rows:
            return "(no rows)"
        cols: list[str] = []
        for r in self.rows:
            cols += [c for c in r if c not in cols]
        fmt = [[_fmt(r.get(c, "")) for c in cols] for r in self.rows]
        widths = [max(len(c), *(len(row[i]) for row in fmt)) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in fmt]
        return "\n".join(lines)

    def finish(self, out: Path | None = None) -> Path:
        out = out or RESULTS_DIR / f"{self.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "benchmark": self.name,
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": machine(),
            "params": self.params,
            # ISO 8601 with its UTC offset (older results: local time without one)
            "started": datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds"),
            "seconds": round(time.time() - self.started, 2),
            "rows": self.rows,
        }
        if doc["machine"].get("commit") is None:
            # loud: a result that names no commit cannot be traced to the code it measured
            sys.stderr.write(
                f"\nWARNING: {out} records no commit ({doc['machine'].get('commit_unknown')}); set "
                "FEATURECACHE_GIT_COMMIT=<the commit this tree is> and run it again to keep it\n\n"
            )
        # NaN / Infinity are not JSON: a value that could not be measured is written as null
        out.write_text(json.dumps(finite(doc), indent=2, default=str, allow_nan=False))
        sys.stdout.write(f"\n== {self.name} ==\n{self.table()}\n(written {out})\n")
        return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "nan"
        if abs(v) >= 100:
            return f"{v:.1f}"
        if abs(v) >= 1:
            return f"{v:.3f}"
        return f"{v:.4g}"
    return str(v)


def same_sample(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two training samples equal: every array byte for byte (dtype and shape too), every other value ==."""
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape
                    and x.tobytes() == y.tobytes()):  # fmt: skip
                return False
        elif x != y:
            return False
    return True
