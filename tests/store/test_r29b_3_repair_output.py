"""``featurecache verify --repair`` that only rewrote the index says so (review R29b s46 #3). It
printed "nothing --repair can fix: the 1 MISMATCH line above" on stdout (exit 0) after it had
rewritten the index and printed no MISMATCH line: the count was of the problems verify found
before the repair, and an index-only rewrite fell into that branch.

Real build of the repo's samples 1psm and 2q2k, ``index/timings.arrow`` removed; real CLI runs."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process


def _cli(*args: str | Path) -> CliRun:
    return cli_in_process(*map(str, args))


def test_a_repair_that_rewrote_the_index_says_what_it_did(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for entry in ("1psm", "2q2k"):
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    (store / "index" / "timings.arrow").unlink()
    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4 and "MISMATCH index/timings.arrow" in bad.stdout, bad.stdout + bad.stderr

    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "repaired: rewrote index/timings.arrow from the parts' own index" in rep.stdout, rep.stdout
    assert "nothing --repair can fix" not in rep.stdout and "MISMATCH" not in rep.stdout, rep.stdout
    assert (store / "index" / "timings.arrow").is_file()
    ok = _cli("verify", store, "--no-progress")
    assert ok.returncode == 0 and "ok: store verified" in ok.stdout, ok.stdout + ok.stderr
