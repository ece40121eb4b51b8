"""A store holding entries of another featurizer version than this code's, or of several, says so
(review R3 s24 #3, #6): ``build`` extending it (one line), ``info`` (text and --json: per-version
counts from the parts), ``verify`` (a note, exit status unchanged), ``FeatureDataset`` (one
warning) and ``train`` (the versions in its JSON log). Before, each build overwrote the root's
``featurizer_version`` with its own and nothing else read the parts' record of it.

The older store is real (tests/store/conftest.py: built by the package of b974d7d, featurizer
0.5.0), then extended by this code from another ``--pdb-dir``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.const import FEATURIZER_VERSION
from tests.store.conftest import OLD_VERSION, Stores


def test_the_parts_record_two_versions(version_stores: Stores) -> None:
    """The premise, read without featurecache's help: the parts' own part.json."""
    versions = {
        p.parent.parent.name: json.loads(p.read_text())["featurizer_version"]
        for p in (version_stores.mixed / "parts").glob("s-*/_index/part.json")
    }
    assert sorted(versions.values()) == sorted([OLD_VERSION, FEATURIZER_VERSION]), versions


def test_an_extension_build_says_it_mixes_versions(version_stores: Stores) -> None:
    lines = [r.getMessage() for r in version_stores.extension_log if r.levelno == logging.WARNING]
    mine = [line for line in lines if "featurizer" in line]
    assert len(mine) == 1, lines
    line = mine[0]
    assert line.startswith(f"adding featurizer {FEATURIZER_VERSION} entries to {version_stores.mixed}, which holds 1 entry "
                           f"of featurizer {OLD_VERSION} from {version_stores.a}:"), line  # fmt: skip
    assert f"`featurecache build --pdb-dir {version_stores.a} --out {version_stores.mixed}`" in line, line
    assert "\n" not in line


def test_info_and_verify_name_the_versions(version_stores: Stores) -> None:
    from featurecache import open_store
    from featurecache.store.verify import verify_report

    doc = open_store(version_stores.mixed).info()  # info --json's document (and /v1/info's)
    assert doc["versions"]["featurizer_version"] == FEATURIZER_VERSION  # the root: the latest build's
    # 102m: 1 entry, 1 MSA (chain A, from its file); 209d: 1 entry, its two DNA chains' single-sequence
    # MSAs (written by the extension)
    assert doc["featurizer_versions"] == {
        "this_code": FEATURIZER_VERSION,
        "entries": {OLD_VERSION: 1, FEATURIZER_VERSION: 1},
        "msas": {OLD_VERSION: 1},  # from files; the single-sequence ones apart (not a version)
        "msas_single_sequence": 2,
        "entries_unreadable": 0,
        "entry_source_dirs": {
            OLD_VERSION: [str(version_stores.a)],
            FEATURIZER_VERSION: [str(version_stores.b)],
        },
    }

    text = subprocess.run([sys.executable, "-m", "featurecache.cli", "info", str(version_stores.mixed)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert text.returncode == 0
    assert f"1 of {OLD_VERSION}, 1 of {FEATURIZER_VERSION}" in " ".join(text.stdout.split()), text.stdout
    warned = [line for line in text.stderr.splitlines() if "featurizer" in line]
    assert len(warned) == 1, text.stderr
    assert warned[0].startswith(f"warning: {version_stores.mixed} mixes featurizer versions"), warned
    # the build with the options the store records: 102m's MSA is of --msa-dir msa (review R41d s51 #1)
    assert (
        f"--pdb-dir {version_stores.a} --msa-dir {version_stores.msa} --out {version_stores.mixed}`"
        in warned[0]
    )

    report = verify_report(version_stores.mixed)  # `verify` prints its notes as "note: ..." on stderr, exit 0
    assert report.problems == []
    notes = [line for line in report.notes if "featurizer" in line]
    assert len(notes) == 1 and notes[0] == warned[0].removeprefix("warning: "), report.notes


def test_info_of_an_older_store_says_this_code_builds_another_version(version_stores: Stores) -> None:
    from featurecache.store.info import print_info

    warned = [
        line for line in print_info(version_stores.old) if "featurizer" in line
    ]  # the CLI's stderr lines
    # 102m: one protein chain (its ligands have no MSA)
    assert warned == [
        f"{version_stores.old} holds 1 entry and 1 MSA of featurizer {OLD_VERSION}; "
        f"this featurecache builds featurizer {FEATURIZER_VERSION}: rebuild those of {OLD_VERSION} with "
        f"`featurecache build --pdb-dir {version_stores.a} --out {version_stores.old}` (with the --msa-dir, --ccd and options "
        "of their build)"
    ]


def test_a_store_of_this_version_is_quiet(sample_store: Path) -> None:
    from featurecache import open_store
    from featurecache.store.versions import store_versions, version_notes

    doc = store_versions(open_store(sample_store))
    assert set(doc["entries"]) == {FEATURIZER_VERSION} and set(doc["msas"]) == {FEATURIZER_VERSION}
    assert version_notes(doc, str(sample_store)) == []


def test_feature_dataset_warns_once_and_train_logs_the_versions(
    version_stores: Stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from featurecache.client import FeatureDataset
    from featurecache.model.train import run_training
    from tests.model.test_trunk import TINY

    with caplog.at_level(logging.WARNING):
        ds = FeatureDataset(str(version_stores.mixed), crop_size=16, workers=1)
    ds.close()
    warned = [r.getMessage() for r in caplog.records if "featurizer" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"{version_stores.mixed} mixes featurizer versions"), (
        warned
    )
    assert ds.featurizer_versions is not None
    assert ds.featurizer_versions["entries"] == {OLD_VERSION: 1, FEATURIZER_VERSION: 1}

    log = tmp_path / "train.json"
    run_training(
        version_stores.mixed, None, steps=1, log_path=log, crop_size=16, device="cpu", config=TINY, workers=1
    )
    recorded = json.loads(log.read_text())["featurizer_versions"]
    assert recorded["entries"] == {OLD_VERSION: 1, FEATURIZER_VERSION: 1}
    assert recorded["this_code"] == FEATURIZER_VERSION
