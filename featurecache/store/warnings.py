"""Build warnings that belong to no entry: the MSA stage's alignments that matched no chain.

An entry's warnings are rows of its structure part's ``_index/warnings.arrow`` and live as long as
that version of the entry (``index.rebuild_index``). What the MSA stage found in ``--msa-dir`` is
about the directory, not an entry, and changes when its files do: each MSA stage that finds it
changed writes one :data:`MSA_UNMATCHED` row (0 alignments: the earlier warning no longer holds)
into its first MSA part (:class:`~featurecache.store.msa.MSAPartContents`), and the index keeps the
latest part's row (``index/msa_unmatched.arrow``: its part stays, as prune keeps any part a table
lists) and, when it counts any, one row of ``warnings`` with no entry, stage ``msa``, the
directory as ``path`` and the build's line as ``message`` (``featurecache info --warnings``
lists it). One row however many files: the message names the first few only
(``build.msa_stage.unmatched_line``).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MSA_UNMATCHED", "MSA_UNMATCHED_SCHEMA", "join_msa_unmatched", "stored_msa_unmatched"]

#: ``<MSA part>/_index/msa_unmatched.arrow``: what one MSA stage found unmatched in ``--msa-dir``
MSA_UNMATCHED = "msa_unmatched"
MSA_UNMATCHED_SCHEMA = pa.schema(
    [
        ("n_alignments", pa.int64()),  # alignments that matched no chain (0: none any more)
        ("path", pa.string()),  # the resolved --msa-dir
        ("message", pa.string()),  # the build's warning line; null with 0 alignments
        ("part", pa.string()),
    ]
)


def join_msa_unmatched(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Index rebuild hook: keep the latest part's :data:`MSA_UNMATCHED` row (parts sort by name;
    the table goes when no part has one), and add it to ``warnings`` when it counts alignments."""
    t = tables.get(MSA_UNMATCHED)
    if t is None or t.num_rows == 0:
        tables.pop(MSA_UNMATCHED, None)
        return tables
    latest = t.take(pa.array([pc.index(t.column("part"), pc.max(t.column("part"))).as_py()], pa.int64()))
    latest = latest.select(MSA_UNMATCHED_SCHEMA.names).cast(MSA_UNMATCHED_SCHEMA)
    tables[MSA_UNMATCHED] = latest
    row = latest.to_pylist()[0]
    if not row["n_alignments"]:
        return tables
    from featurecache.store.index import table_from_rows

    warning = table_from_rows("warnings", [{"entry_id": None, "path": row["path"], "stage": "msa",
                                            "message": row["message"], "part": row["part"]}])  # fmt: skip
    w = tables.get("warnings")
    tables["warnings"] = (
        warning
        if w is None or w.num_rows == 0
        else pa.concat_tables([w, warning], promote_options="permissive")
    )
    return tables


def stored_msa_unmatched(table: pa.Table | None) -> tuple[int, str | None]:
    """``(alignments, message)`` of the index's :data:`MSA_UNMATCHED` table (``table``);
    ``(0, None)`` without one, as after a stage that found none."""
    if table is None or table.num_rows == 0:
        return 0, None
    row = table.to_pylist()[-1]
    return int(row["n_alignments"] or 0), row["message"]
