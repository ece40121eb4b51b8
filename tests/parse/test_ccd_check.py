"""check_ccd: the up-front check that a --ccd path holds chemical component definitions."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from featurecache.errors import CCDError, InputError
from featurecache.parse.ccd import CCD as CCDReader
from featurecache.parse.ccd import check_ccd, read_components
from tests.conftest import CCD, STRUCTURES


def _components_file(path: Path, codes: list[str]) -> Path:
    with path.open("w") as out:
        for code in codes:
            text = (CCD / f"{code}.cif").read_text()
            out.write(text if text.endswith("\n") else text + "\n")
    return path


def _gzip(src: Path, dst: Path) -> Path:
    with src.open("rb") as a, gzip.open(dst, "wb") as b:
        shutil.copyfileobj(a, b)
    return dst


def test_real_ccd_directory_and_files(tmp_path: Path) -> None:
    assert check_ccd(CCD) == 1
    n_files = len(list(CCD.glob("*.cif")))
    assert check_ccd(CCD, enough=10_000) == n_files  # every shared definition is valid
    big = _components_file(tmp_path / "components.cif", ["HEM", "NAG", "MG"])
    assert check_ccd(big) == 1
    assert check_ccd(big, enough=5) == 3
    assert check_ccd(_gzip(big, tmp_path / "components.cif.gz"), enough=2) == 2
    one = tmp_path / "dir"
    one.mkdir()
    (one / "NAG.cif.gz").write_bytes(gzip.compress((CCD / "NAG.cif").read_bytes()))
    assert check_ccd(one) == 1


def _garbage(tmp_path: Path) -> dict[str, Path]:
    garbage = tmp_path / "bad.cif"
    garbage.write_text("garbage\n")  # what `echo garbage > bad.cif` writes
    gz = tmp_path / "bad.cif.gz"
    gz.write_bytes(gzip.compress(b"garbage\n"))
    not_gz = tmp_path / "notgz.cif.gz"
    not_gz.write_text("garbage\n")
    binary = tmp_path / "random.cif"
    binary.write_bytes(bytes(range(256)) * 64)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    bad_dir = tmp_path / "bad_dir"
    bad_dir.mkdir()
    (bad_dir / "HEM.cif").write_text("garbage\n")
    misnamed = tmp_path / "misnamed"
    misnamed.mkdir()
    shutil.copy(CCD / "HEM.cif", misnamed / "XYZ.cif")  # CCD would look HEM up as HEM.cif
    paths = {
        "garbage": garbage,
        "garbage.gz": gz,
        "not gzip": not_gz,
        "binary": binary,
        "empty dir": empty_dir,
        "dir of garbage": bad_dir,
        "misnamed file": misnamed,
        "structure mmCIF": STRUCTURES / "102m.cif",  # has _chem_comp_atom rows, is no CCD
        "missing": tmp_path / "no-such.cif",
    }
    assert set(paths) == set(NOT_A_CCD)
    return paths


NOT_A_CCD = ("garbage", "garbage.gz", "not gzip", "binary", "empty dir", "dir of garbage", "misnamed file",
             "structure mmCIF", "missing")  # fmt: skip


@pytest.mark.parametrize("kind", NOT_A_CCD)
def test_not_a_ccd_is_an_input_error_naming_the_path(tmp_path: Path, kind: str) -> None:
    path = _garbage(tmp_path)[kind]
    with pytest.raises(InputError) as info:
        check_ccd(path)
    assert str(path) in str(info.value)
    assert info.value.path == str(path) and info.value.stage == "ccd"


def test_stops_after_the_first_definitions(tmp_path: Path) -> None:
    """Parsing stops at the first definitions it needs (the 400 MB real file costs the check its
    first blocks, and one decompression without parsing: ``_check_gzip_whole``)."""
    codes = sorted(p.name[:-4] for p in CCD.glob("*.cif"))
    big = _gzip(_components_file(tmp_path / "components.cif", codes), tmp_path / "components.cif.gz")
    assert check_ccd(big, enough=2) == 2


def test_gzip_cut_short_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A components.cif.gz cut short (an interrupted download, R1 H1): its first blocks are valid,
    so the check passed it, and the build's chem stage then met gzip's EOFError, which click took
    for an abort ("Aborted.", exit 1, no summary) and the workers filed under the structures. Now
    the check refuses it naming the file and why, and reading it raises the same CCDError."""
    codes = sorted(p.name[:-4] for p in CCD.glob("*.cif"))
    big = _gzip(_components_file(tmp_path / "components.cif", codes), tmp_path / "full.cif.gz")
    data = big.read_bytes()
    for size in (len(data) - 64, int(len(data) * 0.6)):
        cut = tmp_path / "components.cif.gz"
        cut.write_bytes(data[:size])
        with pytest.raises(CCDError) as info:
            check_ccd(cut, enough=2)
        assert str(info.value) == (
            f"cannot read the CCD {cut}: its gzip stream ends early: the file is cut short (an interrupted download?)"
        )
        assert (
            isinstance(info.value, InputError) and info.value.path == str(cut) and info.value.stage == "ccd"
        )
        with pytest.raises(CCDError, match="cut short"):
            read_components(cut)
        ccd = CCDReader(cut)
        with pytest.raises(CCDError, match="cut short"):
            ccd.load(["HEM"])
        cut.unlink()  # asked again, it says so again without reading the 400 MB a second time
        with pytest.raises(CCDError, match="cut short"):
            ccd.load(["SO4"])
