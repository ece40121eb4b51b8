"""``featurecache info``'s table: its MSA rows add up to the ``msas`` count (review R1 s27 #6).
Single-sequence MSAs (chains without an MSA file) are counted in ``msas`` but in neither
"featurizer of MSAs" nor "MSA stage of MSAs"; before, no row showed them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyarrow.ipc as ipc

from tests.conftest import MSAS, STRUCTURES, build_store, cli_in_process


def _rows(stdout: str) -> dict[str, str]:
    """The info table's rows, label -> value (rich's box characters split the two columns)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def _sum_of(text: str) -> int:
    """'22 of 0.6.0, 3 of 0.5.0' -> 25."""
    return sum(int(n) for n in re.findall(r"(\d+) of ", text))


def test_info_table_shows_single_sequence_msas(tmp_path: Path) -> None:
    pdb, msa, out = tmp_path / "in", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    # 102m with its MSA file; 2q2k has none in --msa-dir: its chains get single-sequence MSAs
    shutil.copy(STRUCTURES / "102m.cif", pdb)
    shutil.copy(STRUCTURES / "2q2k.cif", pdb)
    shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / "3", msa / "3")
    build_store(out, pdb, workers=1, msa_dir=msa)

    msas = ipc.open_file(out / "index" / "msas.arrow").read_all()
    n_single = sum(1 for n in msas.column("n_files").to_pylist() if n == 0)
    assert 0 < n_single < msas.num_rows  # the premise: both kinds

    res = cli_in_process("info", str(out), env={"COLUMNS": "200"})  # the real CLI, in this process
    assert res.returncode == 0, res.stderr
    rows = _rows(res.stdout)
    assert int(rows["msas"]) == msas.num_rows, rows
    assert rows.get("single-sequence MSAs") == str(n_single), rows
    # the rows add up: from files (by featurizer, and by MSA stage) + single-sequence = msas
    assert _sum_of(rows["featurizer of MSAs"]) + n_single == msas.num_rows, rows
    assert _sum_of(rows["MSA stage of MSAs"]) + n_single == msas.num_rows, rows
