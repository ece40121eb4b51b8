"""Review R33 #3: the conformer-strategy caption said "0 components (built without --ccd or no
ligands)", false on a killed build that had --ccd, and a store built without --ccd has components
(the packaged standard residues). The caption now says what it counts, and for 0 only what is known."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

from featurecache import open_store
from featurecache.report import write_report
from featurecache.store.index import rebuild_index

WHAT = "components: the residue and ligand definitions the entries use"


def _caption(store: Path, out: Path) -> tuple[int, str]:
    write_report(store, out)
    summary = json.loads((out / "summary.json").read_text())
    page = html.unescape((out / "index.html").read_text())
    start = page.index('<figure id="conformer_strategies">')
    caption = page[page.index("<figcaption>", start) + len("<figcaption>") : page.index(" — ", start)]
    return summary["components"], caption


def test_a_store_built_without_ccd_counts_its_standard_residues(r33_store: Path, tmp_path: Path) -> None:
    n, caption = _caption(r33_store, tmp_path / "r")
    assert n > 0 and caption.startswith(f"{n} {WHAT}"), caption
    assert "--ccd" in caption and "packaged standard residues" in caption


def test_no_entry(failures_only_store: Path, tmp_path: Path) -> None:
    n, caption = _caption(failures_only_store, tmp_path / "r")
    assert n == 0 and caption.startswith(f"0 {WHAT}") and caption.endswith("(the store holds no entry)"), (
        caption
    )
    assert "built without --ccd" not in caption


def test_a_first_build_stopped_before_its_conformer_stage(two_entry_store: Path, tmp_path: Path) -> None:
    # as a build killed before its chem stage leaves it: structure and MSA parts, no component part,
    # the index flagged unfinished (the build was given --ccd)
    store = tmp_path / "store"
    shutil.copytree(two_entry_store, store)
    for part in (store / "parts").glob("c-*"):
        shutil.rmtree(part)
    rebuild_index(store, finished=False)
    reader = open_store(store)
    assert not reader.finished and reader.entries.num_rows == 2 and reader.components.num_rows == 0
    reader.close()
    n, caption = _caption(store, tmp_path / "r")
    assert n == 0 and caption.startswith(f"0 {WHAT}"), caption
    assert caption.endswith(
        "(the store's first build has not finished: its conformer stage may not have run yet)"
    )
    assert "built without --ccd" not in caption
