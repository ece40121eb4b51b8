"""The crop-first path reads a local store's atom rows whole and copies :data:`ATOM_FIELDS` out of
them, instead of asking ``read_rows(fields=ATOM_FIELDS)``, which packed those fields into new
records first (review R27d s45 #6). Samples of large entries of the corpus store must equal, byte
for byte, those drawn with every atom-row read asking ``fields=ATOM_FIELDS`` (the reference), and a
part without one of them still raises the error that names it. (A lookup client still asks for the
fields, its answer's bytes: tests/client/test_http_rows_fallback.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import recfunctions

from featurecache.client import FeatureDataset
from featurecache.client.job import ATOM_FIELDS
from featurecache.client.sampler import SampleKey
from featurecache.errors import InvalidRequest
from featurecache.store.reader import LocalStore

#: entries the crop cuts, read crop-first (thousands of atoms), and one with deep MSAs
ENTRIES = ("1ffk", "6wg6", "5kc1", "7CFN", "2XHE", "7a4d-assembly1")


def _recording(monkeypatch: pytest.MonkeyPatch, force: tuple[str, ...] | None = None) -> list[Any]:
    asked: list[Any] = []
    read_rows = LocalStore.read_rows

    def recording(self: LocalStore, entry_id: str, group: str, ranges: Any, fields: Any = None) -> Any:
        asked.append(fields)
        return read_rows(self, entry_id, group, ranges, force if force is not None else fields)

    monkeypatch.setattr(LocalStore, "read_rows", recording)
    return asked


@pytest.mark.parametrize("crop", [384, 768])
def test_samples_equal_the_fields_reference(
    corpus_store: Path, monkeypatch: pytest.MonkeyPatch, crop: int
) -> None:
    ds = FeatureDataset(corpus_store, crop_size=crop, weighting="uniform", seed=0)
    keys = [SampleKey(i, 0, i, e, ()) for e in ENTRIES for i in range(4)]
    with monkeypatch.context() as m:
        asked = _recording(m)
        new = [ds.job(k) for k in keys]
    assert asked and all(f is None for f in asked)  # the crop-first path ran, reading whole rows
    with monkeypatch.context() as m:
        asked = _recording(m, force=ATOM_FIELDS)
        ref = [ds.job(k) for k in keys]
    assert asked
    for k, a, b in zip(keys, new, ref, strict=True):
        arrays = [x for x in b if isinstance(b[x], np.ndarray)]
        assert arrays and sorted(arrays) == sorted(x for x in a if isinstance(a[x], np.ndarray))
        for x in arrays:
            assert (a[x].dtype, a[x].shape, a[x].tobytes()) == (b[x].dtype, b[x].shape, b[x].tobytes()), (
                k,
                x,
            )


def test_a_part_without_a_field_still_names_it(corpus_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records without ``ref_space_uid`` (a part written before it): the read that asks for the
    fields raises, as before."""
    read_rows = LocalStore.read_rows

    def older_part(self: LocalStore, entry_id: str, group: str, ranges: Any, fields: Any = None) -> Any:
        if fields is not None:
            raise InvalidRequest(f"entry {entry_id}: its part stores no atoms/ref_space_uid")
        rows, records = read_rows(self, entry_id, group, ranges)
        return rows, recfunctions.drop_fields(records, "ref_space_uid", usemask=False)

    monkeypatch.setattr(LocalStore, "read_rows", older_part)
    ds = FeatureDataset(corpus_store, crop_size=384, weighting="uniform", seed=0)
    with pytest.raises(InvalidRequest, match="ref_space_uid"):
        ds.job(SampleKey(0, 0, 0, "1ffk", ()))
