"""An MSA selection that cannot be served says which MSA and what is wrong with it (review R12 s39
L3): an index past the MSA's rows named no MSA (a batch job asking many could not tell which), and
``rows=5:2`` was said to be "outside 0:N" though both ends are inside."""

from __future__ import annotations

import httpx
import pytest

from featurecache.errors import InvalidRequest
from featurecache.store.reader import LocalStore


def test_an_index_past_the_rows_names_the_msa(reference: LocalStore, lookup_url: str) -> None:
    key = reference.msas.column("key")[0].as_py()
    depth = reference.msa(key).residues.shape[0]
    with pytest.raises(InvalidRequest, match=rf"MSA {key}: rows index out of range for its {depth} rows"):
        reference.msa(key, rows=[0, depth])
    r = httpx.post(f"{lookup_url}/v1/msas/{key}:slice", json={"rows": [0, depth]})
    assert r.status_code == 422 and f"MSA {key}" in r.json()["detail"], r.text


def test_a_reversed_range_says_so(reference: LocalStore, lookup_url: str) -> None:
    key = reference.msas.column("key")[0].as_py()
    assert reference.msa(key).residues.shape[0] > 5  # both ends inside: only the order is wrong
    r = httpx.get(f"{lookup_url}/v1/msas/{key}", params={"rows": "5:2"})
    assert r.status_code == 422 and "5:2 is start > stop" in r.json()["detail"], r.text
