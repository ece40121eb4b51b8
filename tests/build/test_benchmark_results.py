"""Benchmark result files and the page made from them (benchmarks/harness.py, benchmarks/make_page.py).

Result files are JSON that any reader parses (no NaN / Infinity tokens); the committed BENCHMARKS.md
is exactly what make_page.py writes from the committed results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import make_page  # noqa: E402
from benchmarks.harness import Bench  # noqa: E402


def _strict(text: str) -> Any:
    """json.loads that refuses NaN / Infinity / -Infinity (Python's json accepts them; JSON does not)."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_values_are_written_as_null(tmp_path: Path) -> None:
    bench = Bench("nan_case", limit=float("inf"))
    bench.add(name="a", ms=float("nan"), spread=[1.5, float("-inf")])
    out = bench.finish(tmp_path / "nan_case.json")
    doc = _strict(out.read_text())
    assert doc["rows"] == [{"name": "a", "ms": None, "spread": [1.5, None]}]
    assert doc["params"] == {"limit": None}


def test_numpy_scalars_are_written_as_numbers(tmp_path: Path) -> None:
    """harness.finite: a numpy scalar becomes its Python value (before: np.float32 NaN was written as
    the string "nan" and np.int64 / np.float32 values as strings, by json's default=str)."""
    import numpy as np

    bench = Bench("np_case", n=np.int64(57))
    bench.add(name="a", ms=np.float32("nan"), share=np.float32(0.5), big=np.float32("inf"), ok=np.bool_(True))
    doc = _strict(bench.finish(tmp_path / "np_case.json").read_text())
    assert doc["rows"] == [{"name": "a", "ms": None, "share": 0.5, "big": None, "ok": True}]
    assert doc["params"] == {"n": 57}


def test_committed_results_are_strict_json() -> None:
    bad = []
    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        try:
            _strict(path.read_text())
        except ValueError as exc:
            bad.append(f"{path.name}: {exc}")
    assert bad == []


def test_committed_page_is_what_make_page_writes(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    committed = (REPO / "BENCHMARKS.md").read_text()
    as_of = make_page.page_as_of(committed)  # the commit the page counted its results' ages to
    assert as_of, "BENCHMARKS.md names no commit its ages were counted to"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_page.py"), "--out", str(out),
                           "--as-of", as_of], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_text() == committed, (
        "BENCHMARKS.md is stale: run .venv/bin/python benchmarks/make_page.py"
    )


def _result(path: Path, started: str, value: float, benchmark: str = "store_layout") -> None:
    path.write_text(json.dumps({"benchmark": benchmark, "command": "python benchmarks/x.py",
                                "machine": {"cpus": 2, "git": "abc1234"}, "params": {}, "started": started,
                                "seconds": 1.0, "rows": [{"layout": "probe", "ms_per_entry": value}]}))  # fmt: skip


def test_the_page_shows_the_latest_run_by_its_start_time(tmp_path: Path) -> None:
    """A newer run kept as <name>_runN.json next to an older <name>.json is the one tabulated."""
    _result(tmp_path / "store_layout.json", "2026-01-01T10:00:00", 111.0)
    _result(tmp_path / "store_layout_run7.json", "2026-03-01T10:00:00", 777.0)
    _result(tmp_path / "store_layout_run3.json", "2025-12-01T10:00:00", 333.0)
    page = make_page.render(tmp_path)
    section = page.split("## store_layout\n")[1]
    assert "| probe | 777.0 |" in section
    assert "| probe | 111.0 |" not in page and "| probe | 333.0 |" not in page
    assert "`store_layout_run7.json`, started 2026-03-01T10:00:00" in section
    # the earlier runs are named under it, latest first
    assert section.index("`store_layout.json` (2026-01-01") < section.index(
        "`store_layout_run3.json` (2025-12"
    )


def test_runs_without_a_start_time_are_ordered_by_their_run_number(tmp_path: Path) -> None:
    """make_page.load: runs with the same (or no) ``started`` are ordered by N of ``_runN`` as a number
    (before: by the file name as text, so x_run7 counted as later than x_run52)."""
    for name, value in (("x_run7", 7.0), ("x_run52", 52.0), ("x", 1.0), ("x_run10", 10.0)):
        doc = {"benchmark": "x", "machine": {}, "rows": [{"layout": "probe", "ms_per_entry": value}]}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    groups, _, _ = make_page.load(tmp_path)
    assert [f for f, _ in groups["x"]] == ["x_run52.json", "x_run10.json", "x_run7.json", "x.json"]
    _result(tmp_path / "y_run9.json", "2026-01-01T10:00:00", 9.0, "y")
    _result(tmp_path / "y_run11.json", "2026-01-01T10:00:00", 11.0, "y")
    assert [f for f, _ in make_page.load(tmp_path)[0]["y"]] == ["y_run11.json", "y_run9.json"]


def test_generic_ratios_name_their_rows_and_keep_summaries() -> None:
    rows: list[dict[str, Any]] = [
        {"op": "attention", "N": n, "method": m, "ms": 1.0, "x_vs_flex": 0.5 + n / 1000}
        for n in (256, 384, 512, 768, 1024, 2048) for m in ("fused", "eager", "sdpa", "flex")
    ]  # fmt: skip
    rows.append({"kind": "summary", "op": "all", "speedup": 3.25})
    ratios = make_page.ratios_generic(rows)
    labels = [r[0] for r in ratios]
    assert "all · summary: speedup" in labels or "summary · all: speedup" in labels, labels
    assert "attention · fused · N=256: x_vs_flex" in labels, labels
    measured = [lab for lab in labels if "x_vs_flex" in lab]
    assert len(measured) == len(set(measured)) == 20  # each row told apart; capped, the cap said
    assert ratios[-1][0] == "… 4 more"
    # the full table's row cap keeps the summary row too
    assert "| 3.25 |" in make_page.table(rows, max_rows=5)


def test_build_full_and_msa_scale_get_their_comparisons(tmp_path: Path) -> None:
    build_rows = [{"workers": 1, "entries_per_s": 4.0}, {"workers": 2, "entries_per_s": 6.0}]
    scale_rows = [{"case": "noop", "what": "first build", "wall_s": 80.0, "files": 10},
                  {"case": "noop", "what": "no-op, scan cache", "wall_s": 2.0, "files": 10},
                  {"case": "noop", "what": "no-op, no scan cache (every file read)", "wall_s": 10.0, "files": 10}]  # fmt: skip
    for name, rows in (("build_full", build_rows), ("msa_scale", scale_rows)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"benchmark": name, "machine": {}, "rows": rows}))
    page = make_page.render(tmp_path)
    assert "| 2 workers vs 1 (entries/s) | 1.50× |" in page.split("## build_full")[1]
    scale = page.split("## msa_scale")[1]
    assert "| no-op build: scan cache vs reading every file (wall s) | 5.00× |" in scale
    assert "| no-op build (scan cache) vs first build (wall s) | 40.00× |" in scale


