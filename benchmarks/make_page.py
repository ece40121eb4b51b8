"""Write BENCHMARKS.md from benchmarks/results/*.json: every benchmark's latest numbers on one page.

For each result file: what it measures (the benchmark script's docstring), the command that
produced it, the machine it ran on, how old it is (commits since its run, and how many of them
changed its benchmark script or featurecache/, counted up to ``--as-of``, default HEAD; "stale"
past :data:`STALE_AFTER` of those), the headline ratios against its baselines (uncached
featurization, ordered DataLoader, eager / SDPA / FlexAttention, …) and the full table. Benchmark
scripts without a result yet are listed with the command to run. Missing or malformed files are
reported on the page, never fatal; re-run after new results arrive:

    .venv/bin/python benchmarks/make_page.py [--results DIR] [--out BENCHMARKS.md] [--as-of REV]

The page names the commit it counted to, so the same results and that commit give the same page
byte for byte (``--as-of`` that commit): the tests regenerate it that way.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NOT_BENCHMARKS = {"__init__", "harness", "make_page"}
#: page order (others follow alphabetically)
ORDER = ("build", "chem", "msa", "store_layout", "serve", "loader", "kernels", "train", "plan_validate")

#: a result is "stale" when more commits than this changed its benchmark script or featurecache/
#: since its run: the measured code has moved on enough that the numbers need a re-run to be quoted
STALE_AFTER = 100
#: the measured code, besides the benchmark script itself
MEASURED = ("featurecache",)

Row = dict[str, Any]
Ratio = tuple[str, str, str]  # (comparison, value, note)


# ----------------------------------------------------------------------------------- formatting
def fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        a = abs(v)
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    if isinstance(v, list | dict):
        text = json.dumps(v)
        return text if len(text) <= 60 else text[:57] + "…"
    return str(v).replace("|", "\\|").replace("\n", " ")


def table(rows: list[Row], max_rows: int = 60) -> str:
    if not rows:
        return "_(no rows)_\n"
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    shown = rows
    if len(rows) > max_rows:  # the first rows, and every summary row wherever it is
        shown = [r for i, r in enumerate(rows) if i < max_rows or _is_summary(r)]
    for r in shown:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
    if len(rows) > len(shown):
        lines.append(f"\n_… {len(rows) - len(shown)} more rows in the JSON._")
    return "\n".join(lines) + "\n"


def machine_line(m: dict[str, Any]) -> str:
    parts = [m["gpu"]] if m.get("gpu") else ["no GPU"]
    if m.get("cpus"):
        parts.append(f"{m['cpus']} CPUs" + (f" ({m['processor']})" if m.get("processor") else ""))
    versions: dict[str, Any] = m["versions"] if isinstance(m.get("versions"), dict) else {}
    for k in ("torch", "triton", "python"):  # older results record only these
        if m.get(k) and k not in versions:
            parts.append(f"{k} {m[k]}")
    if versions:
        parts.append(", ".join(f"{k} {v}" for k, v in versions.items()))
    if m.get("platform"):
        parts.append(str(m["platform"]))
    parts.append(commit_text(m))
    return " · ".join(p for p in parts if p)


def commit_text(m: dict[str, Any]) -> str:
    """The run's commit as recorded: the full hash and whether the tree differed from it (newer
    results), else the older short ``git`` field; "commit not recorded" when there is none."""
    if m.get("commit"):
        dirty = m.get("dirty")
        state = " (tree differed from it: dirty)" if dirty is True else " (clean)" if dirty is False else ""
        return f"commit {m['commit']}{state}"
    git = str(m.get("git") or "").strip()
    if not git or git == "?":
        return "commit not recorded"
    head = git.split(" ")[0]
    # "+dirty", "+msa-cut", "+6a038f4": run on a tree that was not that commit
    return f"commit {git}" + (" (run on a tree that differed from that commit)" if "+" in head else "")


def describe(name: str) -> str:
    """The first paragraph of benchmarks/<name>.py's docstring."""
    path = HERE / f"{name}.py"
    try:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    except (OSError, SyntaxError):
        return ""
    return doc.split("\n\n")[0].replace("\n", " ").strip()


# -------------------------------------------------------------------------------------- ratios
def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a is not None and b not in (None, 0) else "–"


