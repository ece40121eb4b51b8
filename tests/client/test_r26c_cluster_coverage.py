"""Review R26c (session 44) #5: a ``cluster_table`` that matched no chain (PDB-style ids,
``102M_1`` for ``102m``) was ignored with one line at INFO level: the run trained on
identical-sequence clusters instead of the user's, and said nothing a default log shows."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from featurecache.client.sampler import Sampler
from featurecache.errors import InvalidRequest


def _sampler(reader: Any, table: pa.Table | None) -> Sampler:
    return Sampler(reader.entries, reader.chains, reader.interfaces, weighting="af3", cluster_table=table)


def test_a_table_of_other_ids_is_refused_naming_both_sides(client_reader: Any) -> None:
    ch = client_reader.chains
    upper = [f"{e.upper()}_1" for e in ch.column("entry_id").to_pylist()]
    table = pa.table(
        {"entry_id": upper, "label_id": ch.column("label_id"), "cluster_id": ["big"] * ch.num_rows}
    )
    with pytest.raises(InvalidRequest) as err:
        _sampler(client_reader, table)
    said = str(err.value)
    assert f"cluster_table matches none of the {ch.num_rows} chains sampled" in said
    assert "compared on (entry_id, label_id), case-sensitive" in said
    assert repr(upper[0]) in said and repr(ch.column("entry_id")[0].as_py()) in said


def test_a_table_of_some_chains_is_warned_about(client_reader: Any, caplog: pytest.LogCaptureFixture) -> None:
    ch = client_reader.chains
    protein = ch.filter(pc.equal(ch.column("mol_type"), 0))
    table = pa.table({"entry_id": protein.column("entry_id"), "asym_id": protein.column("asym_id"),
                      "cluster_id": ["all-proteins"] * protein.num_rows})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="featurecache.client.sampler"):
        s = _sampler(client_reader, table)
    resolved = ch.filter(pc.greater(ch.column("n_resolved"), 0))
    others = resolved.num_rows - protein.filter(pc.greater(protein.column("n_resolved"), 0)).num_rows
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    said = warned[0].getMessage()
    assert f"covers {resolved.num_rows - others} of {resolved.num_rows} chains" in said
    assert (
        "compared on (entry_id, asym_id)" in said
        and "ligand" in said
        and "cluster by identical sequence" in said
    )
    assert not np.allclose(s.unit_probabilities, _sampler(client_reader, None).unit_probabilities)


def test_a_table_of_every_chain_says_nothing(client_reader: Any, caplog: pytest.LogCaptureFixture) -> None:
    ch = client_reader.chains
    table = pa.table({"entry_id": ch.column("entry_id"), "asym_id": ch.column("asym_id"),
                      "cluster_id": ch.column("sequence_hash")})  # fmt: skip
    with caplog.at_level(logging.INFO, logger="featurecache.client.sampler"):
        _sampler(client_reader, table)
    assert not [r for r in caplog.records if "cluster table" in r.getMessage()]
