"""What built a store: each build records its --pdb-dir, --msa-dir and --ccd (path and fingerprint)
in the store's root attributes; ``featurecache info`` shows them ("none" for an option left out,
"not recorded" for a store built before they were recorded) and how many entries and MSAs were
removed (``prune --sources-gone``, ``verify --repair``); the rebuild command ``verify`` prints
passes the recorded --ccd while that path holds the same CCD, else keeps the placeholder and says
why. Before: the CCD was only folded into the entry keys, info could not say whether one was used,
the printed command always read ``--ccd CCD``, and info did not count removals.

Real builds (1 worker, one input per structure part) of the repo's sample 1psm and 2q2k with their
real OpenFold MSAs and the sample CCD (copied, so that it can be edited and removed); real CLI runs."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import featurecache
from featurecache.build.config import BuildConfig
from featurecache.store.prune import prune_store
from featurecache.store.verify import rebuild_command, rebuild_note, verify_store
from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process

OPENFOLD = SAMPLES / "msas" / "openfold"
IDS = ("1psm", "2q2k")


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (info, verify): the real CLI, in this process (tests/conftest.py); wide:
    each info row on one line."""
    return cli_in_process(*map(str, args), env={"COLUMNS": "300"})


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(pdb, msa, ccd) under ``tmp_path``: the two sample structures, their OpenFold MSAs, the sample CCD."""
    pdb, msa, ccd = tmp_path / "pdb", tmp_path / "msa", tmp_path / "ccd"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
        (msa / f"{entry}_A").mkdir(parents=True)
        for name in ("bfd_uniclust_hits.a3m", "mgnify_hits.sto"):
            shutil.copy(OPENFOLD / f"{entry}_A" / name, msa / f"{entry}_A")
    shutil.copytree(SAMPLES / "ccd", ccd)
    return pdb, msa, ccd


def _info_json(store: Path) -> dict[str, Any]:
    r = _cli("info", store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _info_text(store: Path) -> str:
    r = _cli("info", store)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _row(text: str, label: str) -> str:
    """The value cell of ``info``'s table row ``label``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    raise AssertionError(f"no row {label!r} in:\n{text}")


def test_info_shows_the_inputs_of_the_latest_build(tmp_path: Path) -> None:
    pdb, msa, ccd = _inputs(tmp_path)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, msa_dir=msa, ccd=ccd, part_size=1).n_failed == 0
    rec = _info_json(store)["build_inputs"]
    assert {k: rec[k] for k in ("recorded", "pdb_dir", "msa_dir")} == {
        "recorded": True, "pdb_dir": str(pdb.absolute()), "msa_dir": str(msa.absolute()),
    }  # fmt: skip
    assert rec["ccd"]["path"] == str(ccd.absolute())
    # the fingerprint recorded is the one the entries were keyed with (the store's entry config hash)
    attrs = featurecache.open_store(store).attributes
    assert BuildConfig().entry_config_hash(rec["ccd"]["fingerprint"]) == attrs["entry_config_hash"]
    assert BuildConfig().entry_config_hash("") != attrs["entry_config_hash"]
    text = _info_text(store)
    assert _row(text, "build --ccd") == f"{ccd.absolute()} (fingerprint {rec['ccd']['fingerprint']})", text
    assert _row(text, "build --pdb-dir") == str(pdb.absolute()), text
    assert _row(text, "build --msa-dir") == str(msa.absolute()), text

    # a build without --ccd or --msa-dir: "none", not "not recorded"
    plain = tmp_path / "plain"
    assert build_store(plain, pdb, workers=1, part_size=1).n_failed == 0
    rec = _info_json(plain)["build_inputs"]
    assert rec == {"recorded": True, "pdb_dir": str(pdb.absolute()), "msa_dir": None, "ccd": None}
    text = _info_text(plain)
    assert _row(text, "build --ccd").startswith("none"), text
    assert _row(text, "build --msa-dir") == "none", text

    # a store whose build did not record them (as every build before this one): "not recorded"
    old = tmp_path / "old"
    shutil.copytree(store, old)
    meta = json.loads((old / "zarr.json").read_text())
    del meta["attributes"]["build_inputs"]
    (old / "zarr.json").write_text(json.dumps(meta))
    rec = _info_json(old)["build_inputs"]
    assert rec == {"recorded": False, "pdb_dir": None, "msa_dir": None, "ccd": None}
    text = _info_text(old)
    assert _row(text, "build inputs").startswith("not recorded"), text
    assert "build --ccd" not in text


