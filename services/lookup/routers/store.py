"""The store as a whole: info, and its index tables as Arrow IPC (what a remote reader loads)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response, StreamingResponse

import featurecache
from featurecache.errors import InvalidRequest, NotFound
from featurecache.store import arrow_io
from featurecache.store.layout import TABLES
from featurecache.store.reader import LocalStore
from featurecache.store.versions import VERSIONS_KEY
from services.lookup.deps import ReaderDep, SettingsDep
from services.lookup.handlers import StoreRoute
from services.lookup.payloads import (
    ENTRY_ROWS,
    available_tables,
    featurizer_versions,
    store_info,
    table_stream,
)
from services.lookup.settings import Settings

router = APIRouter(prefix="/v1", tags=["store"], route_class=StoreRoute)

ARROW: dict[str, Any] = {"content": {arrow_io.MEDIA_TYPE: {}}, "description": "Arrow IPC stream."}


def _service(reader: LocalStore, settings: Settings) -> dict[str, Any]:
    return {
        "version": featurecache.__version__,
        "auth": settings.auth_token is not None,
        "limits": settings.limits(),
        "tables": list(available_tables(reader)),
        # what a client cannot tell from the version alone: the routes it may use that an older service lacks
        "capabilities": [ENTRY_ROWS],
    }


INFO_DESCRIPTION = """\
Answered at once, also in the first seconds of a server process. `counts`, `versions` and the
failure summaries come from the store's index. `parts` (parts per kind) and `bytes` (`total`,
`parts`, `index`) come from summing every file of the store, which the service starts in the
background when it opens (or reopens) the store and which takes seconds to a minute on a large
store: until it is done they are `null` and `"sizes_pending": true` is in the answer; ask again
later for them (`sizes_pending` is absent once they are known). `service` is `GET /v1/service`.
`build_inputs` says what the store's latest build read without the server's paths (`featurecache
info` on the server shows them): `pdb_dir` and `msa_dir` whether that build was given the option,
`ccd` the CCD's `fingerprint` (`null`: built without --ccd), `recorded` false for a store built
before builds recorded it.
"""


def _inputs_without_paths(inputs: Any) -> Any:
    """The store's ``build_inputs`` record (:func:`featurecache.store.info.recorded_build_inputs`)
    less the server's absolute paths: whether --pdb-dir / --msa-dir were given, the CCD's fingerprint
    (review RF1 s24 #3: /v1/info gave every client the directories the store was built from)."""
    if not isinstance(inputs, dict):
        return inputs
    ccd = inputs.get("ccd")
    return {
        "recorded": bool(inputs.get("recorded")),
        "pdb_dir": inputs.get("pdb_dir") is not None,
        "msa_dir": inputs.get("msa_dir") is not None,
        "ccd": {"fingerprint": ccd.get("fingerprint")} if isinstance(ccd, dict) else None,
    }


@router.get(
    "/info",
    summary="Versions, counts and sizes of the store; the service's limits",
    description=INFO_DESCRIPTION,
)
def info(reader: ReaderDep, settings: SettingsDep) -> dict[str, Any]:
    """The store's info (:func:`services.lookup.payloads.store_info`), never waiting for its sizes."""
    doc = store_info(reader)
    doc.pop("path", None)  # the server's filesystem is not the client's business (logged at open)
    if "build_inputs" in doc:  # nor the paths the store was built from
        doc["build_inputs"] = _inputs_without_paths(doc["build_inputs"])
    if isinstance(doc.get(VERSIONS_KEY), dict):  # nor the --pdb-dir of each version (counts stay)
        doc[VERSIONS_KEY].pop("entry_source_dirs", None)
    doc["service"] = _service(reader, settings)
    return doc


@router.get(
    "/service",
    summary="The service's version, auth, limits, capabilities and the store's tables (the `service` part of "
    "/v1/info without the store's counts and sizes: what a client asks before its first read)",
)
def service(
    reader: ReaderDep,
    settings: SettingsDep,
    versions: Annotated[
        bool,
        Query(
            alias=VERSIONS_KEY,
            description="Also `featurizer_versions`: the featurizer versions of the entries and MSAs of the "
            "index that answers (as in /v1/info; counted once per index, not per request). What a "
            "lookup client asks, to notice a store rebuilt by another featurecache.",
        ),
    ] = False,
) -> dict[str, Any]:
    doc = _service(reader, settings)
    if versions:
        doc[VERSIONS_KEY] = featurizer_versions(reader)
    return doc


@router.get(
    "/tables/{name}",
    summary="One index table (entries, chains, ...) as an Arrow IPC stream",
    response_class=StreamingResponse,
    responses={200: ARROW, 404: {"description": "No such table."}},
)
def table(
    reader: ReaderDep,
    name: Annotated[
        str, Path(description=f"{', '.join(TABLES)}, or another index table of the store (e.g. plan).")
    ],
    columns: Annotated[
        list[str] | None, Query(description="Only these columns (repeat or comma-separate).")
    ] = None,
) -> StreamingResponse:
    tables = available_tables(reader)
    if name not in tables:
        raise NotFound(f"no table {name!r}; tables are {list(tables)}")
    t = reader.table(name)
    cols = list(dict.fromkeys(c.strip() for v in columns or [] for c in v.split(",") if c.strip()))
    unknown = [c for c in cols if c not in t.column_names]
    if unknown:
        raise InvalidRequest(f"table {name} has no column(s) {unknown}; columns are {t.column_names}")
    return StreamingResponse(table_stream(t, cols or None), media_type=arrow_io.MEDIA_TYPE)


@router.get(
    "/components",
    summary="The reference conformers of every stored component (chem.reference.ComponentTable) as Arrow",
    response_class=Response,
    responses={200: ARROW},
)
def components(reader: ReaderDep) -> Response:
    return Response(arrow_io.table_bytes(reader.component_table().to_arrow()), media_type=arrow_io.MEDIA_TYPE)
