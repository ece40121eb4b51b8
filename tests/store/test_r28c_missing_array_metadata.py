"""A part whose ``bonds`` or ``interfaces`` array metadata (``zarr.json``) is gone is damage that
``featurecache verify`` names and ``verify --repair`` + a build repair (review R28c s46 #1). An
entry with no rows of that array reads none of its data, only its metadata (the fields its part
stores); that read sat outside verify's per-entry guard, so verify and verify --repair ended with
exit 3 and reported nothing, and the next build found every entry up to date.

Real builds (1 worker, one input per structure part) of the repo's sample 1psm (one chain: no
bonds, no interfaces) and 2q2k; real CLI runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import featurecache
from tests.conftest import CliRun, build_store, cli_in_process
from tests.store.conftest import SAMPLE_PAIR

IDS = SAMPLE_PAIR


def _cli(*args: str | Path) -> CliRun:
    return cli_in_process(*map(str, args))


@pytest.fixture
def built(sample_pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """(store, pdb): 1psm and 2q2k built one part each (tests/store/conftest.py)."""
    return sample_pair


@pytest.mark.parametrize("array", ["bonds", "interfaces"])
def test_verify_names_and_repair_restores_a_part_without_array_metadata(
    built: tuple[Path, Path], array: str
) -> None:
    store, pdb = built
    s = featurecache.open_store(store)
    assert s.row_count("1psm", array) == 0  # the premise: the entry reads only the array's metadata
    part = str(s.entries.column("part")[s.row_of("1psm")].as_py())
    (store / "parts" / part / array / "zarr.json").unlink()

    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    assert f"MISMATCH part {part}: array {array} unreadable" in bad.stdout, bad.stdout
    assert "MISMATCH entry 1psm: unreadable" in bad.stdout and f"{part}/{array}" in bad.stdout, bad.stdout
    assert "2q2k" not in bad.stdout
    assert f"`featurecache verify {store} --repair`" in bad.stderr, bad.stderr

    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "removed from the index: 1psm" in rep.stdout, rep.stdout
    again = build_store(store, pdb, workers=1, part_size=1)
    assert again.n_failed == 0 and again.n_built == 1  # exactly the damaged entry
    ok = _cli("verify", store, "--no-progress")
    assert ok.returncode == 0 and "ok: store verified" in ok.stdout, ok.stdout + ok.stderr
    assert sorted(featurecache.open_store(store).ids) == list(IDS)
