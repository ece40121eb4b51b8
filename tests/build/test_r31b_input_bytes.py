"""The build summary's input size counts the MSA files and the CCD beside the structure files
(review R31b s47 #3).

It said "input size 15.45 MB" for the structure files alone, next to a store that also holds what
20.09 MB of MSAs and 0.74 MB of CCD gave: a store / input ratio from it (benchmarks/build.py's
``store_over_input``) was 0.62 where it is 0.26. ``input_bytes`` keeps its meaning (structure
files); ``msa_input_bytes`` and ``ccd_bytes`` are the others.

A real build of the repo's sample 1psm and 2q2k with their real OpenFold MSAs (a hidden file and a
non-CCD file beside, which are not inputs) and the sample CCD directory (its SOURCES.tsv is not a
definition file); the summary as ``featurecache build`` prints it."""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from featurecache.build.run import BuildSummary
from featurecache.build.summary import render_summary
from tests.conftest import SAMPLES, build_store

IDS = ("1psm", "2q2k")


def _size(files: list[Path]) -> int:
    return sum(f.stat().st_size for f in files)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[BuildSummary, Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("r31b_input_bytes")
    pdb, msa, ccd = tmp / "pdb", tmp / "msa", tmp / "ccd"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
        (msa / f"{entry}_A").mkdir(parents=True)
        shutil.copy(SAMPLES / "msas" / "openfold" / f"{entry}_A" / "mgnify_hits.sto", msa / f"{entry}_A")
    (msa / ".hidden.a3m").write_text(">q\nACDE\n")  # hidden: not listed by the MSA stage
    shutil.copytree(SAMPLES / "ccd", ccd)
    assert (ccd / "SOURCES.tsv").is_file()
    summary = build_store(tmp / "s", pdb, workers=1, msa_dir=msa, ccd=ccd, part_size=1)
    assert summary.n_failed == 0
    return summary, pdb, msa, ccd


def test_the_summary_counts_msa_and_ccd_bytes(built: tuple[BuildSummary, Path, Path, Path]) -> None:
    summary, pdb, msa, ccd = built
    structures = _size(sorted(pdb.iterdir()))
    msas = _size([f for f in msa.rglob("*") if f.is_file() and not f.name.startswith(".")])
    definitions = _size([f for f in ccd.iterdir() if f.name.endswith(".cif")])
    assert summary.input_bytes == structures  # its meaning kept: the structure files
    assert summary.msa_input_bytes == msas > 0
    assert summary.ccd_bytes == definitions > 0
    assert summary.all_input_bytes == structures + msas + definitions

    out = io.StringIO()
    render_summary(summary, Console(file=out, width=400))
    (line,) = [row for row in out.getvalue().splitlines() if "input size" in row]
    expected = (
        f"{structures / 1e6:.2f} MB structures + {msas / 1e6:.2f} MB MSAs + {definitions / 1e6:.2f} MB CCD"
    )
    assert expected in line, line


def test_without_msas_and_ccd_the_line_names_the_structures(
    built: tuple[BuildSummary, Path, Path, Path],
) -> None:
    summary = dataclasses.replace(built[0], msa_input_bytes=0, ccd_bytes=0)
    out = io.StringIO()
    render_summary(summary, Console(file=out, width=400))
    (line,) = [row for row in out.getvalue().splitlines() if "input size" in row]
    assert f"{summary.input_bytes / 1e6:.2f} MB structures " in line + " " and "MSAs" not in line, line
