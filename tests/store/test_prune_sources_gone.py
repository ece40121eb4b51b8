"""``featurecache prune --sources-gone PDB_DIR [--msa-dir DIR]`` removes the stored entries and MSAs
whose source files are gone (what a build reports as "sources gone"), and nothing else. Before, no
command could: the build said so ("featurecache prune does not remove them"), and `prune_store` took
no such option.

Real builds (1 worker, one input per structure part) of the repo's sample 1psm and 2q2k structures
with their real OpenFold MSAs, real CLI runs, a real uvicorn lookup service over the store."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

import featurecache
from featurecache.client.http import LookupClient
from featurecache.errors import NotFound, UsageError
from featurecache.store.prune import prune_store
from featurecache.store.verify import verify_store
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.conftest import SAMPLES, STRUCTURES, CliRun, build_store, cli_in_process, store_snapshot

OPENFOLD = SAMPLES / "msas" / "openfold"


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (prune, verify): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*args)


def _msa_key(store: Path, entry_id: str, auth_id: str) -> str:
    s = featurecache.open_store(store)
    row = next(r for r in s.chains.to_pylist() if r["entry_id"] == entry_id and r["auth_id"] == auth_id)
    return str(row["msa_key"])


def test_sources_gone_removes_what_is_gone_and_only_that(tmp_path: Path) -> None:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    for entry in ("1psm_A", "2q2k_A"):
        (msa / entry).mkdir(parents=True)
        for name in ("bfd_uniclust_hits.a3m", "mgnify_hits.sto"):
            shutil.copy(OPENFOLD / entry / name, msa / entry)
    store = tmp_path / "s"
    first = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert first.n_failed == 0
    parts = {e["id"]: e["part"] for e in featurecache.open_store(store).entries.to_pylist()}
    assert set(parts) == {"1psm", "2q2k"} and parts["1psm"] != parts["2q2k"]
    key_1psm = _msa_key(store, "1psm", "A")
    key_2q2k = _msa_key(store, "2q2k", "A")
    assert key_1psm and key_2q2k

    # nothing is gone yet: nothing to remove
    result = prune_store(store, dry_run=True, sources_gone=pdb, msa_dir=msa)
    assert (result.entries, result.msas) == ([], [])

    # 2q2k's structure file and all of 1psm's MSA files removed (tests/build/test_sources_gone.py)
    (pdb / "2q2k.cif").unlink()
    shutil.rmtree(msa / "1psm_A")
    before = store_snapshot(store)
    dry = _cli("prune", str(store), "--sources-gone", str(pdb), "--msa-dir", str(msa), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would remove 1 entry whose files are gone from {pdb}: 2q2k\n" in dry.stdout
    assert f"would remove 1 MSA whose files are gone from {msa} (used by 1psm/A)\n" in dry.stdout
    # 2q2k's part holds nothing else: it would go (it is not the highest structure part once the
    # removal is recorded in a part of its own)
    assert parts["2q2k"] in dry.stdout.splitlines()[-1], dry.stdout
    assert store_snapshot(store) == before  # a dry run changes nothing

    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        client = LookupClient(url)
        served = http.get("/v1/entries/2q2k")
        assert served.status_code == 200
        index_before = served.headers["x-featurecache-index"]
        assert client.entry("2q2k").id == "2q2k" and "2q2k" in client.ids
        run = _cli("prune", str(store), "--sources-gone", str(pdb), "--msa-dir", str(msa))
        assert run.returncode == 0, run.stderr
        assert f"removed 1 entry whose files are gone from {pdb}: 2q2k\n" in run.stdout
        assert f"removed 1 MSA whose files are gone from {msa} (used by 1psm/A)\n" in run.stdout
        assert run.stdout.splitlines()[-1].split(": ")[-1] == dry.stdout.splitlines()[-1].split(": ")[-1]
        # the service and its clients see the entry gone; 1psm stays, without its gone MSA. (The
        # service looks at the index at most every second; until then a read of a deleted part
        # answers 503 "retry later", which the client retries, as during any prune or build.)
        deadline = time.monotonic() + 30
        while http.get("/v1/info").headers["x-featurecache-index"] == index_before:
            assert time.monotonic() < deadline, "the service never took the new index"
            time.sleep(0.2)
        r = http.get("/v1/entries/2q2k")
        assert r.status_code == 404 and "2q2k" in r.json()["detail"], r.text
        assert http.get("/v1/entries/1psm").status_code == 200
        client.refresh()
        assert client.ids == ["1psm"] and "2q2k" not in client
        with pytest.raises(NotFound):
            client.entry("2q2k")
        assert http.get(f"/v1/msas/{key_1psm}").status_code == 404
    after = featurecache.open_store(store)
    assert after.ids == ["1psm"]
    assert after.msas.column("key").to_pylist() == []  # 2q2k's MSA went with 2q2k, 1psm's was gone
    assert _msa_key(store, "1psm", "A") == ""
    assert not (store / "parts" / parts["2q2k"]).exists()
    assert (store / "parts" / parts["1psm"]).is_dir()
    assert verify_store(store) == []
    ok = _cli("verify", str(store))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # run again: nothing more is gone
    again = prune_store(store, sources_gone=pdb, msa_dir=msa)
    assert (again.entries, again.msas) == ([], [])
    assert featurecache.open_store(store).ids == ["1psm"]

    # the file put back (same bytes): the next build stores it again (before: its key counted as
    # built); 1psm/A gets the single-sequence MSA a new store from the current files would give it
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    back = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert back.n_failed == 0 and back.n_built == 1
    assert sorted(featurecache.open_store(store).ids) == ["1psm", "2q2k"]
    assert _msa_key(store, "2q2k", "A") == key_2q2k and _msa_key(store, "1psm", "A") == key_1psm
    files = {r["key"]: r["n_files"] for r in featurecache.open_store(store).msas.to_pylist()}
    assert files[key_1psm] == 0 and files[key_2q2k] > 0
    assert verify_store(store) == []


def test_an_entry_whose_file_is_still_there_is_never_removed(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif", "102m.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    # 2q2k's file changed (the next build rebuilds it); the directory also given as another path
    with (pdb / "2q2k.cif").open("a") as f:
        f.write("# edited\n")
    link = tmp_path / "link"
    link.symlink_to(pdb)
    for given in (pdb, link):
        assert prune_store(store, sources_gone=given).entries == [], given
    assert sorted(featurecache.open_store(store).ids) == ["102m", "1psm", "2q2k"]
    # the files of another directory: none of this store's entries was built from it
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", other)
    assert prune_store(store, sources_gone=other).entries == []
    # an emptied (or unmounted) directory is not taken for every file gone
    for f in list(pdb.glob("*.cif")):
        f.rename(tmp_path / f.name)
    with pytest.raises(UsageError, match="no structure file under it"):
        prune_store(store, sources_gone=pdb)
    assert sorted(featurecache.open_store(store).ids) == ["102m", "1psm", "2q2k"]
    # 1psm moved into a subdirectory: it takes the stored 1psm's id, whose path is no longer an
    # input, and the build replaces that entry (review R26b s44 #3; before, it became a second
    # entry 1psm.cif and the stored 1psm was reported gone): nothing is gone, prune removes nothing
    for name in ("102m.cif", "2q2k.cif"):
        (tmp_path / name).rename(pdb / name)
    (pdb / "sub").mkdir()
    (tmp_path / "1psm.cif").rename(pdb / "sub" / "1psm.cif")
    moved = build_store(store, pdb, workers=1, part_size=1)
    assert moved.entries_gone == [] and moved.n_failed == 0
    assert moved.moved == ["1psm (1psm.cif → sub/1psm.cif)"]
    assert prune_store(store, sources_gone=pdb).entries == []
    assert sorted(featurecache.open_store(store).ids) == ["102m", "1psm", "2q2k"]
    assert verify_store(store) == []


def test_usage_errors(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    store = tmp_path / "s"
    build_store(store, pdb, workers=1)
    r = cli_in_process("prune", str(store), "--msa-dir", str(pdb))
    assert r.returncode == 2 and "--msa-dir is read only with --sources-gone" in r.stderr, r.stderr
    r = cli_in_process("prune", str(store), "--sources-gone", str(tmp_path / "nope"))
    assert r.returncode == 2 and "no such directory" in r.stderr, r.stderr
    assert featurecache.open_store(store).ids == ["1psm"]
    h = _cli("prune", "--help")
    assert "--sources-gone" in h.stdout and "--msa-dir" in h.stdout


def test_a_failure_the_removed_entry_had_fixed_stays_fixed(tmp_path: Path) -> None:
    # 2q2k.cif first malformed (a corpus file without _atom_site: SOURCES.tsv EDGE/MALFORMED), then
    # fixed: the entry built from it supersedes the failure, and its removal must not bring it back
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    shutil.copy(STRUCTURES / "4Q9R_min.cif", pdb / "2q2k.cif")
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 1
    assert [f["path"] for f in featurecache.open_store(store).failures.to_pylist()] == ["2q2k.cif"]
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb / "2q2k.cif")
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    assert featurecache.open_store(store).failures.num_rows == 0
    (pdb / "2q2k.cif").unlink()
    assert prune_store(store, sources_gone=pdb).entries == ["2q2k"]
    after = featurecache.open_store(store)
    assert after.ids == ["1psm"] and after.failures.num_rows == 0, after.failures.to_pylist()
    assert verify_store(store) == []


def test_a_removed_entry_put_back_is_built_again(tmp_path: Path) -> None:
    # one part holds both entries: it stays (1psm is live), so its manifest still lists the
    # removed entry's key; the key must not count as built (before: the put-back file was skipped)
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=8).n_failed == 0
    (pdb / "2q2k.cif").unlink()
    result = prune_store(store, sources_gone=pdb)
    assert result.entries == ["2q2k"] and result.parts == []
    assert featurecache.open_store(store).ids == ["1psm"]
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    back = build_store(store, pdb, workers=1, part_size=8)
    assert back.n_built == 1 and back.n_skipped == 1
    assert sorted(featurecache.open_store(store).ids) == ["1psm", "2q2k"]
    assert verify_store(store) == []
