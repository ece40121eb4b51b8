"""What a command reports as its result goes to stdout, log lines, progress and warnings to stderr
(README, "Commands"): ``featurecache verify STORE > report.txt`` must keep every MISMATCH line.

Real ``featurecache`` processes over real copies of the sample store (tests/conftest.py), damaged
the way tests/store/test_verify_msa_mismatch.py and test_damaged_parts.py damage them: an MSA array
rewritten through zarr (a content-hash mismatch) and a structure part's own index removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache import open_store
from tests.store.test_damaged_parts import _cli, _copy
from tests.store.test_verify_msa_mismatch import _bump_residue_row, _msas


def test_verify_prints_its_mismatches_on_stdout(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    msa = _msas(store)[0]
    _bump_residue_row(store, str(msa["part"]), str(msa["array"]), 1)
    part = next(p for p in sorted((store / "parts").iterdir()) if p.name.startswith("s-"))
    (part / "_index" / "part.json").unlink()

    run = _cli("verify", "--no-progress", str(store))
    assert run.returncode == 4, (run.returncode, run.stderr[-2000:])
    out = run.stdout.splitlines()
    mismatches = [line for line in out if line.startswith("MISMATCH ")]
    # the two things the test damaged, each named on stdout
    assert any(line.startswith(f"MISMATCH MSA {msa['key']}: content hash ") for line in mismatches), out
    assert any(part.name in line for line in mismatches), out
    assert mismatches == out, out  # stdout holds the result only
    assert "MISMATCH" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]


def test_verify_of_a_sound_store_says_ok_on_stdout(sample_store: Path) -> None:
    run = _cli("verify", "--no-progress", str(sample_store))
    assert run.returncode == 0 and run.stdout == "ok: store verified\n", (run.stdout, run.stderr[-2000:])
    assert "MISMATCH" not in run.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["info", "{store}"], "entries"),
        (["info", "--json", "{store}"], '"entries"'),
        (["show", "{store}", "{entry}"], "content_hash"),
        (["prune", "--dry-run", "{store}"], "would remove"),
        (["plan", "--no-write-index", "{store}"], "memory plan"),
        (["report", "{store}", "--out", "{tmp}/report"], "report written"),
    ],
)
def test_results_go_to_stdout_and_nothing_to_stderr(
    sample_store: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    """On a sound, finished store these commands have no warning to give: all they print is their
    result, on stdout."""
    entry = open_store(sample_store).ids[0]
    argv = [a.format(store=sample_store, entry=entry, tmp=tmp_path) for a in args]
    run = _cli(*argv)
    assert run.returncode == 0, (argv, run.stderr[-2000:])
    assert says in run.stdout, (argv, run.stdout[-2000:])
    assert run.stderr == "", (argv, run.stderr[-2000:])
