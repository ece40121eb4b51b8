"""A CCD change rebuilds the entries that used a definition that changed, not the store (review
R26b s44 #5), and a change applied through one ``--pdb-dir`` names the entries of another that keep
the previous definition (#6).

Until session 44 every entry's key held the fingerprint of the whole ``--ccd`` input, so a README
edit, or a component no entry uses, rebuilt every entry. Now each entry's part records the
definitions it looked up (``store.definitions``) and the build compares them with the CCD's
(``build.ccd_keys``); an entry keyed before that record keeps the old rule until the CCD changes.

Real builds (the session's LocalCluster, 1 worker) of the sample structures and CCD; which entry
uses which code is checked from the structure files first (102m: HEM, 7DDO: NAG and ZN,
721p-assembly1: GNP and MG, 2q2k: 5IU; 1psm and 1A8O: standard residues only). The arrays are
compared through the public API (``open_store``: every array of every entry, and its reference
features).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import featurecache
from featurecache.const import FEATURIZER_VERSION
from tests.conftest import REPO, build_store, featurecache_at

SAMPLES = REPO / "samples"
#: the code before entries recorded their definitions (its keys hold the CCD's fingerprint)
BEFORE_RECORD = "247b006"
#: the sample entries that use each code (HETATM residue names of their files)
USERS = {
    "HEM": {"102m"},
    "ZN": {"7DDO"},
    "NAG": {"7DDO"},
    "MG": {"721p-assembly1"},
    "GNP": {"721p-assembly1"},
}
ALL = {"102m", "1A8O", "1psm", "2q2k", "721p-assembly1", "7DDO"}


def _inputs(tmp: Path) -> tuple[Path, Path]:
    pdb, ccd = tmp / "pdb", tmp / "ccd"
    shutil.copytree(SAMPLES / "structures", pdb)
    shutil.copytree(SAMPLES / "ccd", ccd)
    return pdb, ccd


def _hetero_codes(path: Path) -> set[str]:
    """The residue names of a sample file's HETATM records (mmCIF or PDB), waters left out."""
    text = path.read_text()
    if path.suffix == ".pdb":
        return {line[17:20].strip() for line in text.splitlines() if line.startswith("HETATM")} - {"HOH"}
    return {line.split()[5] for line in text.splitlines() if line.startswith("HETATM")} - {"HOH"}


def _digest(store: Path) -> dict[str, dict[str, str]]:
    """Per entry: the SHA-256 of every array (atoms, tokens, bonds, interfaces) and of its
    reference features, through the public reader."""

    def h(a: Any) -> str:
        a = np.ascontiguousarray(a)
        return hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).hexdigest()[:16]

    s = featurecache.open_store(store)
    out: dict[str, dict[str, str]] = {}
    for eid in s.ids:
        e = s.entry(eid)
        d = {
            f"{g}/{f}": h(a)
            for g in ("atoms", "tokens", "bonds", "interfaces")
            for f, a in getattr(e, g).items()
        }
        d.update({f"ref/{f}": h(a) for f, a in s.reference_features(e).items()})
        out[eid] = d
    return out


def _build(store: Path, pdb: Path, ccd: Path | None) -> tuple[Any, set[str]]:
    """A build; returns its summary and the ids of the entries it wrote."""
    parts = store / "parts"
    before = {p.name for p in parts.iterdir()} if parts.is_dir() else set()
    summary = build_store(store, pdb, workers=1, ccd=ccd, part_size=2)
    assert summary.n_failed == 0, summary.failures
    new = {p.name for p in parts.iterdir()} - before
    live = featurecache.open_store(store).entries.select(["id", "part"]).to_pylist()
    return summary, {r["id"] for r in live if r["part"] in new}


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, str]]]:
    """A clean build of the sample with the sample CCD (copies, as :func:`_inputs` makes; part size 2)
    and its :func:`_digest`: the clean build the tests below compare with where their CCD ends as the
    sample's (built once for the module; read-only)."""
    root = tmp_path_factory.mktemp("sample_build")
    pdb, ccd = _inputs(root)
    store = root / "store"
    _build(store, pdb, ccd)
    return store, _digest(store)


def test_the_sample_entries_use_the_codes_the_tests_assume() -> None:
    files = {p.name.rsplit(".", 1)[0]: p for p in (SAMPLES / "structures").iterdir()}
    assert set(files) == ALL
    for code, users in USERS.items():
        assert {e for e, p in files.items() if code in _hetero_codes(p)} == users, code
    assert (SAMPLES / "ccd" / "HEM.cif").is_file() and (SAMPLES / "ccd" / "ZN.cif").is_file()


