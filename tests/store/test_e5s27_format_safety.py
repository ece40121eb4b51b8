"""No data loss across featurecache versions (review RF1 s27 #1, #2).

#1: featurizer 0.7.0's token records are 12 bytes wider, which featurecache before it (859fe88,
featurizer 0.6.0) cannot decode: its ``verify`` called every entry damaged and ``--repair`` emptied the
index. This code writes store format 2, which that featurecache refuses at once (it reads format 1
only), so it reports and removes nothing; this code still reads format-1 stores and raises one it
extends to 2. #2: an entry of a part a newer featurecache wrote (a token field this code does not
know) is not damage to this code's ``verify``, and ``--repair`` keeps it."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from featurecache.errors import StoreError, StoreVersionError
from featurecache.store.reader import LocalStore
from featurecache.store.writer import write_record_array
from tests.conftest import (
    STRUCTURES,
    CliRun,
    build_store,
    build_with_package,
    cli_in_process,
    featurecache_at,
)

#: featurizer 0.6.0, store format 1: the last commit before featurizer 0.7.0's token records
OLD_COMMIT = "859fe88"


def _cli(package: Path | None, *args: str) -> CliRun | subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` run by ``package`` in a process of its own (its own featurecache on the
    path); None: this code, in this process (tests/conftest.py's cli_in_process)."""
    if package is None:
        return cli_in_process(*args)
    env = {**os.environ, "PYTHONPATH": str(package)}
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=package, env=env, timeout=300)  # fmt: skip


def _index_bytes(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store / "index").iterdir()) if p.is_file()}


def _parts(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "parts").iterdir())


