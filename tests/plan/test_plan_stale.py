"""A plan older than the store's index makes ``fitting_ids`` warn (before it warned only about a plan
of an unfinished first build, and silently left out every entry added since), and ``featurecache
report`` on a store whose first build has not finished warns about the store itself, not only its
plan (a line on stderr, a note on the page, summary.json).

Real builds (1 worker) of the repo's sample structures and OpenFold MSAs, the real planner, real
``featurecache report`` runs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.plan import fitting_ids, plan_store
from featurecache.store.index import rebuild_index
from featurecache.store.prune import prune_store
from tests.conftest import SAMPLES, build_store
from tests.store.test_verify_unfinished import WARNING, cli, unfinished_copy

OLDER = "is older than the store's index"


def _warned(caplog: pytest.LogCaptureFixture, store: Path) -> list[str]:
    caplog.clear()
    fitting_ids(store, 384)
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_fitting_ids_warns_of_a_plan_older_than_the_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="featurecache")
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = tmp_path / "s"
    build_store(store, pdb, workers=1)
    plan_store(store)
    assert _warned(caplog, store) == []
    assert sorted(fitting_ids(store, 384)) == ["1psm", "2q2k"]

    # an entry added since: not in the plan, so not among the fitting ids; said so
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    build_store(store, pdb, workers=1)
    (said,) = _warned(caplog, store)
    assert f"the plan of {store} {OLDER}" in said, said
    assert "1 of the store's 3 entries has no plan row (102m): left out" in said, said
    assert "run `featurecache plan STORE` again" in said, said
    assert "102m" not in fitting_ids(store, 384)
    # the same through an open reader
    caplog.clear()
    fitting_ids(featurecache.open_store(store), 384)
    assert any(OLDER in r.getMessage() for r in caplog.records)
    plan_store(store)
    assert _warned(caplog, store) == []

    # 1psm's chain A gets an MSA from files (deeper than the single sequence planned for)
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(SAMPLES / "msas" / "openfold" / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1psm_A")
    build_store(store, pdb, workers=1, msa_dir=msa)
    depth = max(
        r["msa_depth"] for r in featurecache.open_store(store).chains.to_pylist() if r["entry_id"] == "1psm"
    )
    assert depth > 1
    (said,) = _warned(caplog, store)
    assert OLDER in said and "1 entry changed since (token count or MSA rows: 1psm)" in said, said
    assert "no plan row" not in said, said
    plan_store(store)
    assert _warned(caplog, store) == []

    # an entry removed since (its file gone, prune --sources-gone)
    (pdb / "2q2k.cif").unlink()
    assert prune_store(store, sources_gone=pdb).entries == ["2q2k"]
    (said,) = _warned(caplog, store)
    assert OLDER in said and "1 entry planned is no longer in the store (2q2k)" in said, said


def test_report_warns_about_an_unfinished_store(sample_store: Path, tmp_path: Path) -> None:
    store = unfinished_copy(sample_store, tmp_path / "store")
    n = len(featurecache.open_store(store).ids)
    run = cli("report", str(store), "--out", str(tmp_path / "r1"))
    assert run.returncode == 0 and "report written" in run.stdout, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("warning: ")]
    assert len(lines) == 1, run.stderr[-2000:]  # no plan: the store's line alone
    assert f"warning: {store}: {WARNING}" in lines[0] and "report covers only part" in lines[0], lines
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    said = f"index lists only the {n} entries written so far"
    assert said in summary["first_build_unfinished"], summary.get("first_build_unfinished")
    html = (tmp_path / "r1" / "index.html").read_text()
    assert "<b>Partial:</b>" in html and said in html

    rebuild_index(store, finished=True)  # the build finishes: nothing to warn about
    done = cli("report", str(store), "--out", str(tmp_path / "r2"))
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    summary = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert "first_build_unfinished" not in summary
    assert "Partial:" not in (tmp_path / "r2" / "index.html").read_text()