def test_a_ccd_edit_no_entry_uses_rebuilds_nothing(tmp_path: Path) -> None:
    pdb, ccd = _inputs(tmp_path)
    store = tmp_path / "store"
    first, wrote = _build(store, pdb, ccd)
    assert first.n_built == 6 and wrote == ALL
    before = _digest(store)

    (ccd / "README.md").write_text("# notes on this CCD copy\n")  # a file that is no definition
    again, wrote = _build(store, pdb, ccd)
    assert (again.n_built, again.n_skipped, wrote) == (0, 6, set())

    # a new component no entry uses (ZZ9: ZN's definition under another code)
    (ccd / "ZZ9.cif").write_text((ccd / "ZN.cif").read_text().replace("ZN", "ZZ9"))
    third, wrote = _build(store, pdb, ccd)
    assert (third.n_built, third.n_skipped, wrote) == (0, 6, set())
    assert _digest(store) == before


def test_a_changed_definition_rebuilds_exactly_its_entries_as_a_clean_build(
    tmp_path: Path, sample_build: tuple[Path, dict[str, dict[str, str]]]
) -> None:
    pdb, ccd = _inputs(tmp_path)
    store = tmp_path / "store"
    _build(store, pdb, ccd)
    # the CCD's update: HEM's iron charged 2 (was 0), MG's charge 1 (was 2)
    hem = (ccd / "HEM.cif").read_text()
    assert "HEM  FE    FE    FE  0 " in hem
    (ccd / "HEM.cif").write_text(hem.replace("HEM  FE    FE    FE  0 ", "HEM  FE    FE    FE  2 "))
    mg = (ccd / "MG.cif").read_text()
    assert "_chem_comp_atom.charge                     2 " in mg
    (ccd / "MG.cif").write_text(mg.replace("_chem_comp_atom.charge                     2 ",
                                           "_chem_comp_atom.charge                     1 "))  # fmt: skip
    again, wrote = _build(store, pdb, ccd)
    assert wrote == USERS["HEM"] | USERS["MG"]
    assert (again.n_built, again.n_rebuilt, again.n_skipped) == (2, 2, 4)
    from featurecache.build.summary import rebuilt_line

    assert again.rebuilt_for_definitions == {"n": 2, "codes": "HEM (1), MG (1)"}
    assert rebuilt_line(again) == "2 (same file): CCD definitions changed: 2 entries, codes HEM (1), MG (1)"

    clean = tmp_path / "clean"
    _build(clean, pdb, ccd)
    incremental, fresh = _digest(store), _digest(clean)
    assert incremental == fresh
    # the premise: the change is in them (MG's charge is a token charge of 721p-assembly1); against
    # a clean build with the sample's CCD as it was
    _, first = sample_build
    assert first["721p-assembly1"] != fresh["721p-assembly1"]
    assert first["1psm"] == fresh["1psm"]


def test_a_code_defined_later_rebuilds_the_entry_that_looked_it_up(
    tmp_path: Path, sample_build: tuple[Path, dict[str, dict[str, str]]]
) -> None:
    pdb, ccd = _inputs(tmp_path)
    zn = (ccd / "ZN.cif").read_text()
    (ccd / "ZN.cif").unlink()  # the CCD lacks ZN: 7DDO's zinc keeps only the file's atoms
    store = tmp_path / "store"
    _build(store, pdb, ccd)
    _again, wrote = _build(store, pdb, ccd)
    assert wrote == set()

    (ccd / "ZN.cif").write_text(zn)
    third, wrote = _build(store, pdb, ccd)
    assert wrote == USERS["ZN"]
    assert third.rebuilt_for_definitions == {"n": 1, "codes": "ZN (1)"}
    # the CCD is the sample's again (ZN.cif written back): equal to its clean build
    assert sorted(p.name for p in ccd.iterdir()) == sorted(p.name for p in (SAMPLES / "ccd").iterdir())
    assert _digest(store) == sample_build[1]

    # and removed again: the entry that used it is rebuilt without it
    (ccd / "ZN.cif").unlink()
    _fourth, wrote = _build(store, pdb, ccd)
    assert wrote == USERS["ZN"]