def test_the_printed_rebuild_command_passes_the_recorded_ccd(tmp_path: Path) -> None:
    pdb, msa, ccd = _inputs(tmp_path)
    store = tmp_path / "my store"
    assert build_store(store, pdb, workers=1, msa_dir=msa, ccd=ccd, part_size=1).n_failed == 0
    part = featurecache.open_store(store).entries.to_pylist()[0]["part"]
    shards = [
        f for f in (store / "parts" / part / "atoms").rglob("*") if f.is_file() and f.name != "zarr.json"
    ]
    with shards[0].open("r+b") as fh:  # damaged on disk, as a bad disk or copy does it
        fh.truncate(shards[0].stat().st_size // 2)

    bad = _cli("verify", store, "--no-progress")
    assert bad.returncode == 4, bad.stdout + bad.stderr
    (build,) = [c for c in bad.stderr.split("`")[1::2] if c.startswith("featurecache build")]
    argv = shlex.split(build)
    assert argv[argv.index("--ccd") + 1] == str(ccd.absolute()), build  # before: --ccd CCD
    assert "CCD:" not in bad.stderr, bad.stderr  # no note: nothing to fill in
    rep = _cli("verify", store, "--repair", "--no-progress")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    # the build as printed rebuilds the damaged entry only: with another CCD, every entry
    # would be rebuilt (the CCD's fingerprint is part of each entry's key)
    opt = {argv[i]: Path(argv[i + 1]) for i in range(2, len(argv), 2)}
    again = build_store(opt["--out"], opt["--pdb-dir"], workers=1, msa_dir=opt["--msa-dir"], ccd=opt["--ccd"],
                        part_size=1)  # fmt: skip
    assert (again.n_built, again.n_rebuilt, again.n_skipped, again.n_failed) == (1, 0, 1, 0)
    assert verify_store(store) == []

    # the CCD edited since: the placeholder, and a note naming the recorded path and why
    first = sorted(ccd.glob("*.cif"))[0]
    first.write_text(first.read_text() + "#\n")
    command, note = rebuild_command(store, []), rebuild_note(store)
    assert "--ccd CCD" in command, command
    assert str(ccd.absolute()) in note and "has changed since" in note, note
    # ... and gone
    shutil.rmtree(ccd)
    command, note = rebuild_command(store, []), rebuild_note(store)
    assert "--ccd CCD" in command, command
    assert str(ccd.absolute()) in note and "is gone" in note, note


def test_info_counts_the_removed_entries_and_msas(tmp_path: Path) -> None:
    pdb, msa, _ccd = _inputs(tmp_path)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 0
    doc = _info_json(store)
    assert doc["removed"] == {"entries": 0, "msas": 0}
    assert _row(_info_text(store), "removed") == "none"

    # 2q2k's structure file and 1psm's MSA files gone (as in test_prune_sources_gone.py)
    gone = (pdb / "2q2k.cif").read_bytes()
    (pdb / "2q2k.cif").unlink()
    shutil.rmtree(msa / "1psm_A")
    result = prune_store(store, sources_gone=pdb, msa_dir=msa)
    assert (result.entries, len(result.msas)) == (["2q2k"], 1), (result.entries, result.msas)
    doc = _info_json(store)
    assert doc["counts"]["entries"] == 1
    assert doc["removed"] == {"entries": 1, "msas": 1}
    assert _row(_info_text(store), "removed").startswith("1 entry, 1 MSA ("), _info_text(store)

    # the structure file put back and built again: its removal is no longer in effect
    (pdb / "2q2k.cif").write_bytes(gone)
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_built == 1
    doc = _info_json(store)
    assert doc["counts"]["entries"] == 2
    assert doc["removed"]["entries"] == 0, doc["removed"]
