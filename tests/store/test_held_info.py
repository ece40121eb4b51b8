"""``featurecache info --json`` says which structure parts are held back from the published index,
and how many entries they hold (``held_parts``). Before, only the text warning on stderr said so:
a program reading the JSON could not tell a killed extension's store from a finished one.

Real builds with the sample MSAs and CCD: 1A8O and 7DDO in a part each; then 1psm and 2q2k added
by a CLI build (its own embedded cluster, one structure part of up to 16 entries) SIGKILLed once
its index rebuild before the MSA stage has taken in its new part (tests/killed_builds.py); then
the same build run to its end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, SAMPLES, build_store, cli_in_process
from tests.killed_builds import kill_after_the_pre_msa_rebuild, structure_parts

MSAS, CCD = SAMPLES / "msas", SAMPLES / "ccd"
#: the keys `info --json` had before held_parts (each kept as it was), and warnings_by_stage (session 35)
KEYS = {"path", "versions", "config_hash", "updated", "counts", "parts", "bytes", "failures_by_stage",
        "failures_by_error", "removed", "build_inputs", "featurizer_versions", "warnings_by_stage"}  # fmt: skip


def _info(store: Path) -> tuple[dict[str, Any], str]:
    """``featurecache info STORE --json``: the real CLI, in this process (tests/conftest.py)."""
    r = cli_in_process("info", str(store), "--json", cwd=REPO)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


@pytest.mark.timeout(900)
def test_info_json_names_the_held_parts_of_a_killed_extension_and_none_once_finished(tmp_path: Path) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1A8O.pdb", "7DDO.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    doc, _ = _info(store)
    assert set(doc) == KEYS | {"held_parts", "msa_stages", "ccd_definitions_mixed"}
    assert doc["held_parts"] == {"parts": [], "entries": 0, "new": 0, "updated": 0}
    before = structure_parts(store)

    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    kill_after_the_pre_msa_rebuild(store, pdb, MSAS, CCD)
    new = sorted(structure_parts(store) - before)
    assert len(new) == 1  # the two new inputs in one part (the CLI's --part-size is 16)
    doc, warned = _info(store)
    assert set(doc) == KEYS | {"held_parts", "msa_stages", "ccd_definitions_mixed"}
    # the two added inputs are held back: not counted among the published entries
    assert doc["held_parts"] == {"parts": new, "entries": 2, "new": 2, "updated": 0}
    assert doc["counts"]["entries"] == 2
    assert new[0] in warned and "not yet published" in warned  # the text warning, as before

    summary = build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    assert summary.n_built == 0  # published from the held part, nothing built again
    doc, warned = _info(store)
    assert doc["held_parts"] == {"parts": [], "entries": 0, "new": 0, "updated": 0}
    assert doc["counts"]["entries"] == 4 and "not yet published" not in warned


def _nudge_first_atom(path: Path) -> None:
    """Move the first ATOM record's x by 0.001 Å (PDB columns 31-38): a new version of the entry."""
    text = path.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("ATOM"))
    path.write_text(text.replace(line, line[:30] + "%8.3f" % (float(line[30:38]) + 0.001) + line[38:], 1))


@pytest.mark.timeout(1200)
def test_held_entries_are_counted_once_and_split_into_new_and_updated(tmp_path: Path) -> None:
    """Review RF2 s25 #2: three stopped extensions (1psm added; 1psm changed; the published 1A8O
    changed) held three parts, and held_parts.entries summed their rows: 3, where publishing adds
    one entry (1psm; 1A8O is served already, and 1psm's first held version is superseded)."""
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1A8O.pdb", "7DDO.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)

    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb / "1psm.cif")
    kill_after_the_pre_msa_rebuild(store, pdb, MSAS, CCD)
    cif = pdb / "1psm.cif"
    lines = cif.read_text().splitlines(keepends=True)
    k = next(i for i, ln in enumerate(lines) if ln.startswith("ATOM"))
    fields = lines[k].split()
    x = fields[10]
    lines[k] = lines[k].replace(f" {x} ", f" {float(x) + 0.001:.3f} ", 1)
    assert lines[k] != cif.read_text().splitlines(keepends=True)[k]
    cif.write_text("".join(lines))
    kill_after_the_pre_msa_rebuild(store, pdb, MSAS, CCD)
    _nudge_first_atom(pdb / "1A8O.pdb")
    kill_after_the_pre_msa_rebuild(store, pdb, MSAS, CCD)

    doc, warned = _info(store)
    assert len(doc["held_parts"]["parts"]) == 3, doc["held_parts"]
    assert doc["counts"]["entries"] == 2  # 1A8O and 7DDO, as first built
    # 1psm (twice held, once counted: new) and 1A8O (served: updated)
    assert {k: doc["held_parts"][k] for k in ("entries", "new", "updated")} == {
        "entries": 2,
        "new": 1,
        "updated": 1,
    }
    assert "2 entries (1 new, 1 a newer version of a served one)" in warned, warned

    build_store(store, pdb, workers=1, part_size=1, msa_dir=MSAS, ccd=CCD)
    after, _ = _info(store)
    assert after["held_parts"] == {"parts": [], "entries": 0, "new": 0, "updated": 0}
    assert after["counts"]["entries"] == doc["counts"]["entries"] + doc["held_parts"]["new"] == 3
