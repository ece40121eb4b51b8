"""Every part's ``part.json`` says which code wrote it: ``featurecache_version`` and
``featurecache_source`` (review R28a s46 #5: nothing a build left said which featurecache built the
store; ``--version``'s source digest tells two builds of one version apart).

The sample store, built by this code (structure, MSA and component parts).
"""

from __future__ import annotations

import json
from pathlib import Path

import featurecache


def test_each_part_records_the_version_and_source_digest_of_its_code(sample_store: Path) -> None:
    manifests = {
        p.parents[1].name: json.loads(p.read_text()) for p in sample_store.glob("parts/*/_index/part.json")
    }
    assert {name[:2] for name in manifests} == {"s-", "m-", "c-"}, sorted(manifests)
    want = {
        "featurecache_version": featurecache.__version__,
        "featurecache_source": featurecache.source_digest(),
    }
    for name, doc in manifests.items():
        assert {k: doc.get(k) for k in want} == want, name