def test_loader_part_b_times_every_entry_on_every_side(sample_store: Path) -> None:
    """benchmarks/loader.py (b): one fixed set of positions covering every entry, every side timed
    on each position (before: a timing-dependent ready-first window of ~30 positions)."""
    import pyarrow.feather as feather

    from benchmarks.loader import _dataset, covering_positions, per_sample_costs

    ids = sorted(feather.read_table(sample_store / "index" / "entries.arrow").column("id").to_pylist())
    ds = _dataset(sample_store, workers=1)
    try:
        positions = covering_positions(ds, ids)
        drawn = [ds.sampler.key(p).entry_id for p in positions]
        assert sorted(drawn) == ids  # every entry once
        for p, entry in zip(positions, drawn, strict=True):  # each at its first position in the stream
            assert all(ds.sampler.key(q).entry_id != entry for q in range(p))
        costs = per_sample_costs({"a": ds, "b": ds}, positions[:3], {"a": 2, "b": 1})
        assert {p: len(v) for p, v in costs["a"].items()} == dict.fromkeys(positions[:3], 2)
        assert {p: len(v) for p, v in costs["b"].items()} == dict.fromkeys(positions[:3], 1)
        assert all(cpu >= 0 and wall > 0 for v in costs["a"].values() for cpu, wall in v)
    finally:
        ds.close()


