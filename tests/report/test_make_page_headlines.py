"""make_page's headline ratios take the conservative or steadier figure and compare like with like
(review R31b s47 #5): kernels used "fused" and ignored the same run's "fused (repeat)" (run 127 at
N=384: 1.16× on the page, 0.94× by the repeat); msa quoted the wall ratio where the rows carry the
CPU one; serve compared batched HTTP lookups with single-entry local reads."""

from __future__ import annotations

from benchmarks.make_page import ratios_kernels, ratios_msa, ratios_serve


def test_kernels_take_the_slower_of_fused_and_its_repeat() -> None:
    rows = [{"op": "attention", "N": 384, "method": "fused", "ms": 0.725, "peak_MiB": 603.0},
            {"op": "attention", "N": 384, "method": "fused (repeat)", "ms": 0.897, "peak_MiB": 603.0},
            {"op": "attention", "N": 384, "method": "flex", "ms": 0.843, "peak_MiB": 724.5}]  # fmt: skip
    ((what, ratio, detail),) = ratios_kernels(rows)
    assert (what, ratio) == ("attention N=384: fused vs flex", "0.94×")
    assert "fused 0.725 ms, its repeat 0.897 ms" in detail and "faster gives 1.16×" in detail, detail


def test_msa_headline_is_cpu_time_with_wall_in_the_detail() -> None:
    rows = [{"msa": "721p", "parse_over_store": 35.2, "parse_over_store_cpu": 31.7},
            {"msa": "1k1a", "parse_over_store": 20.3, "parse_over_store_cpu": 14.0},
            {"msa": "synthetic 16384 x 410", "parse_over_store": 99.0, "parse_over_store_cpu": 98.0}]  # fmt: skip
    ((what, ratio, detail),) = ratios_msa(rows)
    assert ratio == "14.0–31.7×" and "CPU time" in what and "wall 20.3–35.2×" in detail, (what, ratio, detail)


def test_serve_compares_single_entries_and_batches_apart() -> None:
    rows = [{"source": "local", "concurrency": 1, "entries_per_s": 200.0},
            {"source": "http", "concurrency": 1, "entries_per_s": 100.0},
            {"source": "http", "concurrency": 8, "entries_per_s": 150.0},
            {"source": "http batch(16)", "concurrency": 8, "entries_per_s": 190.0}]  # fmt: skip
    got = {what: ratio for what, ratio, _ in ratios_serve(rows)}
    single = next(k for k in got if k.startswith("HTTP lookup vs local reader, one entry"))
    assert got[single] == "0.75×", got  # 150 / 200, not the batch's 190 / 200
    assert got["http batch(16) vs local reader one entry at a time (best entries/s)"] == "0.95×", got
