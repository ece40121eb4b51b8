"""Fixtures of the store tests: a real store of an older featurizer version, and a copy of it
extended by this code (tests/store/test_versions*.py); a store whose rebuilt entry left a part
unused (the prune tests)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import featurecache
from featurecache.const import FEATURIZER_VERSION
from tests.conftest import MSAS, SAMPLES, STRUCTURES, build_store, build_with_package, featurecache_at

#: the last commit of featurizer 0.5.0 (before 0.6.0's polymer caps): its package builds the older store
OLD_COMMIT = "b974d7da506a1963a7ced872005ab3088635aff1"
OLD_VERSION = "0.5.0"


@dataclass
class Stores:
    a: Path  # --pdb-dir of the old build: 102m (protein, HEM, SO4) with its MSA
    msa: Path  # its --msa-dir
    b: Path  # --pdb-dir of the extension: 209d (DNA)
    old: Path  # built by OLD_COMMIT's package from a
    mixed: Path  # a copy of old extended by this code from b
    extension_log: list[logging.LogRecord]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="session")
def version_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    """``old``: built by OLD_COMMIT's package (git archive; skips without the git history) from
    ``a`` with its MSA; ``mixed``: a copy of it extended by this code from ``b``, the extension's
    log records kept (``featurecache.build.run``)."""
    assert OLD_VERSION != FEATURIZER_VERSION  # the premise: two versions
    tmp = tmp_path_factory.mktemp("versions")
    a, b, msa = tmp / "a", tmp / "b", tmp / "msa"
    a.mkdir()
    b.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", a)
    shutil.copy(STRUCTURES / "209d-assembly1.cif", b)
    shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / "3", msa / "3")  # 102m's MSA
    old = tmp / "old"
    done = build_with_package(featurecache_at(OLD_COMMIT, tmp / "pkg"), a, old, msa_dir=msa)
    assert done.returncode == 0, done.stdout + done.stderr
    mixed = tmp / "mixed"
    shutil.copytree(old, mixed)
    handler = _Records()
    run_log = logging.getLogger("featurecache.build.run")
    run_log.addHandler(handler)
    try:
        summary = build_store(mixed, b, workers=1)
    finally:
        run_log.removeHandler(handler)
    assert summary.n_failed == 0 and summary.n_built == 1
    yield Stores(a.resolve(), msa, b.resolve(), old, mixed, handler.records)


@pytest.fixture(scope="session")
def replaced_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """102m and 1psm built one part each, then 102m's file replaced by 2q2k's and built again: part
    s-000000 is used by no index row (prune deletes it). Tests copy it before they change it; its
    inputs are ``STORE.parent / "in"``."""
    tmp = tmp_path_factory.mktemp("prune")
    inputs, out = tmp / "in", tmp / "store"
    inputs.mkdir()
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    build_store(out, inputs, workers=1, part_size=1, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    first = featurecache.open_store(out)
    assert dict(zip(first.ids, first.entries.column("part").to_pylist(), strict=True)) == {
        "102m": "s-000000",
        "1psm": "s-000001",
    }
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", inputs / "102m.cif")
    build_store(out, inputs, workers=1, part_size=1, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    return out


#: the entries of :func:`sample_pair`: a protein (1psm) and a protein–DNA complex (2q2k) of the samples
SAMPLE_PAIR = ("1psm", "2q2k")


@pytest.fixture
def sample_pair(tmp_path: Path) -> tuple[Path, Path]:
    """(store, pdb): :data:`SAMPLE_PAIR` built one part each (1 worker), verified sound: the store
    the damage and repair tests of session 46 (tests/store/test_r28c_*, test_r29b_*) damage."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for entry in SAMPLE_PAIR:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    from featurecache.store.verify import verify_store

    assert verify_store(store) == [] and featurecache.open_store(store).ids == list(SAMPLE_PAIR)
    return store, pdb