def test_loader_straggler_sides_keep_the_same_samples_in_flight(sample_store: Path) -> None:
    """benchmarks/loader.py (c): the ordered DataLoader gets as many samples in flight as ready-first's
    pool + window (before: prefetch_factor 2, 4 in flight, against 2 + 16)."""
    from benchmarks import loader

    ds = loader._dataset(sample_store, workers=1)
    try:
        stream: Any = loader.ordered_loader(ds, 8, workers=loader.POOL_WORKERS, prefetch=loader.PREFETCH)
        assert stream._num_workers * stream._prefetch_factor == loader.POOL_WORKERS + loader.WINDOW
        assert len(list(stream)) == 8
    finally:
        ds.close()


def test_timeit_gives_cpu_time_per_call_over_batches() -> None:
    from benchmarks.harness import timeit

    calls = []
    t = timeit(lambda: calls.append(sum(range(20_000))), repeat=3, warmup=2, number=10)
    assert len(calls) == 2 + 3 * 10
    assert 0 < t["cpu_median_s"] < 1 and t["min_s"] <= t["median_s"] <= t["max_s"]


def test_loader_raw_reader_parses_each_msa_of_a_homomer_once_per_sample(tmp_path: Path) -> None:
    """benchmarks/loader.py (b): the uncached side parses each distinct MSA once per sample, not once
    per chain fetch (before: the MSA that 721p-assembly1's two chains share was parsed for each of
    its chains), and again in the next sample (nothing kept across samples). A small real store:
    721p-assembly1 with its two MSA files cut to their first 300 sequences (whole records)."""
    import gzip
    import shutil
    from collections import Counter

    import numpy as np
    import pyarrow.feather as feather

    from benchmarks.loader import RawFilesReader, _dataset
    from tests.conftest import build_store

    samples = REPO / "samples"
    structures, msas = tmp_path / "structures", tmp_path / "msas" / "alphafold3-pytorch"
    structures.mkdir()
    msas.mkdir(parents=True)
    shutil.copy(samples / "structures" / "721p-assembly1.cif", structures)
    for src in sorted((samples / "msas" / "alphafold3-pytorch").glob("721p-assembly1*.a3m.gz")):
        with gzip.open(src, "rt") as f:
            lines = [line for _, line in zip(range(600), f, strict=False)]
        (msas / src.name).write_bytes(gzip.compress("".join(lines).encode()))
    store = tmp_path / "store"
    build_store(store, structures, msa_dir=tmp_path / "msas", ccd=samples / "ccd", workers=1)

    # the expected keys from the store's index: the entry's chains whose sequence has a stored MSA
    entry = "721p-assembly1"
    chains = feather.read_table(store / "index" / "chains.arrow").to_pylist()
    stored = set(feather.read_table(store / "index" / "msas.arrow").column("key").to_pylist())
    per_key = Counter(
        c["sequence_hash"] for c in chains if c["entry_id"] == entry and c["sequence_hash"] in stored
    )
    assert per_key and max(per_key.values()) >= 2, per_key  # a homomer: one MSA for several chains
    crop = 512  # keeps every chain
    assert feather.read_table(store / "index" / "entries.arrow").column("token_count").to_pylist()[0] <= crop

    parses: Counter[str] = Counter()

    class Counting(RawFilesReader):
        def _parse_msa(self, key: str) -> Any:
            parses[key] += 1
            return super()._parse_msa(key)

    raw = _dataset(Counting(store, structures, tmp_path / "msas", samples / "ccd", True, False), workers=1,
                   crop_size=crop)  # fmt: skip
    cached = _dataset(store, workers=1, crop_size=crop)
    try:
        for n in (1, 2):
            out = raw.sample(0)
            assert dict(parses) == dict.fromkeys(per_key, n)
        assert np.array_equal(out["msa"], cached.sample(0)["msa"])  # the same features as the store's
    finally:
        raw.close()
        cached.close()
