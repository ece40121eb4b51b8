"""The build summary's input size counts each file once when --msa-dir is --pdb-dir or lies
inside it (review R32a s47 #2).

README documents ``--msa-dir`` equal to ``--pdb-dir``. The MSA stage lists every file under it,
the structure files too, and ``msa_input_bytes`` counted them all: "0.37 MB structures + 0.38 MB
MSAs" for a directory of 0.365 MB of structures and 0.011 MB of MSAs. With ``--msa-dir`` inside
``--pdb-dir``, a README there (a structure input, listed as a failure) was counted on both sides.

Real builds of the repo's sample 102m and 2q2k with 2q2k's real OpenFold MSAs; the summary as
``featurecache build`` prints it."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from featurecache.build.summary import render_summary
from tests.conftest import SAMPLES, build_store

MSA_SOURCE = SAMPLES / "msas" / "openfold" / "2q2k_A"


def _size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


@pytest.mark.parametrize("layout", ["msa_dir_is_pdb_dir", "msa_dir_inside_pdb_dir"])
def test_each_input_file_is_counted_once(tmp_path: Path, layout: str) -> None:
    pdb = tmp_path / "in"
    pdb.mkdir()
    structures = [Path(shutil.copy(SAMPLES / "structures" / f"{e}.cif", pdb)) for e in ("102m", "2q2k")]
    msa_dir = pdb if layout == "msa_dir_is_pdb_dir" else pdb / "msas"
    shutil.copytree(MSA_SOURCE, msa_dir / "2q2k_A")
    msas = sorted((msa_dir / "2q2k_A").iterdir())
    others = []  # neither stage's: a structure input, listed as a failure
    if layout == "msa_dir_inside_pdb_dir":
        readme = msa_dir / "README.txt"
        readme.write_text("MSAs computed with the OpenFold pipeline\n" * 20)
        others.append(readme)

    summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa_dir, part_size=1)

    assert summary.n_built == 2 and summary.n_failed == len(others)
    assert summary.input_bytes == _size(structures + others)
    assert summary.msa_input_bytes == _size(msas) > 0
    every_file = [f for f in pdb.rglob("*") if f.is_file()]
    assert summary.all_input_bytes == _size(every_file)  # no CCD here
    out = io.StringIO()
    render_summary(summary, Console(file=out, width=400))
    (line,) = [row for row in out.getvalue().splitlines() if "input size" in row]
    expected = f"{_size(structures + others) / 1e6:.2f} MB structures + {_size(msas) / 1e6:.2f} MB MSAs"
    assert expected in line, line
