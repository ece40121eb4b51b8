"""``verify --repair`` takes out of the index only what does not read because its data is damaged
(review R31d s47 #1). A KeyError, ValueError or RuntimeError out of the reader is a bug in the
reader, which says nothing of the data: the entry or MSA "could not be checked (KeyError: …)", a
problem (exit 4) that the repair keeps, as it keeps an unsettled one. Before, a renamed dict key in
the reader read as damage of every entry, and the repair unpublished the whole sound store; the
line also dropped the exception's class ("unreadable ('centre_coords')").

A real build (1 worker, one input per structure part) of the repo's sample 1psm and 2q2k with their
real OpenFold MSAs and the sample CCD; the bug is a monkeypatched reader method; real CLI runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import featurecache
from featurecache.store.msa import MSAReader
from featurecache.store.reader import LocalStore
from featurecache.store.root import PartArrays
from featurecache.store.verify import _unreadable_component_parts, repair_store, verify_store
from tests.conftest import cli_in_process

IDS = ("1psm", "2q2k")


@pytest.fixture
def store(two_entry_copy: Path) -> Path:
    return two_entry_copy


def _keys(store: Path) -> list[str]:
    return sorted(featurecache.open_store(store).msas.column("key").to_pylist())


def _renamed_key(self: LocalStore, entry_id: str, group: str) -> tuple[str, ...]:
    return {"tokens": ("res_name",)}["centre_coords"]  # a bug: a lookup of a renamed key


def _bad_slice(self: MSAReader, key: str, rows: object = None, cols: object = None) -> object:
    raise ValueError("slice step cannot be zero")  # a bug: what numpy says of a selection built wrong


def test_a_reader_bug_is_no_damage_the_repair_keeps_every_row(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = sorted(p.name for p in (store / "parts").iterdir())
    keys = _keys(store)
    monkeypatch.setattr(LocalStore, "stored_fields", _renamed_key)
    monkeypatch.setattr(MSAReader, "msa", _bad_slice)

    run = cli_in_process("verify", str(store), "--repair", "--no-progress")

    assert run.returncode == 4, run.stdout + run.stderr  # problems: not "ok"
    for entry in IDS:
        assert f"UNCHECKED entry {entry}: could not be checked (KeyError: 'centre_coords')" in run.stdout, (
            run.stdout
        )
    for key in keys:
        assert (
            f"UNCHECKED MSA {key}: could not be checked (ValueError: slice step cannot be zero)" in run.stdout
        )
    assert "removed from the index" not in run.stdout, run.stdout
    assert "nothing to repair: --repair keeps the" in run.stdout, run.stdout
    monkeypatch.undo()
    # nothing written: no removal part, the index as it was, the store sound
    assert sorted(p.name for p in (store / "parts").iterdir()) == parts
    assert featurecache.open_store(store).ids == list(IDS) and _keys(store) == keys
    assert verify_store(store) == []


def test_damage_is_repaired_and_the_rows_a_bug_stopped_are_kept(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated shard of 2q2k's atoms (damage) is taken out; the MSAs the bug stopped are not,
    and are listed again when the store is verified after the repair's write."""
    s = featurecache.open_store(store)
    part = str(s.entries.column("part")[s.row_of("2q2k")].as_py())
    (shard,) = [
        f for f in (store / "parts" / part / "atoms").rglob("*") if f.is_file() and f.name != "zarr.json"
    ]
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size // 2)
    keys = _keys(store)
    monkeypatch.setattr(MSAReader, "msa", _bad_slice)

    result = repair_store(store)

    assert [(d.kind, d.id) for d in result.removed] == [("entry", "2q2k")]
    assert not result.kept and not result.blocked
    lines = [f"MSA {k}: could not be checked (ValueError: slice step cannot be zero)" for k in keys]
    assert result.report.unchecked == lines
    assert all(line in result.report.problems for line in lines)
    # verified again after the write: still not checked, still listed (2q2k's own MSA is listed no
    # more: the index lists the MSAs of the entries it lists)
    kept = _keys(store)
    assert kept and set(kept) < set(keys)
    assert result.left == [
        f"MSA {k}: could not be checked (ValueError: slice step cannot be zero)" for k in kept
    ]
    monkeypatch.undo()
    assert featurecache.open_store(store).ids == ["1psm"]


def test_a_component_part_a_bug_stops_is_not_moved_aside(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-read that picks the component parts ``--repair`` moves aside: a bug's error there is
    a line of its own, not damage of the part."""
    parts = {p.name: p for p in sorted((store / "parts").iterdir()) if p.is_dir()}
    components = [n for n in parts if n.startswith("c-")]
    assert components, sorted(parts)

    def buggy_read(self: PartArrays, part: str, name: str, selection: tuple[slice, ...]) -> object:
        raise KeyError(name)

    monkeypatch.setattr(PartArrays, "read", buggy_read)
    unchecked: list[str] = []
    assert _unreadable_component_parts(store, parts, unchecked) == {}
    assert unchecked == [
        f"component part {n}: could not be checked (KeyError: 'atoms')" for n in sorted(components)
    ]