def _format(store: Path) -> object:
    return json.loads((store / "zarr.json").read_text())["attributes"]["format_version"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("e5fmt")
    a, b = tmp / "a", tmp / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", a)
    shutil.copy(STRUCTURES / "209d-assembly1.cif", b)
    return a, b


@pytest.fixture(scope="module")
def new_store(tmp_path_factory: pytest.TempPathFactory, dirs: tuple[Path, Path]) -> Path:
    out = tmp_path_factory.mktemp("e5new") / "s"
    summary = build_store(out, dirs[0], workers=1)
    assert summary.n_failed == 0 and summary.n_built == 1
    return out


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return featurecache_at(OLD_COMMIT, tmp_path_factory.mktemp("e5pkg"))


def test_this_codes_store_is_refused_by_the_older_featurecache(new_store: Path, old_package: Path, tmp_path: Path) -> None:  # fmt: skip
    store = tmp_path / "s"
    shutil.copytree(new_store, store)
    assert _format(store) == 2
    index, parts = _index_bytes(store), _parts(store)
    for args in (["info", str(store)], ["verify", str(store), "--repair", "--no-progress"]):
        done = _cli(old_package, *args)
        # 859fe88 refuses a format it does not read (exit 3) instead of reading 0.7.0 records as damage
        assert done.returncode == 3, (args, done.returncode, done.stdout, done.stderr)
        assert "store format 2" in done.stderr, done.stderr
        assert _index_bytes(store) == index and _parts(store) == parts  # nothing removed
    done = _cli(old_package, "prune", str(store))
    assert done.returncode == 3, done.stdout + done.stderr
    assert _index_bytes(store) == index and _parts(store) == parts


def test_a_newer_format_is_refused_with_an_upgrade_message(new_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    shutil.copytree(new_store, store)
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["format_version"] = 3
    meta.write_text(json.dumps(doc))
    with pytest.raises(
        StoreVersionError, match="written by a newer featurecache: upgrade featurecache to read it"
    ):
        LocalStore(store)
    index = _index_bytes(store)
    for args in (
        ["info", str(store)],
        ["verify", str(store), "--repair", "--no-progress"],
        ["prune", str(store)],
    ):
        done = _cli(None, *args)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert "written by a newer featurecache: upgrade featurecache" in done.stderr, (args, done.stderr)
    assert _index_bytes(store) == index and _format(store) == 3


def test_a_format_1_store_is_read_and_extended(
    old_package: Path, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    old = tmp_path / "old"
    done = build_with_package(old_package, dirs[0], old)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _format(old) == 1
    # what 859fe88 itself reads: the reference for this code's reading of its store
    ref = tmp_path / "ref.npz"
    code = ("import sys, numpy as np; from featurecache.store.reader import LocalStore; "
            "e = LocalStore(sys.argv[1]).entry('102m'); "
            "np.savez(sys.argv[2], **{f'tokens.{k}': v for k, v in e.tokens.items()}, "
            "**{f'atoms.{k}': v for k, v in e.atoms.items()})")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, str(old), str(ref)], capture_output=True, text=True,
                          cwd=old_package, env={**os.environ, "PYTHONPATH": str(old_package)}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with np.load(ref) as z:
        reference = {k: z[k] for k in z.files}
    assert "tokens.centre_coords" not in reference  # (0.6.0 tokens)
    _same_as_old(LocalStore(old).entry("102m"), reference)
    # commands that write but add no 0.7.0 part leave the format as it is
    for args in (["verify", str(old), "--repair", "--no-progress"], ["prune", str(old)]):
        done = _cli(None, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert _format(old) == 1
    mixed = tmp_path / "mixed"
    shutil.copytree(old, mixed)
    summary = build_store(mixed, dirs[1], workers=1)
    assert summary.n_failed == 0 and summary.n_built == 1
    assert _format(mixed) == 2  # its 0.7.0 part is under a root the older featurecache refuses
    store = LocalStore(mixed)
    assert sorted(store.ids) == ["102m", "209d-assembly1"]
    _same_as_old(store.entry("102m"), reference)
    done = _cli(None, "verify", str(mixed), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _cli(old_package, "verify", str(mixed), "--repair", "--no-progress")
    assert done.returncode == 3 and "store format 2" in done.stderr, done.stdout + done.stderr
    assert sorted(LocalStore(mixed).ids) == ["102m", "209d-assembly1"]


def _same_as_old(entry: object, reference: dict[str, np.ndarray]) -> None:
    """``entry`` as this code reads it holds every token and atom array 859fe88 read, equal, and the
    tokens' derived ``centre_coords`` are their centre atoms' coordinates."""
    for key, want in reference.items():
        group, name = key.split(".", 1)
        assert np.array_equal(getattr(entry, group)[name], want), key
    tokens, atoms = entry.tokens, entry.atoms  # type: ignore[attr-defined]
    assert len(tokens["centre_atom"]) > 0
    assert np.array_equal(tokens["centre_coords"], atoms["coords"][tokens["centre_atom"]])


def _newer_part(store: Path, entry: str) -> str:
    """Rewrite ``entry``'s part the way a newer featurecache would: its tokens gain a field this code
    does not know (appended last, with a valid ``record_dtype``) and its part.json a newer featurizer."""
    rows = LocalStore(store).entries.to_pylist()
    part = next(r["part"] for r in rows if r["id"] == entry)
    arr = zarr.open_array(str(store / "parts" / part / "tokens"), mode="r")
    old = np.dtype(ast.literal_eval(arr.attrs["record_dtype"]))
    rec = np.ascontiguousarray(arr[...]).view(old).reshape(-1)
    out = np.zeros(len(rec), dtype=np.dtype([*old.descr, ("future_flag", "<i4")]))
    for n in old.names:
        out[n] = rec[n]
    group = zarr.open_group(str(store / "parts" / part), mode="r+")
    del group["tokens"]
    write_record_array(group, "tokens", out)
    meta = store / "parts" / part / "_index" / "part.json"
    doc = json.loads(meta.read_text())
    doc["featurizer_version"] = "99.0.0"
    meta.write_text(json.dumps(doc))
    return str(part)


def test_an_entry_a_newer_featurecache_wrote_is_not_damage(new_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    shutil.copytree(new_store, store)
    part = _newer_part(store, "102m")
    with pytest.raises(StoreError, match=r"future_flag .*written by a newer featurecache"):
        LocalStore(store).entry("102m")
    done = _cli(None, "verify", str(store), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MISMATCH" not in done.stdout
    assert (f"entry 102m (part {part}): written by a newer featurecache (featurizer 99.0.0, from the part's "
            "part.json") in done.stderr, done.stderr  # fmt: skip
    assert "upgrade featurecache to verify" in done.stdout
    index = _index_bytes(store)
    done = _cli(None, "verify", str(store), "--repair", "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _index_bytes(store) == index  # not taken out of the index
    assert LocalStore(store).ids == ["102m"]


def test_damage_in_a_part_of_this_featurizer_is_still_damage(new_store: Path, tmp_path: Path) -> None:
    """The check above goes by the part's recorded featurizer: the same unknown field in a part that
    records this code's featurizer is still reported (and repaired) as damage."""
    store = tmp_path / "s"
    shutil.copytree(new_store, store)
    part = _newer_part(store, "102m")
    meta = store / "parts" / part / "_index" / "part.json"
    doc = json.loads(meta.read_text())
    doc["featurizer_version"] = json.loads((new_store / "parts" / part / "_index" / "part.json").read_text())[
        "featurizer_version"
    ]
    meta.write_text(json.dumps(doc))
    done = _cli(None, "verify", str(store), "--no-progress")
    assert done.returncode == 4 and "MISMATCH entry 102m" in done.stdout, done.stdout + done.stderr
