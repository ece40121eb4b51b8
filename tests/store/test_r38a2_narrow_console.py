"""Review R38a s50 leftovers #4: with COLUMNS=20 (a narrow console), ``info`` and ``show`` cut values
to an ellipsis even into a pipe (``show`` cut the content hash; at 20 columns the chains table's
8 columns were left no room at all), and ``show`` cut the content hash at rich's default 80 columns
of a pipe too. Values are never cut now: their columns fold, on a console at least 80 wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from featurecache.store.reader import open_store


def _run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "20"}
    r = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                       timeout=120, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _cells(text: str) -> dict[str, str]:
    """The rows of a two-column table without header as key → value, each cell's folded lines
    joined (a fold breaks anywhere: no space between the parts)."""
    rows: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        fields = line.split("│")
        if len(fields) != 4:
            continue
        k, v = fields[1].strip(), fields[2].strip()
        if k:
            key = k
            rows[key] = v
        elif key:
            rows[key] += v
    return rows


def test_show_and_info_never_cut_values_on_a_narrow_console(two_entry_store: Path) -> None:
    st = open_store(two_entry_store)
    hashes = dict(zip(st.entries.column("id").to_pylist(), st.entries.column("content_hash").to_pylist(),
                      strict=True))  # fmt: skip
    out = _run("show", str(two_entry_store), "2q2k")
    assert "…" not in out, out
    meta = _cells(out)
    assert meta["content_hash"] == hashes["2q2k"], out
    assert meta["source_path"] == "2q2k.cif", out
    columns = ("asym", "label", "auth", "entity", "type", "tokens", "resolved", "sequence", "array", "dtype")
    assert all(col in out for col in columns), out  # every column of the chains and arrays tables has room

    out = _run("info", str(two_entry_store))
    assert "…" not in out, out
    rows = _cells(out)
    assert rows["entries"] == "2", out
    assert rows["featurizer of entries"].startswith("2 of "), out
    pdb = str(two_entry_store.parent / "two_entry_inputs" / "pdb")
    assert rows["build --pdb-dir"] == pdb, out
