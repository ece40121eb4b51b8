"""A table in a part's own ``_index/`` that this featurecache does not know (a table a newer
featurecache of the same store format adds, as msa_unmatched was added after format 2; a stray
copy) is left out of the index with one warning naming the file (review R29a s46 #1). Every index
rebuild read every ``_index/*.arrow`` and a guard in ``index._write_index`` raised ValueError for
the unknown name: build, ``prune --sources-gone`` and ``verify --repair`` stopped with a traceback
(exit 1). That guard's purpose, no table written that ``layout.INDEX_FILES`` does not list, is
checked here instead, over a real build.

Real builds (1 worker, one input per structure part) of the repo's samples; real CLI runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.store import index
from featurecache.store.index import complete_parts, index_tables
from featurecache.store.layout import INDEX_FILES
from tests.clusters import scheduler_args
from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process

IDS = ("1psm", "2q2k")
FUTURE = "zz_future"


#: wide enough that no log line is wrapped (the warning names a long path)
WIDE = {"COLUMNS": "1000", "NO_COLOR": "1"}


def _cli(*args: str | Path) -> CliRun:
    return cli_in_process(*map(str, args), env=dict(WIDE))


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(store, pdb, the unknown table): 1psm and 2q2k built one part each; the first structure
    part holds ``_index/zz_future.arrow``, a copy of its chains.arrow."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
    out = tmp_path / "store"
    assert build_store(out, pdb, workers=1, part_size=1).n_failed == 0
    own = out / "parts" / "s-000000" / "_index"
    future = own / f"{FUTURE}.arrow"
    shutil.copy(own / "chains.arrow", future)
    return out, pdb, future


def _finished(r: CliRun, future: Path, warned: int = 1) -> None:
    """Exit 0, no traceback, and ``warned`` warnings naming the unknown table's file (one: the run
    rebuilt the index)."""
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    assert "Traceback" not in log and "ValueError" not in log, log
    assert log.count(f"{future} is not a part table this featurecache knows") == warned, log


def test_build_prune_and_repair_leave_an_unknown_part_table_out(
    store: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, pdb, future = store
    kept = root / "index" / ".part-rows"

    def every_part() -> None:
        """Without the index's kept rows (a store copied without its hidden files) a rebuild reads
        every part's own tables, the unknown one among them; with them, the new parts' only."""
        shutil.rmtree(kept)
        # in-process runs share this module's record of what it warned about: each starts with
        # none, as a process does
        monkeypatch.setattr(index, "_unknown_warned", set(), raising=False)

    def build() -> CliRun:
        """The build on the session's cluster by the CLI in this process (a Python start saved
        each), which starts, as a process does, with no record of what was warned about."""
        monkeypatch.setattr(index, "_unknown_warned", set(), raising=False)
        return _cli(
            "build", "--pdb-dir", pdb, "--out", root, *scheduler_args(1), "--part-size", "1", "--no-progress"
        )

    every_part()
    _finished(build(), future)  # nothing to build
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    _finished(build(), future, warned=0)  # an extension: the new part's tables only
    every_part()
    shutil.copy(SAMPLES / "structures" / "1A8O.pdb", pdb)
    _finished(build(), future)  # an extension
    (pdb / "2q2k.cif").unlink()
    every_part()
    _finished(_cli("prune", root, "--sources-gone", pdb), future)
    # verify --repair rewrites the index from every part when it differs from them: a missing file
    (root / "index" / "timings.arrow").unlink()
    every_part()
    _finished(_cli("verify", root, "--repair", "--no-progress"), future)
    r = _cli("verify", root, "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr

    assert future.is_file()  # not the index's to delete: it is the part's
    assert not (root / "index" / f"{FUTURE}.arrow").exists()
    written = {f.stem for f in (root / "index").glob("*.arrow")}
    assert "timings" in written and written <= INDEX_FILES
    assert featurecache.open_store(root).ids == ["102m", "1A8O", "1psm"]


def test_every_table_the_code_writes_is_in_index_files(sample_store: Path) -> None:
    """What ``_write_index`` refused at run time: a table the rebuild derives that
    ``layout.INDEX_FILES`` does not list (readers would leave its file out, and a build would not
    replace it). Over the sample store (structures, MSAs, components): every table the rebuild
    gives, rows or not, every file in ``index/``, and every part table the writers wrote."""
    derived = index_tables(sample_store, complete_parts(sample_store))
    assert sorted(set(derived) - INDEX_FILES) == []
    assert sorted({f.stem for f in (sample_store / "index").glob("*.arrow")} - INDEX_FILES) == []
    part_tables = {f.stem for f in (sample_store / "parts").glob("*/_index/*.arrow")}
    assert sorted(part_tables - index.PART_TABLES) == []
    assert {"entries", "chains", "msas", "components", index.RESIDUE_CODES} <= part_tables
