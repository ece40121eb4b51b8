"""Review R33 #5: `featurecache report STORE --out DIR` with DIR the store or inside it (its index,
its parts) wrote the report into the store, whose next report and `info` then counted the page as
store data. It is refused: one line naming the path and why, exit 2, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import cli_in_process, store_snapshot


@pytest.fixture(scope="module")
def store(two_entry_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("r33_out") / "store"  # a copy: the code before wrote into it
    shutil.copytree(two_entry_store, copy)
    return copy


@pytest.mark.parametrize("where", [".", "index", "parts", "parts/new/report"])
def test_an_output_inside_the_store_is_refused(store: Path, where: str) -> None:
    before = store_snapshot(store)
    out = store / where
    run = cli_in_process("report", str(store), "--out", str(out))
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"error: --out {out} is inside the store {store}: "), lines[0]
    assert "write it outside the store" in lines[0]
    assert store_snapshot(store) == before
    assert not (store / "parts" / "new").exists()


def test_an_output_next_to_the_store_is_written(store: Path) -> None:
    out = store.parent / "store-report"  # a sibling whose name starts with the store's
    run = cli_in_process("report", str(store), "--out", str(out))
    assert run.returncode == 0 and (out / "index.html").is_file(), run.stderr
