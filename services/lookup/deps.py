"""Dependencies of the routes, as ``Annotated`` aliases: the settings and the open store."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from featurecache.store.reader import LocalStore
from services.lookup.settings import Settings
from services.lookup.state import StoreHolder


# The two below are coroutines: FastAPI runs a plain function dependency in the threadpool, so a
# route that needs only these (liveness) would otherwise wait for one of its 40 threads behind data
# requests (review R28d s46 #7).
async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_holder(request: Request) -> StoreHolder:
    holder: StoreHolder = request.app.state.store
    return holder


def get_reader(request: Request, holder: Annotated[StoreHolder, Depends(get_holder)]) -> LocalStore:
    """The open store; :class:`~services.lookup.state.StoreUnavailable` (→ 503) when it is not.
    Kept on ``request.state.reader``: a read that fails is judged against the reader it used; its
    index's id on ``request.state.index_id`` (the answer's ``x-featurecache-index`` header)."""
    reader, index_id = holder.snapshot()
    request.state.reader = reader
    request.state.index_id = index_id
    return reader


SettingsDep = Annotated[Settings, Depends(get_settings)]
HolderDep = Annotated[StoreHolder, Depends(get_holder)]
ReaderDep = Annotated[LocalStore, Depends(get_reader)]
