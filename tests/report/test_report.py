"""`featurecache report` over a store built from the real corpus: every plot present and non-empty
(in the files and in a headless-Chromium rendering of the page), numbers matching the index."""

from __future__ import annotations

import csv
import html.parser
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest
from matplotlib import image as mpimg
from typer.testing import CliRunner

from featurecache.cli import app
from featurecache.report import write_report
from featurecache.report.timeline import timeline_panel

CHROMIUM = next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
BAR_BLUE = (0x3B, 0x6E, 0xA8)  # the report's first series colour (plots.py)


def _index_table(store: Path, name: str) -> list[dict]:
    with (store / "index" / f"{name}.arrow").open("rb") as fh:
        return ipc.open_file(fh).read_all().to_pylist()


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


class _Images(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.srcs.append(dict(attrs)["src"] or "")


def _pixels(path: Path) -> np.ndarray:
    img = mpimg.imread(path)  # float [H, W, C] in [0, 1]
    return np.round(np.asarray(img)[..., :3] * 255).astype(np.int16)


@pytest.fixture(scope="module")
def report(corpus_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    index = write_report(corpus_store, out)
    assert index == out / "index.html"
    return out


def test_every_plot_is_a_non_blank_png(report: Path) -> None:
    parser = _Images()
    parser.feed((report / "index.html").read_text())
    assert len(parser.srcs) >= 12
    for src in parser.srcs:
        path = report / src
        assert path.is_file() and path.stat().st_size > 0, src
        px = _pixels(path).reshape(-1, 3)
        assert len(np.unique(px, axis=0)) > 2, f"{src} is a single colour"
        assert (path.with_suffix(".csv")).is_file(), src


def test_numbers_match_the_index(report: Path, corpus_store: Path) -> None:
    entries = _index_table(corpus_store, "entries")
    failures = _index_table(corpus_store, "failures")
    components = _index_table(corpus_store, "components")
    summary = json.loads((report / "summary.json").read_text())
    assert summary["entries"] == len(entries) > 0
    assert summary["tokens"] == sum(e["token_count"] for e in entries)
    assert summary["atoms"] == sum(e["atom_count"] for e in entries)
    assert summary["failures"] == len(failures) > 0

    per_entry = _csv(report / "entries.csv")
    assert [r["id"] for r in per_entry] == [e["id"] for e in entries]
    assert sum(int(r["tokens"]) for r in per_entry) == summary["tokens"]
    # histogram counts add up to the entries they bin
    assert sum(int(r["count"]) for r in _csv(report / "tokens_per_entry.csv")) == len(entries)
    assert sum(int(r["count"]) for r in _csv(report / "atoms_per_entry.csv")) == len(entries)
    dated = [e for e in entries if (e["release_date"] or "")[:4].isdigit()]
    assert sum(int(r["count"]) for r in _csv(report / "release_year.csv")) == len(dated)
    resolved = [e for e in entries if e["resolution"] is not None and np.isfinite(e["resolution"])]
    assert sum(int(r["count"]) for r in _csv(report / "resolution.csv")) == len(resolved)

    mix = {r["label"]: r for r in _csv(report / "molecule_types.csv")}
    for name in ("protein", "rna", "dna", "ligand"):
        assert int(mix[name]["tokens"]) == sum(e[f"n_{name}_tokens"] for e in entries)
    by_stage = {r["label"]: int(r["failures"]) for r in _csv(report / "failures_by_stage.csv")}
    assert by_stage == dict(Counter(f["stage"] for f in failures))
    strategies = {r["label"]: int(r["components"]) for r in _csv(report / "conformer_strategies.csv")}
    assert strategies == dict(Counter(c["strategy"] for c in components)) and strategies

    on_disk = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(corpus_store / "parts")
        for f in files
        if ".tmp-" not in d
    ) + sum(p.stat().st_size for p in (corpus_store / "index").glob("*.arrow"))
    assert sum(int(r["bytes"]) for r in _csv(report / "store_bytes.csv")) == on_disk


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_page_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "page.png"
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1400,4000",
        (report / "index.html").resolve().as_uri(),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    px = _pixels(shot)
    assert px.shape[0] >= 3000 and px.shape[1] >= 1000
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 50, "the screenshot is blank"
    # the plots were loaded and drawn: their bar colour covers a real area of the page
    blue = np.all(np.abs(px - np.array(BAR_BLUE)) <= 6, axis=-1)
    assert blue.mean() > 0.005, f"only {blue.mean():.4%} of the page shows plot bars"


def test_loader_timeline_from_a_real_training_log(sample_store: Path, tmp_path: Path) -> None:
    from featurecache.model.config import ModelConfig
    from featurecache.model.train import run_training

    # a real run through the client's loader on a real store; the timeline reads the log's data
    # waits, not the model, so a small trunk (the default one's CPU steps cost seconds) will do
    small = ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=1, head_dim=16, n_heads_single=2,
                        transition_n=2, distogram_bins=16)  # fmt: skip
    log_path = tmp_path / "train_log.json"
    run_training(sample_store, None, steps=4, crop_size=16, device="cpu", fused=False, log_path=log_path,
                 workers=2, config=small)  # fmt: skip
    doc = json.loads(log_path.read_text())
    out = tmp_path / "report"
    write_report(sample_store, out, train_log=log_path)
    rows = _csv(out / "loader_timeline.csv")
    assert [int(r["x"]) for r in rows] == [s["step"] for s in doc["steps"]]
    assert [float(r["data_wait_ms"]) for r in rows] == pytest.approx(
        [s["data_wait_s"] * 1e3 for s in doc["steps"]]
    )
    assert 'src="loader_timeline.png"' in (out / "index.html").read_text()
    assert len(np.unique(_pixels(out / "loader_timeline.png").reshape(-1, 3), axis=0)) > 2
    # the real log carries the client's ready-first stats, and the timeline plots them
    assert all(isinstance(s["reorder_depth"], list) and len(s["reorder_depth"]) == 1 for s in doc["steps"])
    assert [float(r["reorder_depth"]) for r in rows] == [float(max(s["reorder_depth"])) for s in doc["steps"]]
    assert [float(r["skips_cumulative"]) for r in rows] == list(
        np.cumsum([s["skipped"] for s in doc["steps"]]).astype(float)
    )


def test_timeline_reads_reorder_depth_and_skips() -> None:
    doc = {"source": "s", "device": "cpu", "steps": [
        {"step": 0, "data_wait_s": 0.5, "reorder_depth": [0, 2], "skipped": []},
        {"step": 1, "data_wait_s": 0.01, "reorder_depth": [3], "skipped": [{"position": 4}, {"position": 7}]},
        {"step": 2, "data_wait_s": 0.02, "reorder_depth": 1, "skipped": 1},
    ]}  # fmt: skip
    panel, summary = timeline_panel(doc)
    assert panel.columns["reorder_depth"] == [2.0, 3.0, 1.0]
    assert panel.columns["skips_cumulative"] == [0.0, 2.0, 3.0]
    assert summary["skipped"] == 3.0 and summary["max_data_wait_ms"] == pytest.approx(500.0)


def test_cli_report(sample_store: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(sample_store), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "index.html").is_file()
    bad = tmp_path / "not-a-store"
    bad.mkdir()
    assert CliRunner().invoke(app, ["report", str(bad), "--out", str(tmp_path / "r2")]).exit_code == 3
