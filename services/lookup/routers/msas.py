"""MSA slices: only the rows and columns asked for (a client that cropped 384 tokens transfers 384
columns, not the whole alignment)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from featurecache.store import arrow_io
from services.lookup import metrics
from services.lookup.deps import ReaderDep, SettingsDep
from services.lookup.handlers import StoreRoute
from services.lookup.middleware import is_head
from services.lookup.params import MAX_INDEX, check_name, parse_index_spec
from services.lookup.payloads import msa_bytes, msa_bytes_length, msa_slice

router = APIRouter(prefix="/v1", tags=["msas"], route_class=StoreRoute)

ARROW_OK: dict[int | str, dict[str, Any]] = {
    200: {"content": {arrow_io.MEDIA_TYPE: {}}, "description": "Arrow IPC stream with one MSA block."}
}
RESPONSES: dict[int | str, dict[str, Any]] = {
    **ARROW_OK,
    404: {"description": "No MSA with this key."},
    413: {
        "description": "Over max_msa_rows, max_msa_cols, max_msa_cells or max_response_bytes (named in "
        "`detail`)."
    },
    422: {"description": "Malformed or out-of-range selection."},
}
SPEC_HELP = (
    "`a:b` (either end optional), or a comma list of indices and closed ranges `0,5,9:12`; "
    "empty = none; leave out for all."
)


@router.get("/msas/{key}", summary="A slice of one stored MSA (rows × columns) as Arrow IPC",
            response_class=Response, responses=RESPONSES)  # fmt: skip
def msa(
    reader: ReaderDep,
    settings: SettingsDep,
    request: Request,
    key: Annotated[str, Path(description="MSA key (a chain's sequence_hash).")],
    rows: Annotated[str | None, Query(description="Rows: " + SPEC_HELP)] = None,
    cols: Annotated[str | None, Query(description="Columns: " + SPEC_HELP)] = None,
) -> Response:
    check_name(key, "MSA key")
    r, c = _selection(rows, "rows", settings), _selection(cols, "cols", settings)
    if is_head(request.scope):
        # the GET's headers from the index alone, as an entry's HEAD: the slice is not read (a HEAD
        # of a 100 MB selection held it in memory for the middleware to drop; review R28d s46)
        length = msa_bytes_length(reader, settings, key, r, c)
        return Response(media_type=arrow_io.MEDIA_TYPE, headers={"content-length": str(length)})
    block = msa_slice(reader, settings, key, r, c)
    metrics.MSA_CELLS.inc(block.residues.size)
    return Response(msa_bytes(block), media_type=arrow_io.MEDIA_TYPE)


def _selection(sel: list[int] | str | None, axis: str, settings: Any) -> slice | list[int] | None:
    """A spec string parsed, refused past ``max_msa_rows`` / ``max_msa_cols`` before its list is built."""
    if not isinstance(sel, str):
        return sel
    limit = f"max_msa_{axis}"
    return parse_index_spec(sel, axis, getattr(settings, limit), limit)


Index = Annotated[int, Field(ge=0, le=MAX_INDEX, strict=True)]  # JSON integers only: not true, not "1"


class SliceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: list[Index] | str | None = Field(None, description="Row indices, or a spec string.")
    cols: list[Index] | str | None = Field(None, description="Column indices, or a spec string.")


@router.post("/msas/{key}:slice", summary="The same slice, selection in a JSON body (long index lists)",
             response_class=Response, responses=RESPONSES)  # fmt: skip
def msa_post(
    reader: ReaderDep,
    settings: SettingsDep,
    key: Annotated[str, Path(description="MSA key (a chain's sequence_hash).")],
    request: SliceRequest,
) -> Response:
    check_name(key, "MSA key")
    rows, cols = _selection(request.rows, "rows", settings), _selection(request.cols, "cols", settings)
    block = msa_slice(reader, settings, key, rows, cols)
    metrics.MSA_CELLS.inc(block.residues.size)
    return Response(msa_bytes(block), media_type=arrow_io.MEDIA_TYPE)
