"""Review R26b s44 #9: the mixed-version line said the entries of a newer featurizer had to be
upgraded for to be verified ("upgrade featurecache to read and verify them") while ``verify`` had
verified every one of them and said ``ok``. The line now says only what is true: this featurecache
may not read every one, verify names those it could not."""

from __future__ import annotations

from featurecache.const import FEATURIZER_VERSION
from featurecache.store.versions import version_notes


def test_the_newer_data_note_does_not_claim_they_were_not_verified() -> None:
    major, minor, patch = (int(x) for x in FEATURIZER_VERSION.split("."))
    newer = f"{major}.{minor + 1}.{patch}"
    (line,) = version_notes({"entries": {FEATURIZER_VERSION: 8, newer: 3}, "msas": {}}, "S")
    assert "upgrade featurecache to read and verify them" not in line, line
    assert f"those of {newer} were built by a newer featurecache: upgrade featurecache to be sure" in line, (
        line
    )
    assert (
        "this one may not read every one of them: `featurecache verify` names those it could not verify"
        in line
    )
    assert f"refuses to rebuild them as featurizer {FEATURIZER_VERSION} without --allow-downgrade" in line, (
        line
    )
