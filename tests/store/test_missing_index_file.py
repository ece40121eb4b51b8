"""A missing index file is an error naming it, not an empty table.

Before, ``LocalStore`` read a missing ``index/<table>.arrow`` as an empty table: without
``msas.arrow`` every chain read single-sequence while ``chains.arrow`` still named its MSA, and
``verify`` said the store was fine; without ``entries.arrow`` ``info`` said "entries 0" (exit 0)
and the service answered ready with 0 entries. Now opening the store fails (exit 3 from the CLI,
503 from the service) naming the file and how the index comes back, and ``verify`` cross-checks
the chains' MSA keys against the msas index also when that index is empty.

Each test works on a copy of the session's sample store (a real build of samples/).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from featurecache import open_store
from featurecache.errors import StoreError
from featurecache.store.verify import verify_store
from tests.conftest import CliRun, cli_in_process

REPO = Path(__file__).resolve().parents[2]
#: every index table a build writes, empty or not (DESIGN.md's store layout)
INDEX_TABLES = ("entries", "chains", "interfaces", "failures", "msas", "components", "warnings")
#: longer than the service's full-check interval (Settings.store_check_seconds, 1 s by default)
SETTLE_SECONDS = 1.5


def _copy(sample_store: Path, dest: Path) -> Path:
    shutil.copytree(sample_store, dest, symlinks=True)
    return dest


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (info, verify): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*args, cwd=REPO)


@pytest.mark.parametrize("table", INDEX_TABLES)
def test_a_missing_index_file_is_an_error_naming_it(sample_store: Path, tmp_path: Path, table: str) -> None:
    store = _copy(sample_store, tmp_path / "store")
    missing = store / "index" / f"{table}.arrow"
    missing.unlink()
    for check in (open_store, verify_store):
        with pytest.raises(StoreError) as err:
            check(store)
        assert str(missing) in str(err.value) and "missing" in str(err.value), err.value
        assert "featurecache build" in str(err.value), err.value  # how the index comes back


@pytest.mark.parametrize("table", ["entries", "msas"])
def test_info_and_verify_exit_3_naming_a_missing_index_file(
    sample_store: Path, tmp_path: Path, table: str
) -> None:
    store = _copy(sample_store, tmp_path / "store")
    (store / "index" / f"{table}.arrow").unlink()
    for command in ("info", "verify"):
        r = _cli(command, str(store))
        assert r.returncode == 3, (command, r.returncode, r.stdout[-500:], r.stderr[-500:])
        assert f"index/{table}.arrow" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_store_without_its_index_directory_is_an_error(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path / "store")
    n_parts = sum(1 for p in (store / "parts").iterdir() if p.is_dir())
    shutil.rmtree(store / "index")
    with pytest.raises(StoreError, match=f"has no index .* but {n_parts} part"):
        open_store(store)


def test_verify_names_chain_msa_keys_the_msas_index_lacks(sample_store: Path, tmp_path: Path) -> None:
    """msas.arrow present but empty (its schema, no rows): every chain that names an MSA is a problem."""
    store = _copy(sample_store, tmp_path / "store")
    msas_file = store / "index" / "msas.arrow"
    with pa.memory_map(str(msas_file)) as source:
        schema = ipc.open_file(source).schema
    with pa.OSFile(str(msas_file), "wb") as sink, ipc.new_file(sink, schema):
        pass
    with pa.memory_map(str(store / "index" / "chains.arrow")) as source:
        chains = ipc.open_file(source).read_all().to_pydict()
    expected = {(e, k) for e, k in zip(chains["entry_id"], chains["msa_key"], strict=True) if k}
    assert expected, "the sample store's chains should have MSAs"
    problems = verify_store(store)
    found = {(p.split()[1].rstrip(":"), p.split()[5]) for p in problems if "is not in the msas index" in p}
    assert found == expected, problems


def test_the_service_answers_503_while_an_index_file_is_missing(sample_store: Path, tmp_path: Path) -> None:
    """Served, then ``index/msas.arrow`` removed: 503 (not ready, not single-sequence MSAs, not a
    500); put back: served again."""
    from services.lookup.server import background_server

    store = _copy(sample_store, tmp_path / "store")
    msas_file = store / "index" / "msas.arrow"
    kept = tmp_path / "msas.arrow"
    entry_id = open_store(store).ids[0]
    with background_server(store) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get(f"/v1/entries/{entry_id}").status_code == 200
        shutil.move(msas_file, kept)
        time.sleep(SETTLE_SECONDS)
        for path in ("/v1/ready", f"/v1/entries/{entry_id}", "/v1/info"):
            r = http.get(path)
            assert r.status_code == 503 and "retry-after" in r.headers, (path, r.status_code, r.text[:300])
            assert str(tmp_path) not in r.text, r.text  # no server path in the answer
        shutil.copy(kept, msas_file)
        time.sleep(SETTLE_SECONDS)
        assert http.get("/v1/ready").status_code == 200
        assert http.get(f"/v1/entries/{entry_id}").status_code == 200
