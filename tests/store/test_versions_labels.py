"""What the featurizer-version counts leave out (review RF2 s24 #2, #4, #6).

- A single-sequence MSA (no file joined: the query row alone) is never rebuilt by a later build
  (``msa_stage._plan`` keeps a stored MSA rather than write the single sequence again), so after a
  complete rebuild by this code it still carries the label of the featurecache that first wrote it.
  Its arrays do not depend on the featurizer version (checked here: equal content hash to the same
  sequence's single-sequence MSA written by this code), so it is counted apart
  (``msas_single_sequence``), not as a version: before, a store fully rebuilt by 0.6.0 warned for
  good that it "mixes featurizer versions, whose features differ".
- An entry whose part's ``part.json`` does not read is damage (``verify``), not a featurizer
  version "unknown" that "mixes featurizer versions" with rebuild advice that rebuilds nothing.
- ``/v1/info`` drops ``featurizer_versions.entry_source_dirs``, the server's directories, as it
  drops ``path`` (the counts stay).

The older store is real: built by the package of b974d7d (featurizer 0.5.0, tests/store/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from featurecache.const import FEATURIZER_VERSION
from tests.conftest import build_store, build_with_package, featurecache_at
from tests.store.conftest import OLD_COMMIT, OLD_VERSION, Stores


def test_a_store_rebuilt_by_this_code_is_quiet_though_its_single_sequence_msas_keep_the_old_label(
    version_stores: Stores, tmp_path: Path
) -> None:
    from featurecache import open_store
    from featurecache.store.info import print_info
    from featurecache.store.versions import store_versions, version_notes

    both = tmp_path / "both"  # 102m (its MSA from a file) and 209d (two DNA chains: single-sequence MSAs)
    both.mkdir()
    for d in (version_stores.a, version_stores.b):
        for f in d.iterdir():
            shutil.copy(f, both)
    store = tmp_path / "store"
    done = build_with_package(
        featurecache_at(OLD_COMMIT, tmp_path / "pkg"), both, store, msa_dir=version_stores.msa
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = build_store(store, both, msa_dir=version_stores.msa, workers=1)  # this code, the same inputs
    assert summary.n_failed == 0 and summary.n_built == 2

    reader = open_store(store)
    rows = reader.msas.select(["key", "n_files", "featurizer_version", "content_hash"]).to_pylist()
    # the premise: the file-backed MSA was rebuilt; the single-sequence ones kept the old label
    assert sorted((r["n_files"] > 0, r["featurizer_version"]) for r in rows) == [
        (False, OLD_VERSION), (False, OLD_VERSION), (True, FEATURIZER_VERSION)
    ]  # fmt: skip
    # ... and their arrays are those this code writes for the same sequences (209d of the extension)
    mine = {r["key"]: r["content_hash"] for r in open_store(version_stores.mixed).msas.to_pylist()}
    singles = [r for r in rows if r["n_files"] == 0]
    assert all(mine[r["key"]] == r["content_hash"] for r in singles), (singles, mine)

    doc = store_versions(reader)
    assert doc["entries"] == {FEATURIZER_VERSION: 2}
    assert doc["msas"] == {FEATURIZER_VERSION: 1}
    assert doc["msas_single_sequence"] == 2
    assert doc["entries_unreadable"] == 0
    assert version_notes(doc, str(store)) == []
    assert [line for line in print_info(store) if "featurizer" in line] == []  # info's stderr lines
    reader.close()


def test_an_unreadable_part_record_is_damage_not_a_featurizer_version(
    sample_store: Path, tmp_path: Path
) -> None:
    from featurecache import open_store
    from featurecache.build.discover import resolved
    from featurecache.store.versions import extension_notes, store_versions, version_notes

    store = tmp_path / "damaged"
    shutil.copytree(sample_store, store)
    reader = open_store(store)
    parts = reader.entries.column("part").to_pylist()
    part = sorted(set(parts))[0]
    n = parts.count(part)
    (store / "parts" / part / "_index" / "part.json").write_text('{"featurizer_ver')  # truncated
    doc = store_versions(reader)
    assert doc["entries_unreadable"] == n
    assert doc["entries"] == ({FEATURIZER_VERSION: len(parts) - n} if len(parts) > n else {})
    lines = version_notes(doc, str(store))
    assert lines == [
        f"{store}: {n} entr{'y' if n == 1 else 'ies'} whose part record cannot be read (featurizer version "
        "unknown): see `featurecache verify`"
    ]
    text = subprocess.run([sys.executable, "-m", "featurecache.cli", "info", str(store)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "mixes featurizer versions" not in text.stderr, text.stderr
    shown = [line for line in text.stdout.splitlines() if "featurizer of" in line]
    assert len(shown) == 2 and not any("unknown" in line for line in shown), text.stdout
    assert f"warning: {lines[0]}" in text.stderr.splitlines(), text.stderr
    # a build that extends the store from another --pdb-dir does not call them another featurizer's
    assert extension_notes(store, reader.entries, resolved(tmp_path)) == []
    reader.close()


def test_v1_info_does_not_tell_the_servers_directories(version_stores: Stores, tmp_path: Path) -> None:
    from tests.store.test_versions_served import _serving

    with _serving(version_stores.mixed, tmp_path / "serve.log") as url:
        doc = httpx.get(url + "/v1/info", timeout=30).json()
    versions = doc["featurizer_versions"]
    assert "entry_source_dirs" not in versions, versions
    assert versions["entries"] == {OLD_VERSION: 1, FEATURIZER_VERSION: 1}  # the counts stay
    assert str(version_stores.a) not in str(versions) and str(version_stores.b) not in str(versions), versions
