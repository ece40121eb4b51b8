"""``featurecache plan`` on a store whose first build has not finished warns (stderr, one line
naming the store), as ``info`` does: its index lists only what was written so far, so the
plan's counts are partial and, with entries, MSAs or conformers still to come, its peaks may be low. The exit status and the plan itself are unchanged."""

from __future__ import annotations

from pathlib import Path

from tests.store.test_verify_unfinished import WARNING, cli, unfinished_copy


def test_plan_warns_on_an_unfinished_first_build(sample_store: Path, tmp_path: Path) -> None:
    store = unfinished_copy(sample_store, tmp_path / "store")
    run = cli("plan", str(store), "--no-write-index")
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "memory plan" in run.stdout, run.stdout[-2000:]
    said = " ".join(run.stderr.split())
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, run.stderr[-2000:]
    assert f"warning: {store}: {WARNING}" in said and "partial" in said, run.stderr[-2000:]
    # not only entries: MSAs and conformers written later are missing too, and the peaks may be low
    assert "entries, MSAs or conformers written later are missing" in said, run.stderr[-2000:]
    assert "memory predictions may be low" in said, run.stderr[-2000:]

    written = cli("plan", str(store))  # also when it writes index/plan.arrow
    assert written.returncode == 0 and (store / "index" / "plan.arrow").is_file(), written.stderr[-2000:]
    assert f"warning: {store}: {WARNING}" in " ".join(written.stderr.split()), written.stderr[-2000:]

    finished = cli("plan", str(sample_store), "--no-write-index")
    assert finished.returncode == 0 and "warning" not in finished.stderr, finished.stderr[-2000:]
