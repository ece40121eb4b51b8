"""Bit damage in the Arrow index is found by ``featurecache verify`` and repaired by ``verify
--repair`` (+ a build) (review R28c s46 #3). Arrow IPC files carry no checksum and verify compared
the index with the parts only by which entries they hold, so a flipped bit read back as another
resolution or sequence and verify said "ok". Now verify compares ``index/*.arrow`` with the tables
a rebuild from the parts' own ``_index/`` gives, column by column; a part records the sha256 of
its ``_index/*.arrow`` files in ``part.json`` when it is written; and each chain's
``sequence_hash`` must be the hash of its sequence (what catches damage in an older part, which
records no sha256).

Real builds (1 worker, one input per structure part) of the repo's samples 1psm and 2q2k, damaged
on disk the way a bad disk does it (one bit, file size and everything else unchanged); real CLI
runs."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

import featurecache
from featurecache.featurize.seqhash import sequence_hash
from featurecache.store.index import read_table
from featurecache.store.writer import INDEX_SHA256_KEY
from tests.conftest import CliRun, build_store, cli_in_process
from tests.store.conftest import SAMPLE_PAIR

IDS = SAMPLE_PAIR


def _cli(*args: str | Path) -> CliRun:
    return cli_in_process(*map(str, args))


@pytest.fixture
def built(sample_pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """(store, pdb): 1psm and 2q2k built one part each (tests/store/conftest.py)."""
    return sample_pair


def _flip(f: Path, old: bytes, bit: int) -> None:
    """Flip one bit of the first ``old`` in ``f`` in place (its size, inode and the rest unchanged)."""
    with f.open("r+b") as fh:
        data = fh.read()
        at = data.index(old) + len(old) // 2
        fh.seek(at)
        fh.write(bytes([data[at] ^ bit]))


def _part_of(store: Path, entry_id: str) -> str:
    s = featurecache.open_store(store)
    return str(s.entries.column("part")[s.row_of(entry_id)].as_py())


def test_a_flipped_bit_in_the_index_is_found_and_repaired(built: tuple[Path, Path]) -> None:
    store, _pdb = built
    f = store / "index" / "entries.arrow"
    (want,) = [r["resolution"] for r in read_table(f, memory_map=False).to_pylist() if r["id"] == "2q2k"]
    assert not math.isnan(want)
    _flip(f, struct.pack("<d", want), 0x01)
    (got,) = [r["resolution"] for r in read_table(f, memory_map=False).to_pylist() if r["id"] == "2q2k"]
    assert got != want  # the premise: other data, and the file still reads

    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert (
        "MISMATCH index/entries.arrow differs from the rows of the parts' own index: column resolution"
        in (bad.stdout)
    )
    assert "(id 2q2k)" in bad.stdout and "--repair` rewrites the index" in bad.stdout, bad.stdout

    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    s = featurecache.open_store(store)
    assert s.entries.column("resolution")[s.row_of("2q2k")].as_py() == want
    ok = _cli("verify", store, "--no-progress")
    assert ok.returncode == 0 and "ok: store verified" in ok.stdout, ok.stdout + ok.stderr


def _damage_sequence(store: Path, part: str) -> None:
    """One letter of 1psm's chain sequence in its part's own ``_index/chains.arrow``, changed."""
    f = store / "parts" / part / "_index" / "chains.arrow"
    (seq,) = [r["sequence"] for r in read_table(f, memory_map=False).to_pylist() if r["mol_type"] == 0]
    _flip(f, seq.encode(), 0x02)


@pytest.mark.parametrize("recorded", [True, False], ids=["part-records-sha256", "older-part"])
def test_a_flipped_bit_in_a_parts_own_index_is_found_and_repaired(
    built: tuple[Path, Path], recorded: bool
) -> None:
    store, pdb = built
    part = _part_of(store, "1psm")
    manifest = store / "parts" / part / "_index" / "part.json"
    doc = json.loads(manifest.read_text())
    if recorded:
        assert set(doc[INDEX_SHA256_KEY]) >= {"entries.arrow", "chains.arrow"}
    else:  # a part written before parts recorded them
        doc.pop(INDEX_SHA256_KEY, None)
        manifest.write_text(json.dumps(doc, indent=1, sort_keys=True))
    _damage_sequence(store, part)

    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    if recorded:
        assert f"MISMATCH part {part}: its own index file" in bad.stdout, bad.stdout
        assert "chains.arrow has changed since the part was written" in bad.stdout, bad.stdout
        # the hint and the repair say what happened to it: it reads, its bytes changed (review R29a s46 #3)
        assert f"{part} (own index changed since it was written)" in bad.stdout + bad.stderr, bad.stdout
        assert "unreadable" not in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    else:
        assert "MISMATCH entry 1psm: chain A: its sequence_hash" in bad.stdout, bad.stdout
    assert "2q2k" not in bad.stdout

    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    if recorded:
        assert f"moved part {part} (its own index changed since it was written)" in rep.stdout, rep.stdout
    again = build_store(store, pdb, workers=1, part_size=1)
    assert again.n_failed == 0 and again.n_built == 1  # exactly 1psm
    ok = _cli("verify", store, "--no-progress")
    assert ok.returncode == 0 and "ok: store verified" in ok.stdout, ok.stdout + ok.stderr
    s = featurecache.open_store(store)
    assert sorted(s.ids) == list(IDS)
    for c in s.chains.to_pylist():
        assert c["sequence_hash"] == sequence_hash(c["sequence"], c["mol_type"])
