"""A wwPDB mirror holding both formats gives each structure twice, and now says so (review R40d s51
#4): ``--pdb-dir`` at a mirror's root with ``mmCIF/a8/1a8o.cif.gz`` and ``pdb/a8/pdb1a8o.ent.gz``
built the ids ``1a8o`` and ``pdb1a8o`` without the warning that ``1A8O.cif`` beside ``1A8O.pdb`` gets.
The ids stay as they were (the stems): a stored entry is never renamed."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest

import featurecache
from tests.conftest import STRUCTURES, build_store


def _mirror(root: Path) -> Path:
    """The wwPDB archive's divided layout of the real 1A8O and 1LCD files (mmCIF and PDB format), and
    102m in mmCIF only."""
    for code, sub in (("1a8o", "a8"), ("1lcd", "lc")):
        (root / "mmCIF" / sub).mkdir(parents=True, exist_ok=True)
        (root / "pdb" / sub).mkdir(parents=True, exist_ok=True)
        upper = code.upper()
        (root / "mmCIF" / sub / f"{code}.cif.gz").write_bytes(
            gzip.compress((STRUCTURES / f"{upper}.cif").read_bytes())
        )
        (root / "pdb" / sub / f"pdb{code}.ent.gz").write_bytes(
            gzip.compress((STRUCTURES / f"{upper}.pdb").read_bytes())
        )
    (root / "mmCIF" / "02").mkdir()
    (root / "mmCIF" / "02" / "102m.cif.gz").write_bytes(gzip.compress((STRUCTURES / "102m.cif").read_bytes()))
    return root


def test_a_mirror_of_both_formats_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _mirror(tmp_path / "mirror")
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        res = build_store(tmp_path / "store", root, workers=1)
    assert res.n_built == 5 and res.n_failed == 0
    ids = sorted(featurecache.open_store(tmp_path / "store").entries.column("id").to_pylist())
    assert ids == ["102m", "1a8o", "1lcd", "pdb1a8o", "pdb1lcd"]  # unchanged: each file its own entry
    lines = [
        r.getMessage() for r in caplog.records if "structure(s) given by several files" in r.getMessage()
    ]
    # before: none
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "2 structure(s) given by several files of one PDB id in the wwPDB archive's"
    ), lines
    assert (
        "(mmCIF/a8/1a8o.cif.gz, pdb/a8/pdb1a8o.ent.gz; mmCIF/lc/1lcd.cif.gz, pdb/lc/pdb1lcd.ent.gz)"
        in lines[0]
    )
    assert "102m" not in lines[0]


def test_one_format_of_the_mirror_is_not(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``--pdb-dir`` at the ``pdb/`` tree (``pdb1a8o.ent.gz``), with a ``1psm.cif`` beside it: no twin."""
    root = _mirror(tmp_path / "mirror") / "pdb"
    (root / "1psm.cif").write_bytes((STRUCTURES / "1psm.cif").read_bytes())
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        res = build_store(tmp_path / "store", root, workers=1)
    assert res.n_built == 3 and res.n_failed == 0
    assert not [r for r in caplog.records if "structure(s) given by several files" in r.getMessage()]
