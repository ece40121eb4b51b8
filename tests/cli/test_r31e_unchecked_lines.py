"""``featurecache verify`` prints a row whose check an error stopped that does not say its data is
unreadable (a bug in the reader: ``could not be checked (KeyError: …)``) as an ``UNCHECKED`` line,
and ``--repair`` says it keeps such rows and why (F31d-A's left item of review R31d s47 #1).

Before, they were ``MISMATCH`` lines like damage, and a repair that kept them ended with "nothing
--repair can fix: the N MISMATCH lines above", while its help said nothing of them. The exit
status is still 4: the store was not verified.

A real build (1 worker, one input per structure part) of the repo's sample 1psm and 2q2k with their
real OpenFold MSAs and the sample CCD; the bug is a monkeypatched reader method; real CLI runs (the
click app in this process: :func:`tests.conftest.cli_in_process`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

import featurecache
from featurecache.cli import app
from featurecache.store.msa import MSAReader
from tests.conftest import cli_in_process, store_snapshot

BUG = "could not be checked (ValueError: slice step cannot be zero)"


@pytest.fixture
def store(two_entry_copy: Path) -> Path:
    return two_entry_copy


def _keys(store: Path) -> list[str]:
    return sorted(featurecache.open_store(store).msas.column("key").to_pylist())


def _bad_slice(self: MSAReader, key: str, rows: object = None, cols: object = None) -> object:
    raise ValueError("slice step cannot be zero")  # a bug: what numpy says of a selection built wrong


def test_verify_prints_unchecked_lines_and_says_repair_keeps_them(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = _keys(store)
    monkeypatch.setattr(MSAReader, "msa", _bad_slice)
    run = cli_in_process("verify", str(store), "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr
    assert run.stdout.splitlines() == [f"UNCHECKED MSA {k}: {BUG}" for k in keys]
    assert (
        f"`featurecache verify --repair` keeps the {len(keys)} UNCHECKED lines above: their check stopped on an "
        "error that does not say the data is unreadable (a bug in featurecache's reader, not damage), so there "
        "is nothing to rebuild" in run.stderr
    ), run.stderr
    assert "to repair:" not in run.stderr  # no damage: no repair to advise


def test_a_repair_that_keeps_them_says_so_and_why(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = _keys(store)
    before = store_snapshot(store)
    monkeypatch.setattr(MSAReader, "msa", _bad_slice)
    run = cli_in_process("verify", str(store), "--repair", "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr  # not verified
    lines = run.stdout.splitlines()
    assert lines[:-1] == [f"UNCHECKED MSA {k}: {BUG}" for k in keys], run.stdout
    assert lines[-1].startswith(f"nothing to repair: --repair keeps the {len(keys)} UNCHECKED lines above: their "
                                "check stopped on an error that does not say the data is unreadable"), lines[-1]  # fmt: skip
    assert "MISMATCH" not in run.stdout and "nothing --repair can fix" not in run.stdout
    monkeypatch.undo()
    assert store_snapshot(store) == before


def test_damage_is_a_mismatch_the_repair_fixes_and_unchecked_rows_are_kept(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated shard of 2q2k's atoms (damage) beside the MSAs the bug stops: the first is a
    MISMATCH the repair takes out, the others UNCHECKED lines it keeps, printed again after its
    write with the reason in its closing line."""
    s = featurecache.open_store(store)
    part = str(s.entries.column("part")[s.row_of("2q2k")].as_py())
    (shard,) = [
        f for f in (store / "parts" / part / "atoms").rglob("*") if f.is_file() and f.name != "zarr.json"
    ]
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size // 2)
    keys = _keys(store)
    monkeypatch.setattr(MSAReader, "msa", _bad_slice)

    plain = cli_in_process("verify", str(store), "--no-progress")
    assert plain.returncode == 4
    assert any(line.startswith("MISMATCH entry 2q2k: ") for line in plain.stdout.splitlines()), plain.stdout
    assert sum(line.startswith("UNCHECKED MSA ") for line in plain.stdout.splitlines()) == len(keys), (
        plain.stdout
    )
    assert "to repair: `featurecache verify" in plain.stderr

    run = cli_in_process("verify", str(store), "--repair", "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr
    assert "removed from the index: 2q2k" in run.stdout, run.stdout
    kept = _keys(store)  # 1psm's MSA: still listed, still not checked
    assert len(kept) == 1
    assert f"UNCHECKED MSA {kept[0]}: {BUG}" in run.stdout.splitlines(), run.stdout
    assert "MISMATCH" not in run.stdout, run.stdout
    (closing,) = [line for line in run.stdout.splitlines() if line.startswith("repaired: now run `")]
    assert closing.endswith("; --repair keeps the 1 UNCHECKED line above: its check stopped on an error that "
                            "does not say the data is unreadable (a bug in featurecache's reader, not damage), "
                            "so there is nothing to rebuild; verify again with a featurecache that reads it"), closing  # fmt: skip
    assert "could not fix" not in closing


def test_the_repair_option_help_says_such_rows_are_kept() -> None:
    verify = typer.main.get_command(app).commands["verify"]  # type: ignore[attr-defined]
    (repair,) = [p for p in verify.params if p.name == "repair"]
    assert "UNCHECKED" in repair.help and "not damage) is kept" in repair.help, repair.help
    assert "an 'UNCHECKED ... could not be checked (KeyError: ...)' line" in verify.help, verify.help
