"""Entries: the filtered listing (JSON), one entry, batches of entries and some rows of one entry's
group (Arrow IPC)."""

from __future__ import annotations

import itertools
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from featurecache.store import arrow_io
from services.lookup import metrics
from services.lookup.deps import ReaderDep, SettingsDep
from services.lookup.handlers import StoreRoute, count_sent_entries, current_only, guard_stream
from services.lookup.listing import list_entries, make_query
from services.lookup.middleware import is_head
from services.lookup.params import MAX_INDEX, check_limit, check_name, parse_arrays
from services.lookup.payloads import (
    entries_stream,
    entry_bytes,
    entry_bytes_length,
    entry_rows,
    entry_rows_bytes,
    estimate_entry_bytes,
)

router = APIRouter(prefix="/v1", tags=["entries"], route_class=StoreRoute)

ARROW_OK: dict[int | str, dict[str, Any]] = {
    200: {"content": {arrow_io.MEDIA_TYPE: {}}, "description": "Arrow IPC stream, one row per entry."}
}
ARRAYS_HELP = (
    "Only these arrays: a group (`atoms`, `tokens`, `bonds`, `interfaces`) or one field "
    "(`atoms/coords`); repeat the parameter or comma-separate. Leave out for every array; "
    "empty for none (index row and chains only)."
)


@router.get("/entries", summary="Page through the entries index with filters")
def listing(
    reader: ReaderDep,
    settings: SettingsDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, description="Rows per page (at most max_page_size).")] = 100,
    max_resolution: Annotated[
        float | None,
        Query(description="Resolution ≤ this (Å); drops entries without one.", allow_inf_nan=False),
    ] = None,
    released_after: Annotated[str | None, Query(description="Release date ≥ this (YYYY-MM-DD).")] = None,
    released_before: Annotated[str | None, Query(description="Release date ≤ this (YYYY-MM-DD).")] = None,
    min_tokens: Annotated[int | None, Query(ge=0)] = None,
    max_tokens: Annotated[int | None, Query(ge=0)] = None,
    min_atoms: Annotated[int | None, Query(ge=0)] = None,
    max_atoms: Annotated[int | None, Query(ge=0)] = None,
    mol_type: Annotated[
        list[str] | None, Query(description="Entries holding every listed type: protein, rna, dna, ligand.")
    ] = None,
) -> dict[str, Any]:
    check_limit("max_page_size", settings.max_page_size, limit, "limit")
    query = make_query(
        max_resolution=max_resolution, released_after=released_after, released_before=released_before,
        min_tokens=min_tokens, max_tokens=max_tokens, min_atoms=min_atoms, max_atoms=max_atoms,
        mol_types=mol_type,
    )  # fmt: skip
    return list_entries(reader.entries, query, offset, limit)


@router.get(
    "/entries/{entry_id}",
    summary="One entry's arrays as Arrow IPC",
    response_class=Response,
    responses={
        **ARROW_OK,
        404: {"description": "No such entry."},
        413: {"description": "Over max_response_bytes."},
    },
)
def entry(
    reader: ReaderDep,
    settings: SettingsDep,
    request: Request,
    entry_id: Annotated[str, Path(description="Entry id (see GET /v1/entries).")],
    arrays: Annotated[list[str] | None, Query(description=ARRAYS_HELP)] = None,
) -> Response:
    check_name(entry_id, "entry id")
    sel = parse_arrays(arrays)
    size = estimate_entry_bytes(reader, [entry_id], sel)
    check_limit(
        "max_response_bytes", settings.max_response_bytes, size, f"entry {entry_id} ({size} array bytes)"
    )
    if is_head(request.scope):
        # the GET's headers, content-length included, from the index alone: no array is read (a
        # 64k-atom entry's GET reads and encodes megabytes only for the middleware to drop them).
        # A shard damaged under an unchanged store shows only when read: HEAD says 200 there, GET 500
        length = entry_bytes_length(reader, entry_id, sel)
        return Response(media_type=arrow_io.MEDIA_TYPE, headers={"content-length": str(length)})
    body = entry_bytes(reader, entry_id, sel)
    metrics.ENTRIES.inc()
    return Response(body, media_type=arrow_io.MEDIA_TYPE)


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(description="Entry ids, answered in this order (at most max_batch_entries).")
    arrays: list[str] | None = Field(None, description=ARRAYS_HELP)


