"""Review R42b s52 #2, the library's part: a read of the CCD that the OS refused (EIO) was kept
for the life of the :class:`CCD` (``_unreadable`` for a components.cif, ``_broken[code]`` for a
directory's file), so every later lookup of a build's worker failed too, and a directory's file
was called a definition to "fix or replace". Now it is a :class:`CCDReadError` (a CCDError, stage
``ccd``) naming the file and the OS's reason, remembered by nothing: once the file reads again, so
does the lookup. A definition that does not parse is still remembered (its content is at fault).

The EIO is a real one: the CCD's file is for a while a link to ``/proc/self/mem``, a regular file
whose read at offset 0 the kernel refuses with EIO; then the real file is put back.
"""

from __future__ import annotations

import errno
import gzip
import shutil
from pathlib import Path

import pytest

from featurecache.errors import CCDError
from featurecache.parse.ccd import CCD, CCDReadError
from tests.conftest import SAMPLES

SAMPLE_CCD = SAMPLES / "ccd"
#: a regular file (``is_file()``) whose every read fails with EIO
EIO_FILE = Path("/proc/self/mem")


def _ccd(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A copy of the sample CCD of ``kind``: ``(--ccd path, the file that holds HEM)``."""
    if kind.startswith("dir"):
        d = tmp_path / "ccd"
        shutil.copytree(SAMPLE_CCD, d)
        if kind == "dir .gz":
            (d / "HEM.cif.gz").write_bytes(gzip.compress((d / "HEM.cif").read_bytes()))
            (d / "HEM.cif").unlink()
            return d, d / "HEM.cif.gz"
        return d, d / "HEM.cif"
    text = "".join(f.read_text().rstrip("\n") + "\n" for f in sorted(SAMPLE_CCD.glob("*.cif")))
    one = tmp_path / ("components.cif.gz" if kind == "file .gz" else "components.cif")
    one.write_bytes(gzip.compress(text.encode()) if kind == "file .gz" else text.encode())
    return one, one


@pytest.mark.parametrize("kind", ["dir", "dir .gz", "file", "file .gz"])
def test_a_refused_read_is_not_remembered(tmp_path: Path, kind: str) -> None:
    assert EIO_FILE.is_file()
    ccd_path, file = _ccd(tmp_path, kind)
    sound = file.read_bytes()
    file.unlink()
    file.symlink_to(EIO_FILE)
    ccd = CCD(ccd_path)
    for _ in range(2):
        with pytest.raises(CCDReadError) as info:
            ccd.load(["SO4", "HEM"])
        exc = info.value
        assert isinstance(exc, CCDError) and exc.stage == "ccd" and exc.path == str(file)
        assert exc.os_error.errno == errno.EIO
        if kind.startswith("dir"):
            assert exc.component == "HEM"
            assert (
                str(exc)
                == f"cannot read the CCD file {file} (the definition of HEM): Input/output error (EIO)"
            )
        else:
            assert exc.component is None
            assert str(exc) == f"cannot read the CCD {file}: Input/output error (EIO)"
    file.unlink()
    file.write_bytes(sound)  # the file reads again
    found = ccd.load(["SO4", "HEM"])
    assert set(found) == {"SO4", "HEM"}
    assert found["HEM"].sha256 == CCD(ccd_path)["HEM"].sha256
    assert found["HEM"].n_atoms == CCD(SAMPLE_CCD)["HEM"].n_atoms


def test_a_definition_that_does_not_parse_is_still_remembered(tmp_path: Path) -> None:
    """The other side: a broken definition fails every lookup of the same CCD, its file not read
    again (as before; a build rebuilds its entries once the definition's text changes)."""
    d, file = _ccd(tmp_path, "dir")
    sound = file.read_text()
    file.write_text(sound[: len(sound) // 2])
    ccd = CCD(d)
    with pytest.raises(CCDError) as info:
        ccd.load(["HEM"])
    assert not isinstance(info.value, CCDReadError)
    assert str(info.value).endswith("; fix or replace it")
    file.write_text(sound)
    with pytest.raises(CCDError):
        ccd.load(["HEM"])
