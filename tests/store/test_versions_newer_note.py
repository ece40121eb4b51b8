"""The version line of info / verify / serve / FeatureDataset for a store holding data of a newer
featurizer than this code's: it advised "rebuild those of 0.8.0 with `featurecache build`", i.e.
taking them back to this code's older featurizer (review RF1 s27 #2). Now: upgrade. Older data
keep the rebuild advice. (``version_notes`` formats the counts ``store_versions`` reads from real
parts; the counts here are the shape that function returns.)"""

from __future__ import annotations

from featurecache.const import FEATURIZER_VERSION
from featurecache.store.versions import version_notes


def _bump(version: str, by: int) -> str:
    major, minor, patch = (int(x) for x in version.split("."))
    return f"{major}.{minor + by}.{patch}"


def test_newer_data_get_upgrade_advice_and_older_data_the_rebuild() -> None:
    newer, older = _bump(FEATURIZER_VERSION, 1), "0.0.1"
    (line,) = version_notes({"entries": {FEATURIZER_VERSION: 3, newer: 1}, "msas": {}}, "S")
    assert f"those of {newer} were built by a newer featurecache: upgrade featurecache" in line, line
    assert "rebuild those of" not in line, line
    (line,) = version_notes({"entries": {older: 2, FEATURIZER_VERSION: 3, newer: 1}, "msas": {}}, "S")
    assert f"rebuild those of {older} with `featurecache build`" in line, line
    assert (
        f"rebuild those of {older}, {newer}" not in line and f"those of {newer} were built by a newer" in line
    )
    (line,) = version_notes({"entries": {newer: 4}, "msas": {}}, "URL", code="the service's featurecache")
    assert "upgrade the service's featurecache to be sure to read and verify them (it may not read" in line, (
        line
    )
    # not a claim that they were not verified (review R26b s44 #9: verify had verified them)
    assert "names those it could not verify" in line and "not verified" not in line, line