@router.post(
    "/entries:batch",
    summary="Several entries in one Arrow IPC stream (one record batch per entry, in request order)",
    response_class=StreamingResponse,
    responses={
        **ARROW_OK, 404: {"description": "An id is unknown (named in `detail`)."},
        413: {"description": "Over max_batch_entries or max_response_bytes (named in `detail`)."},
    },
)  # fmt: skip
def batch(
    reader: ReaderDep, settings: SettingsDep, body: BatchRequest, request: Request
) -> StreamingResponse:
    check_limit("max_batch_entries", settings.max_batch_entries, len(body.ids), "batch size")
    for i in body.ids:
        check_name(i, "entry id")
    sel = parse_arrays(body.arrays)
    size = estimate_entry_bytes(reader, body.ids, sel)  # every id is checked here, before streaming
    check_limit("max_response_bytes", settings.max_response_bytes, size, f"batch of {len(body.ids)} entries")
    stream = current_only(request, entries_stream(reader, body.ids, sel))
    # the schema and the first entry before the status goes out: a store that cannot be read, or
    # that changed while they were read, is a 503
    head = [next(stream), next(stream)]
    pieces = count_sent_entries(itertools.chain(head, guard_stream(request, stream)), len(body.ids))
    return StreamingResponse(
        pieces, media_type=arrow_io.MEDIA_TYPE, headers={"x-featurecache-entries": str(len(body.ids))}
    )


RowNumber = Annotated[int, Field(ge=0, le=MAX_INDEX, strict=True)]  # (no group is this long)


class RowsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: str = Field(description="The group the rows are of: `atoms`, `tokens`, `bonds` or `interfaces`.")
    ranges: list[tuple[RowNumber, RowNumber]] = Field(
        description="Entry-local row ranges as pairs `[start, stop]`, half-open (rows start … stop - 1; "
        "0 ≤ start ≤ stop ≤ the group's rows in the entry), in any order, overlapping or not; `[]` for "
        "none (the answer then carries no rows, only its schema: the fields the entry's part stores)."
    )
    fields: list[str] | None = Field(
        None,
        description="Only these fields of the group (each one the entry's part stores); leave out for "
        "every field the part stores.",
    )


ROWS_DESCRIPTION = """\
What a training client reads of a large entry once it has cropped its tokens (crop first): the
atom rows its sample needs, not the entry's every atom. The answer is an Arrow IPC stream of one
row: `rows` (int64, the entry-local row numbers sent: every row of the ranges, ascending, each
once) and one array per field named `group/field`, as the entry's part stores them (a field
written only by a newer featurizer than the part's, e.g. `tokens/centre_coords` before 0.7.0, is
absent, never derived from other arrays: `GET /v1/entries/{entry_id}` derives it). `attrs` holds
`id`, `group`, `count` (the group's rows in the entry), `part` and `stored_fields` (group → the
fields the entry's part stores). `max_response_bytes` is checked against the rows asked for (8
bytes a row for its number, plus its fields) before anything is read. A service that has this
route says so in `GET /v1/service` (`capabilities` holds `entry_rows`). GET and HEAD on this path
are `GET /v1/entries/{entry_id}` for the id `ID:rows`, as for `/v1/msas/{key}:slice`.
"""


@router.post(
    "/entries/{entry_id}:rows",
    summary="Some rows of one entry's group (its atoms, say) as Arrow IPC",
    description=ROWS_DESCRIPTION,
    response_class=Response,
    responses={
        200: {"content": {arrow_io.MEDIA_TYPE: {}}, "description": "Arrow IPC stream, one row: the rows read."},
        404: {"description": "No such entry."},
        413: {"description": "Over max_response_bytes, or a body over max_body_bytes (named in `detail`)."},
        422: {"description": "Unknown group or field, a field the part does not store, a range out of bounds "
              "or with start > stop, a malformed body."},
    },
)  # fmt: skip
def rows(
    reader: ReaderDep,
    settings: SettingsDep,
    entry_id: Annotated[str, Path(description="Entry id (see GET /v1/entries).")],
    body: RowsRequest,
) -> Response:
    check_name(entry_id, "entry id")
    record, dtypes = entry_rows(reader, settings, entry_id, body.group, body.ranges, body.fields)
    metrics.ENTRY_ROWS.labels(body.group).inc(len(record.arrays["rows"]))
    return Response(entry_rows_bytes(record, dtypes), media_type=arrow_io.MEDIA_TYPE)