def _old_build(package: Path, pdb: Path, ccd: Path, out: Path) -> None:
    args = ["build", "--pdb-dir", str(pdb), "--ccd", str(ccd), "--out", str(out), "--workers", "1", "--no-progress",
            "--part-size", "2"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=package, env={**os.environ, "PYTHONPATH": str(package)}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_store_of_the_code_before_is_kept_until_its_ccd_changes(
    tmp_path: Path, sample_build: tuple[Path, dict[str, dict[str, str]]]
) -> None:
    old = featurecache_at(BEFORE_RECORD, tmp_path / "old")
    # the code before the record, under this code's featurizer version: a version bump since then
    # (0.10.0 -> 0.11.0, review R40a s51 #1) rebuilds every entry whatever its key, and the upgrade of
    # keys is what is tested here
    const = old / "featurecache" / "const.py"
    assert const.read_text().count('FEATURIZER_VERSION = "') == 1
    const.write_text(re.sub(r'FEATURIZER_VERSION = "[^"]*"', f'FEATURIZER_VERSION = "{FEATURIZER_VERSION}"',
                            const.read_text()))  # fmt: skip
    pdb, ccd = _inputs(tmp_path)
    store = tmp_path / "store"
    _old_build(old, pdb, ccd, store)
    manifests = [json.loads(p.read_text()) for p in store.glob("parts/s-*/_index/part.json")]
    assert manifests and not any("ccd_definitions" in m for m in manifests)  # the premise: no record

    # the upgrade rebuilds nothing with the same CCD
    same, wrote = _build(store, pdb, ccd)
    assert (same.n_built, same.n_skipped, wrote) == (0, 6, set())

    # any change to the CCD rebuilds those entries (their key holds its fingerprint), into keys
    # of the new kind; after that, a README edit rebuilds nothing
    (ccd / "README.md").write_text("# notes\n")
    changed, wrote = _build(store, pdb, ccd)
    assert (changed.n_rebuilt, wrote) == (6, ALL)
    (ccd / "README.md").write_text("# notes, edited\n")
    later, wrote = _build(store, pdb, ccd)
    assert (later.n_built, wrote) == (0, set())
    # the definitions are the sample's (README.md is none): equal to its clean build
    assert _digest(store) == sample_build[1]


def test_the_record_is_the_same_whatever_the_parts(
    tmp_path: Path, sample_build: tuple[Path, dict[str, dict[str, str]]]
) -> None:
    """Determinism: the entries' keys, contents and recorded definitions do not depend on how the
    inputs were cut into parts (one entry a part here, two in the module's clean build); the record
    names what each entry used."""
    from featurecache.store.definitions import part_manifest, recorded_definitions

    pdb, ccd = _inputs(tmp_path)
    one_a_part = tmp_path / "a"
    build_store(one_a_part, pdb, workers=1, ccd=ccd, part_size=1)
    records = []
    for store in (one_a_part, sample_build[0]):
        entries = featurecache.open_store(store).entries
        used: dict[str, dict[str, str]] = {}
        for part in set(entries.column("part").to_pylist()):
            record = recorded_definitions(part_manifest(store, part))
            assert record is not None
            used.update(record)
        rows = entries.select(["id", "key", "content_hash"]).to_pylist()
        records.append((sorted((r["id"], r["key"], r["content_hash"]) for r in rows), used))
    assert records[0] == records[1]
    used = records[0][1]
    assert {e for e, codes in used.items() if "HEM" in codes} == USERS["HEM"]
    assert set(used["7DDO"]) >= {"NAG", "ZN"}
    from featurecache.parse.ccd import parse_component_file

    assert used["102m"]["HEM"] == parse_component_file(ccd / "HEM.cif").sha256


def test_a_change_through_another_dir_names_the_entries_that_keep_the_old_definition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb, ccd = _inputs(tmp_path)
    a, b = tmp_path / "pdbA", tmp_path / "pdbB"
    a.mkdir()
    b.mkdir()
    shutil.copy(pdb / "102m.cif", a / "102m.cif")
    shutil.copy(pdb / "1psm.cif", a / "1psm.cif")
    shutil.copy(pdb / "102m.cif", b / "102mb.cif")  # HEM in both directories
    store = tmp_path / "store"
    _build(store, a, ccd)
    _build(store, b, ccd)
    hem = (ccd / "HEM.cif").read_text()
    (ccd / "HEM.cif").write_text(hem.replace("HEM  FE    FE    FE  0 ", "HEM  FE    FE    FE  2 "))
    with caplog.at_level(logging.WARNING):
        _summary, wrote = _build(store, b, ccd)
    assert wrote == {"102mb"}
    lines = [r.getMessage() for r in caplog.records if "another definition of HEM" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert f"1 entry (102m) of {a.resolve()}" in lines[0]
    assert f"featurecache build --pdb-dir {a.resolve()} --ccd {ccd.absolute()}" in lines[0]

    from tests.conftest import cli_in_process  # info --json counts them

    done = cli_in_process("info", str(store), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["ccd_definitions_mixed"]
    assert doc == {"entries": 1, "codes": ["HEM"], "by_pdb_dir": {str(a.resolve()): 1}}

    # the other directory's build rebuilds it with the new definition: nothing mixed any more
    caplog.clear()
    _summary, wrote = _build(store, a, ccd)
    assert wrote == {"102m"}
    assert (
        json.loads(cli_in_process("info", str(store), "--json").stdout)["ccd_definitions_mixed"]["entries"]
        == 0
    )
