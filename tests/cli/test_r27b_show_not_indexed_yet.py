"""``show`` of an id that the index does not list yet says why it may not (review R27b s45 #7):
during a store's first build, or when parts were written after the index was last rebuilt, it
answered only "no entry 'x' in store S" (exit 2), while ``info`` warned that the index was partial
and ``FeatureDataset`` raised UnfinishedBuildError. Now its error carries the same lines as
``info``'s warnings (``store.info.index_lag``); on an up-to-date store it is as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from featurecache.store.index import rebuild_index
from tests.conftest import cli_in_process

NO_ENTRY = "no entry 'c00000_1lzh'"


def test_show_on_an_unfinished_first_build_says_the_index_is_partial(
    sample_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    rebuild_index(store, finished=False)  # as the build publishes it until its first run ends
    run = cli_in_process("show", str(store), "c00000_1lzh")
    assert run.returncode == 2, run.stderr
    said = " ".join(run.stderr.split())
    assert NO_ENTRY in said and "(its first build has not finished: the index lists the 6 entries written so far" in said, said  # fmt: skip
    assert "run the same `featurecache build` again to finish it" in said, said


def test_show_on_a_stale_index_names_the_entries_it_does_not_list(sample_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    # the index's record of the parts it took in, without one structure part: as after a build that
    # committed that part and was stopped before it rebuilt the index
    manifest_file = store / "index" / ".part-rows" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    last = max(p for p in manifest["parts"] if p.startswith("s-"))
    manifest["parts"].remove(last)
    manifest_file.write_text(json.dumps(manifest))
    run = cli_in_process("show", str(store), "c00000_1lzh")
    assert run.returncode == 2, run.stderr
    said = " ".join(run.stderr.split())
    assert (
        NO_ENTRY in said and "written after the index was last rebuilt" in said and "stale index" in said
    ), said


def test_show_on_an_up_to_date_store_is_as_before(sample_store: Path) -> None:
    run = cli_in_process("show", str(sample_store), "c00000_1lzh")
    assert run.returncode == 2 and NO_ENTRY in run.stderr, run.stderr
    assert "(" not in run.stderr.split(NO_ENTRY, 1)[1], run.stderr
