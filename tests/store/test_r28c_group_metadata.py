"""``featurecache verify`` requires the metadata of the store's intermediate zarr groups and says
when a part's ``_verify/`` file does not read (review R28c s46 #12). Without ``parts/zarr.json``
the store is no Zarr v3 hierarchy (zarr-python's ``open_group(store).members()`` reaches no part),
and without an MSA part's ``residues/zarr.json`` none of its residue arrays; verify said "ok" to
both, and to a truncated ``_verify/*.arrow`` (which silently takes the "which arrays changed"
detail out of any later damage report). Now the first two are problems (exit 4) that ``verify
--repair`` fixes by writing the group metadata; the third is a note.

A real build (one worker) of the repo's sample 1psm (its single-sequence MSA: an MSA part); real
CLI runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import SAMPLES, build_store, cli_in_process


@pytest.fixture
def store(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    out = tmp_path / "store"
    assert build_store(out, pdb, workers=1).n_failed == 0
    return out


def _msa_part(store: Path) -> Path:
    s = featurecache.open_store(store)
    (part,) = set(s.msas.column("part").to_pylist())
    return store / "parts" / str(part)


@pytest.mark.parametrize("group", ["parts", "residues"])
def test_missing_group_metadata_is_a_problem_that_repair_writes(store: Path, group: str) -> None:
    meta = store / "parts" / "zarr.json" if group == "parts" else _msa_part(store) / "residues" / "zarr.json"
    before = json.loads(meta.read_text())
    assert before["node_type"] == "group"
    meta.unlink()

    bad = cli_in_process("verify", str(store), "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert "zarr.json is missing or not a zarr group's metadata" in bad.stdout, bad.stdout
    assert "`featurecache verify --repair` writes it" in bad.stdout, bad.stdout

    rep = cli_in_process("verify", str(store), "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert json.loads(meta.read_text()) == before
    ok = cli_in_process("verify", str(store), "--no-progress")
    assert ok.returncode == 0 and "ok: store verified" in ok.stdout, ok.stdout + ok.stderr


def test_an_unreadable_verify_file_is_noted(store: Path) -> None:
    s = featurecache.open_store(store)
    part = store / "parts" / str(s.entries.column("part")[0].as_py())
    f = part / "_verify" / "group_hashes.arrow"
    with f.open("r+b") as fh:
        fh.truncate(f.stat().st_size // 2)
    done = cli_in_process("verify", str(store), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"note: part {part.name}: {f} is unreadable" in done.stderr, done.stderr