def load_note(rows: Iterable[Row], cpus: int | None) -> str:
    """The 1-minute load averages the rows recorded (``load_1m``), marked when one was above the
    machine's CPU count: the ratio then measures the other work on the machine as much as ours
    (review R31b s47 #7). "" when no row recorded one."""
    loads = [v for v in (_num(r.get("load_1m")) for r in rows) if v is not None]
    if not loads:
        return ""
    text = "load_1m " + " / ".join(f"{v:.1f}" for v in loads)
    if cpus and max(loads) > cpus:
        text = f"⚠ LOADED: {text}, above the {cpus} CPUs (other work shared the machine)"
    return text


def _with_load(detail: str, rows: Iterable[Row], cpus: int | None) -> str:
    return "; ".join(t for t in (detail, load_note(rows, cpus)) if t)


def ratios_build(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    by = {r.get("workers"): r for r in rows}
    if 1 in by and 2 in by:
        return [("2 workers vs 1 (entries/s)", _x(_num(by[2].get("entries_per_s")), _num(by[1].get("entries_per_s"))),
                 _with_load("LocalCluster scaling", (by[1], by[2]), cpus))]  # fmt: skip
    return []


def ratios_chem(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    out = []
    for r in rows:
        if r.get("kind") == "summary" and _num(r.get("speedup")) is not None:
            cpu = _num(r.get("speedup_cpu"))
            out.append((f"{r['name']} (wall)", f"{r['speedup']:.0f}×", f"min {fmt(r.get('speedup_min'))}×"))
            if cpu is not None:
                out.append(
                    (f"{r['name']} (CPU time)", f"{cpu:.0f}×", f"min {fmt(r.get('speedup_cpu_min'))}×")
                )
    return out


def _span(vals: list[float]) -> str:
    return f"{min(vals):.1f}–{max(vals):.1f}×"


def ratios_msa(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    """The CPU-time ratio (the steadier one on a shared machine), the wall ratio in the detail; an
    older result without CPU times shows its wall ratio, said so."""
    real = [r for r in rows if not str(r.get("msa", "")).startswith("synthetic")]
    chosen = real if any(_num(r.get("parse_over_store")) is not None for r in real) else rows
    cpu = [v for v in (_num(r.get("parse_over_store_cpu")) for r in chosen) if v is not None]
    wall = [v for v in (_num(r.get("parse_over_store")) for r in chosen) if v is not None]
    what = "real MSAs" if chosen is real else "synthetic MSAs"
    if cpu:
        detail = "faster; CPU time" + (f"; wall {_span(wall)}" if wall else "")
        return [(f"stored MSA slice vs parsing the a3m/sto ({what}, CPU time)", _span(cpu), detail)]
    if wall:
        return [
            (
                f"stored MSA slice vs parsing the a3m/sto ({what}, wall)",
                _span(wall),
                "faster; no CPU time recorded",
            )
        ]
    return []


def ratios_store_layout(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    """CPU time where the run recorded it (interleaved rounds, one reader for both layouts); an older
    run's single wall-clock pass otherwise, said so."""
    out: list[Ratio] = []
    for r in rows:
        cpu, wall = _num(r.get("slowdown_vs_records_cpu")), _num(r.get("slowdown_vs_records"))
        if cpu is not None:
            out.append((f"records vs {r['layout']} (CPU ms/entry)", f"{cpu:.1f}×",
                        f"faster; wall {fmt(wall)}×; medians over interleaved rounds, one reader"))  # fmt: skip
        elif wall is not None:
            out.append((f"records vs {r['layout']} (ms/entry)", f"{wall:.1f}×",
                        "faster; one wall-clock pass, the layouts read by different readers"))  # fmt: skip
    return out


def ratios_serve(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    """Like with like: single-entry HTTP lookups against single-entry local reads (each side's best
    concurrency), batched lookups on a line of their own, MSA slices on theirs."""

    def best(source: str, key: str) -> Row | None:
        got = [r for r in rows if r.get("source") == source and _num(r.get(key)) is not None]
        return max(got, key=lambda r: float(r[key]), default=None)

    def at(r: Row, key: str) -> str:
        return f"{fmt(r.get(key))} at concurrency {r.get('concurrency')}"

    out: list[Ratio] = []
    local, http = best("local", "entries_per_s"), best("http", "entries_per_s")
    if local and http:
        out.append(("HTTP lookup vs local reader, one entry a request (best entries/s)",
                    _x(_num(http["entries_per_s"]), _num(local["entries_per_s"])),
                    f"remote / local: {at(http, 'entries_per_s')} vs {at(local, 'entries_per_s')}"))  # fmt: skip
    batches = sorted(
        {str(r.get("source")) for r in rows if str(r.get("source", "")).startswith("http batch")}
    )
    for source in batches:
        batch = best(source, "entries_per_s")
        if local and batch:
            out.append((f"{source} vs local reader one entry at a time (best entries/s)",
                        _x(_num(batch["entries_per_s"]), _num(local["entries_per_s"])),
                        f"batched remote / local: {at(batch, 'entries_per_s')} vs {at(local, 'entries_per_s')}"))  # fmt: skip
    for source in sorted(
        {str(r.get("source")) for r in rows if str(r.get("source", "")).startswith("http msa")}
    ):
        remote, here = (
            best(source, "slices_per_s"),
            best("local" + source.removeprefix("http"), "slices_per_s"),
        )
        if remote and here:
            out.append((f"{source} vs local (best slices/s)",
                        _x(_num(remote["slices_per_s"]), _num(here["slices_per_s"])),
                        f"remote / local: {at(remote, 'slices_per_s')} vs {at(here, 'slices_per_s')}"))  # fmt: skip
    return out


def ratios_loader(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    out: list[Ratio] = []
    for r in rows:
        if r.get("part") != "b" or _num(r.get("cache_speedup_cpu_total")) is None:
            continue
        out.append((f"cached store vs uncached featurization ({r['source'].removeprefix('raw: ')}), "
                    f"CPU time over {r.get('samples')} samples covering every entry",
                    f"{r['cache_speedup_cpu_total']:.1f}×",
                    f"wall {fmt(r.get('cache_speedup_wall_total'))}×; per-sample median CPU "
                    f"{fmt(r.get('cache_speedup_cpu_median'))}×; slowest entry {r.get('slowest_entry')} "
                    f"{100 * (_num(r.get('slowest_share')) or 0):.0f} % of the raw total, "
                    f"without it {fmt(r.get('cache_speedup_cpu_total_without_slowest'))}×"))  # fmt: skip
    ordered = next((r for r in rows if str(r.get("source", "")).startswith("ordered DataLoader")), None)
    if ordered is not None:
        for r in rows:
            if not str(r.get("source", "")).startswith("ready-first"):
                continue
            if 0 in (r.get("stragglers"), ordered.get("stragglers")):  # recorded as none
                out.append((f"{r['source']} vs {ordered['source']} (samples/s with stragglers)", "–",
                            "no stragglers at this size (stragglers = 0): no comparison"))  # fmt: skip
            else:
                out.append((f"{r['source']} vs {ordered['source']} (samples/s with stragglers)",
                            _x(_num(r.get("straggled_samples_per_s")), _num(ordered.get("straggled_samples_per_s"))),
                            f"p95 wait {fmt(r.get('p95_wait_s'))} s vs {fmt(ordered.get('p95_wait_s'))} s"
                            + (f"; in flight {r['in_flight']} vs {ordered['in_flight']}"
                               if "in_flight" in r and "in_flight" in ordered else "")))  # fmt: skip
            out.append((f"{r['source']} vs {ordered['source']} (samples/s, no stragglers)",
                        _x(_num(r.get("samples_per_s")), _num(ordered.get("samples_per_s"))), ""))  # fmt: skip
    return out


def ratios_kernels(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    out: list[Ratio] = []
    groups: dict[tuple[Any, Any], dict[str, Row]] = {}
    for r in rows:
        groups.setdefault((r.get("op"), r.get("N")), {})[str(r.get("method"))] = r
    for (op, n), methods in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        fused = methods.get("fused")
        if fused is None or _num(fused.get("ms")) is None:
            continue
        # the run's repeat of the fused kernel, where it has one: the headline takes the slower of
        # the two timings (the conservative one), the detail gives both
        repeat = methods.get("fused (repeat)")
        first_ms = float(fused["ms"])
        repeat_ms = _num(repeat.get("ms")) if repeat is not None else None
        if repeat is not None and repeat_ms is not None and repeat_ms > first_ms:
            fused = repeat
        for base in ("eager", "sdpa", "flex", "torch.compile"):
            b = methods.get(base)
            if b is None:
                continue
            if _num(b.get("ms")) is None:
                out.append((f"{op} N={n}: fused vs {base}", f"{base}: {b.get('ms')}", ""))
                continue
            mem = _x(_num(b.get("peak_MiB")), _num(fused.get("peak_MiB")))
            both = (
                ""
                if repeat_ms is None
                else f" (fused {fmt(first_ms)} ms, its repeat {fmt(repeat_ms)} ms: the slower taken; the "
                f"faster gives {_x(_num(b.get('ms')), min(first_ms, repeat_ms))})"
            )
            out.append((f"{op} N={n}: fused vs {base}", _x(_num(b.get("ms")), _num(fused.get("ms"))),
                        f"time {fmt(fused['ms'])} vs {fmt(b['ms'])} ms{both}; peak memory {mem} less"))  # fmt: skip
    return out


def ratios_plan_validate(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    out: list[Ratio] = []
    for r in rows:
        err = _num(r.get("error_pct"))
        if err is not None:
            out.append((f"planner vs measured peak, crop {r['crop']} {r['mode']}", f"{err:+.1f}%",
                        f"{fmt(r.get('predicted_GiB'))} vs {fmt(r.get('measured_GiB'))} GiB"))  # fmt: skip
        elif r.get("measured_GiB") == "OOM":
            out.append((f"planner vs measured peak, crop {r['crop']} {r['mode']}", "OOM",
                        f"predicted {fmt(r.get('predicted_GiB'))} GiB"))  # fmt: skip
    return out


def ratios_msa_scale(rows: list[Row], cpus: int | None = None) -> list[Ratio]:
    what = {str(r.get("what")): r for r in rows}
    out: list[Ratio] = []
    cache, no_cache = what.get("no-op, scan cache"), what.get("no-op, no scan cache (every file read)")
    if cache and no_cache:
        out.append(("no-op build: scan cache vs reading every file (wall s)",
                    _x(_num(no_cache.get("wall_s")), _num(cache.get("wall_s"))),
                    f"{fmt(cache.get('wall_s'))} vs {fmt(no_cache.get('wall_s'))} s, {fmt(cache.get('files'))} files"))  # fmt: skip
    first = what.get("first build")
    if first and cache:
        out.append(("no-op build (scan cache) vs first build (wall s)",
                    _x(_num(first.get("wall_s")), _num(cache.get("wall_s"))),
                    f"{fmt(cache.get('wall_s'))} vs {fmt(first.get('wall_s'))} s"))  # fmt: skip
    chunks, one = what.get("parse + build_msa (chunks)"), what.get("parse + build_msa (one chunk)")
    if chunks and one:
        out.append(("build_msa peak memory: chunked vs one chunk",
                    _x(_num(one.get("build_peak_mib")), _num(chunks.get("build_peak_mib"))),
                    f"{fmt(chunks.get('build_peak_mib'))} vs {fmt(one.get('build_peak_mib'))} MiB, "
                    f"{fmt(chunks.get('rows'))} rows"))  # fmt: skip
    return out


GENERIC_KEYS = ("speedup", "ratio", "_over_", "x_vs_", "slowdown", "relative")


def _is_summary(r: Row) -> bool:
    return any(str(r.get(k, "")) == "summary" for k in ("kind", "part", "case"))


def _labels(rows: list[Row]) -> list[str]:
    """Each row's distinguishing fields: its text fields that vary between rows, then (while two rows
    still read the same) its integer fields that vary, as ``name=value``."""
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols and not any(s in c for s in GENERIC_KEYS)]

    def varies(c: str, kind: type | tuple[type, ...]) -> bool:
        vals = [r.get(c) for r in rows]
        return (
            all(v is None or (isinstance(v, kind) and not isinstance(v, bool)) for v in vals)
            and len({json.dumps(v) for v in vals}) > 1
        )

    text = [c for c in cols if varies(c, str)]
    labels = [" · ".join(str(r[c]) for c in text if r.get(c) is not None) for r in rows]
    for c in (c for c in cols if varies(c, int)):
        if len(set(labels)) == len(labels):
            break
        labels = [
            f"{lab} · {c}={r[c]}" if r.get(c) is not None else lab
            for lab, r in zip(labels, rows, strict=True)
        ]
    return [lab.strip(" ·") for lab in labels]


def ratios_generic(rows: list[Row], cpus: int | None = None, cap: int = 20) -> list[Ratio]:
    """Every ratio-like field of every row, labelled with the row's distinguishing fields; the
    summary rows' ratios always, the others up to ``cap``."""
    summary: list[Ratio] = []
    other: list[Ratio] = []
    for r, label in zip(rows, _labels(rows), strict=True):
        for k, v in r.items():
            if any(s in k for s in GENERIC_KEYS) and _num(v) is not None:
                (summary if _is_summary(r) else other).append(
                    (f"{label}: {k}".strip(": "), fmt(v), load_note([r], cpus))
                )
    if len(other) > cap:
        other = [*other[:cap], (f"… {len(other) - cap} more", "", "in the table below")]
    return summary + other


#: each takes the result's rows and its machine's CPU count (to mark a ratio measured under load)
RATIOS: dict[str, Callable[[list[Row], int | None], list[Ratio]]] = {
    "build": ratios_build, "build_full": ratios_build, "msa_scale": ratios_msa_scale, "chem": ratios_chem, "msa": ratios_msa, "store_layout": ratios_store_layout,
    "serve": ratios_serve, "loader": ratios_loader, "kernels": ratios_kernels, "plan_validate": ratios_plan_validate,
}  # fmt: skip


# ----------------------------------------------------------------------------------------- page
RUN_SUFFIX = re.compile(r"_run(\d+)$")


def load(results: Path) -> tuple[dict[str, list[tuple[str, dict[str, Any]]]], list[str], list[str]]:
    """The harness documents under ``results`` grouped by benchmark, each group latest run first;
    the files that are supporting data (linked, not tabulated); the unreadable ones.

    A benchmark is the file name without a ``_runN`` suffix (``train_e2e_run86.json`` is a run of
    ``train_e2e``); which run is the latest is decided by the document's ``started`` time, never by
    the file name (a newer run may be kept as ``_runN`` next to an older ``<name>.json``); runs with
    the same (or no) ``started`` are ordered by the number N (``x_run52`` after ``x_run7``;
    ``<name>.json`` before any ``_runN``), then by file name."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    supporting: list[str] = []
    problems: list[str] = []
    for path in sorted(results.glob("*.json")) if results.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"`{path.name}`: unreadable ({exc})")
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or "machine" not in doc:
            # supporting data (training logs, A/B scripts' raw output, calibration data): linked, not
            # tabulated; only the harness's documents (rows + machine) get a section
            supporting.append(path.name)
            continue
        groups.setdefault(RUN_SUFFIX.sub("", path.stem), []).append((path.name, doc))
    for runs in groups.values():
        runs.sort(
            key=lambda run: (str(run[1].get("started") or ""), _run_number(run[0]), run[0]), reverse=True
        )
    return groups, supporting, problems


def _run_number(file: str) -> int:
    """N of ``<name>_runN.json``; -1 for a file without the suffix."""
    m = RUN_SUFFIX.search(Path(file).stem)
    return int(m.group(1)) if m else -1


def _commit(doc: dict[str, Any]) -> str:
    """The run's commit, short (``+dirty`` kept; a hand-written note after it dropped); "not
    recorded" when the result has none."""
    text = str((doc.get("machine") or {}).get("git") or "").split(" ")[0]
    if not text or text == "?":
        return "not recorded"
    head, _, dirty = text.partition("+")
    return head[:9] + (f"+{dirty}" if dirty else "")


def _git(*args: str) -> str | None:
    """``git args`` in the repository: its stdout, None when git fails or is not there."""
    try:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def resolve(rev: str) -> str | None:
    """The full hash of ``rev``, None when this repository's history does not have it."""
    return _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")


def page_as_of(page: str) -> str | None:
    """The commit a page counted its ages to (its header says), None for a page without one."""
    m = re.search(r"counted up to commit `([0-9a-f]{40})`", page)
    return m.group(1) if m else None


def _run_commit(doc: dict[str, Any]) -> str:
    """The commit a result ran on, as recorded (``+dirty`` and notes dropped): "" when none."""
    m = doc.get("machine") or {}
    text = str(m.get("commit") or m.get("git") or "").strip().split(" ")[0]
    return "" if text == "?" else text.partition("+")[0]


def age(name: str, doc: dict[str, Any], as_of: str | None) -> tuple[str, bool]:
    """How old a result is at ``as_of``, in words, and whether it is stale: commits since its run,
    and how many of them changed its benchmark script or :data:`MEASURED` (``git rev-list --count
    RUN..AS_OF [-- paths]``). A result run after ``as_of`` (a descendant of it) is "newer than the
    page's commit"; one on another line of history, of unknown age."""
    commit = _run_commit(doc)
    if not commit:
        why = (doc.get("machine") or {}).get("commit_unknown")
        return "commit not recorded" + (f" ({why})" if why else ""), False
    if as_of is None:
        return "age unknown (no git history here)", False
    full = resolve(commit)
    if full is None:
        return f"age unknown (commit {commit[:9]} is not in this repository's history)", False
    if _git("merge-base", "--is-ancestor", full, as_of) is None:
        # RUN..AS_OF would count 0 commits: "0 commits old" for a result the page's commit has not
        # got (an --as-of page of an earlier commit; review R32a s47 #8)
        if _git("merge-base", "--is-ancestor", as_of, full) is not None:
            after = _git("rev-list", "--count", f"{as_of}..{full}")
            plural = "" if after == "1" else "s"
            return f"newer than the page's commit ({after} commit{plural} after it)", False
        return f"age unknown (commit {commit[:9]} is not in the page's commit's history)", False
    script = next((f"benchmarks/{n}.py" for n in (str(doc.get("benchmark") or ""), name)
                   if n and (HERE / f"{n}.py").is_file()), None)  # fmt: skip
    paths = [*MEASURED, *([script] if script else [])]
    total = int(_git("rev-list", "--count", f"{full}..{as_of}") or 0)
    changed = int(_git("rev-list", "--count", f"{full}..{as_of}", "--", *paths) or 0)
    text = f"{total} commits old; {changed} changed {' or '.join(f'{p}/' if p in MEASURED else p for p in reversed(paths))}"
    if script:
        text += f" ({_git('rev-list', '--count', f'{full}..{as_of}', '--', script)} the script)"
    stale = changed > STALE_AFTER
    return ("**stale**: " if stale else "") + text, stale


def section(name: str, runs: list[tuple[str, dict[str, Any]]], as_of: str | None = None) -> str:
    """One benchmark's section: its latest run (by ``started``) in full, earlier runs listed."""
    file, doc = runs[0]
    rows: list[Row] = [r for r in doc["rows"] if isinstance(r, dict)]
    parts = [f"## {name}\n"]
    what = describe(name) or describe(str(doc.get("benchmark") or ""))
    if what:
        parts.append(f"{what}\n")
    cmd = doc.get("command") or f"python benchmarks/{name}.py"
    parts.append(f"- **command:** `{cmd}`")
    parts.append(f"- **machine:** {machine_line(doc.get('machine') or {})}")
    when = f"started {doc['started']}" if doc.get("started") else "start time not recorded"
    if _num(doc.get("seconds")) is not None:
        when += f" ({fmt(doc['seconds'])} s)"
    parts.append(f"- **run:** `{file}`, {when}" + (f" — the latest of {len(runs)}" if len(runs) > 1 else ""))
    parts.append(f"- **age:** {age(name, doc, as_of)[0]}")
    if len(runs) > 1:
        parts.append("- **earlier runs** (not tabulated): " + ", ".join(
            f"`{f}` ({d.get('started') or 'start time not recorded'}, commit {_commit(d)})" for f, d in runs[1:]))  # fmt: skip
    params = {k: v for k, v in (doc.get("params") or {}).items() if k not in ("model_config",)}
    if params:
        parts.append("- **parameters:** " + ", ".join(f"{k}={fmt(v)}" for k, v in params.items()))
    try:
        cpus = (doc.get("machine") or {}).get("cpus")
        ratios = RATIOS.get(name, ratios_generic)(rows, cpus if isinstance(cpus, int) else None)
    except (KeyError, TypeError, ValueError) as exc:  # a result of another shape: show the table only
        ratios = [("(ratios unavailable)", type(exc).__name__, str(exc)[:80])]
    parts.append("")
    if ratios:
        parts.append("| comparison (ours vs baseline) | ratio | detail |\n|---|---|---|")
        parts += [f"| {fmt(a)} | {fmt(b)} | {fmt(c)} |" for a, b, c in ratios]
        parts.append("")
    parts.append("<details><summary>all rows</summary>\n")
    parts.append(table(rows))
    parts.append("</details>\n")
    return "\n".join(parts)


def _short_age(name: str, doc: dict[str, Any], as_of: str | None) -> str:
    """The summary table's age: "N (M changed)", "stale" when it is; the words of :func:`age` else."""
    text, stale = age(name, doc, as_of)
    m = re.search(r"(\d+) commits old; (\d+) changed", text)
    if not m:
        return text.split(" (")[0]
    return f"{m.group(1)} ({m.group(2)} changed)" + (" stale" if stale else "")


def scripts() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_BENCHMARKS)


def ordered(names: Iterable[str]) -> list[str]:
    names = list(names)
    return [n for n in ORDER if n in names] + sorted(n for n in names if n not in ORDER)


def render(results: Path, as_of: str | None = None) -> str:
    """The page for the result files under ``results``, ages counted up to ``as_of`` (default
    HEAD; none outside a git checkout)."""
    groups, supporting, problems = load(results)
    docs = {name: runs[0][1] for name, runs in groups.items()}
    at = resolve(as_of or "HEAD")
    if as_of and at is None:
        raise SystemExit(f"make_page.py: --as-of {as_of}: not a commit of this repository")
    lines = [
        "# Benchmarks",
        "",
        "Every benchmark's latest numbers, generated by `python benchmarks/make_page.py` from "
        "`benchmarks/results/*.json` (do not edit by hand). Each section gives the command that produced the "
        "numbers and the machine it ran on; ratios compare ours with the baseline measured side by side in the "
        "same run. A benchmark run more than once (`<name>_runN.json` next to `<name>.json`) shows its run "
        "with the latest start time; the earlier runs are listed under it.",
        "",
        (
            f"Ages are counted up to commit `{at}` (the tree this page was generated on): the commits "
            "since each result's run, and how many of them changed its benchmark script or `featurecache/`; "
            f"a result is marked **stale** past {STALE_AFTER} of those (the code it measured has changed enough "
            "that its numbers want a re-run before they are quoted)."
            if at
            else "Ages are not shown: no git history here."
        ),
        "",
    ]
    if docs:
        lines.append(
            "| benchmark | machine | latest run | file | commit | age | runs |\n|---|---|---|---|---|---|---|"
        )
        for name in ordered(docs):
            m = docs[name].get("machine") or {}
            where = m.get("gpu") or f"{m.get('cpus', '?')} CPUs, no GPU"
            commit = _commit(docs[name])
            lines.append(f"| [{name}](#{name}) | {fmt(where)} | {fmt(docs[name].get('started') or 'not recorded')} | "
                         f"`{groups[name][0][0]}` | {fmt('commit not recorded' if commit == 'not recorded' else commit)} | "
                         f"{fmt(_short_age(name, docs[name], at))} | {len(groups[name])} |")  # fmt: skip
        lines.append("")
    missing = [s for s in scripts() if s not in docs]
    if missing:
        lines.append(
            "**Not yet run here:** " + ", ".join(f"`python benchmarks/{s}.py`" for s in missing) + "\n"
        )
    if problems:
        lines.append("**Unreadable result files:** " + "; ".join(problems) + "\n")
    if supporting:
        lines.append(
            "**Supporting data** (in `benchmarks/results/`, not tables): "
            + ", ".join(f"`{n}`" for n in supporting)
            + "\n"
        )
    for name in ordered(docs):
        lines.append(section(name, groups[name], at))
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    ap.add_argument("--as-of", default=None, metavar="REV",
                    help="count the results' ages up to this commit (default HEAD; the page names it)")  # fmt: skip
    args = ap.parse_args()
    text = render(args.results, args.as_of)
    args.out.write_text(text)
    sys.stdout.write(f"wrote {args.out} ({text.count(chr(10) + '## ')} benchmarks)\n")


if __name__ == "__main__":
    main()
