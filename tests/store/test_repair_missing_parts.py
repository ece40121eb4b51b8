"""A part deleted from disk (``rm -r STORE/parts/s-00000N``) under ``verify --repair`` and ``prune``.

Review findings, each failing before:

- D2: after the highest-numbered part was deleted, the repair's removal part took its number and the
  index rebuild took the new part for the one it had read (coverage by name): the index stayed
  byte-identical, still listing what the repair said it removed; same for an MSA part.
- D3: an entry whose part is gone vanished from the index with no word (exit 0) as soon as the repair
  or ``prune --sources-gone`` rewrote the index, also one whose source file is gone (kept only with
  ``--drop-gone``) or still there (never removed by a prune).
- D4: the MSAs of a deleted MSA part were "kept: source files gone" (its ``part.json``, the record
  of the ``--msa-dir``, went with it), and the printed build had no ``--msa-dir``.
- D7: a repair with nothing to fix printed three problems in one line, no ``MISMATCH`` line.
- A plain build after a part was deleted dropped from the index, with no word and exit 0, the
  entries of that part whose files are gone too (it rebuilds the index from the parts).
- A repair that wrote dropped a deleted part's component and failure rows with no word (the
  components never came back: the next build's chem stage had scanned every part already), and
  printed none of the problems it could not fix (exit 0).
- A plain build after a component part was deleted dropped its components from the index with no
  word (exit 0) and never computed them again; verify then said ok, although 2q2k's DNA (DA, DC,
  DG, 5IU) had no reference conformer.

Real builds (1 worker, one input per structure part) of the sample 102m, 1psm and 2q2k, the last two
with their OpenFold MSAs; real CLI runs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.store.index import complete_parts, index_tables, rebuild_index
from featurecache.store.verify import verify_store
from featurecache.store.writer import PartContents, write_structure_part
from tests.clusters import scheduler_args
from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process, store_snapshot

OPENFOLD = SAMPLES / "msas" / "openfold"
IDS = ["102m", "1psm", "2q2k"]


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (verify, prune, info): the real CLI, in this process (tests/conftest.py)."""
    extra = ["--no-progress"] if args[0] == "verify" else []
    return cli_in_process(*map(str, args), *extra)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(store, pdb, msa): 102m, 1psm, 2q2k in parts s-000000, s-000001, s-000002; the MSAs in m-000000."""
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
    for entry in ("1psm", "2q2k"):
        (msa / f"{entry}_A").mkdir(parents=True)
        shutil.copy(OPENFOLD / f"{entry}_A" / "bfd_uniclust_hits.a3m", msa / f"{entry}_A")
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 0
    assert verify_store(store) == []
    assert [_part_of(store, i) for i in IDS] == ["s-000000", "s-000001", "s-000002"]
    assert [p.name for p in complete_parts(store) if p.name.startswith("m-")] == ["m-000000"]
    return store, pdb.resolve(), msa.resolve()


def _part_of(store: Path, entry_id: str) -> str:
    s = featurecache.open_store(store)
    return str(s.entries.column("part")[s.row_of(entry_id)].as_py())


def _damage(store: Path, entry_id: str) -> None:
    """Cut the entry's atoms shard in half (its part: one entry)."""
    (shard,) = [f for f in (store / "parts" / _part_of(store, entry_id) / "atoms").rglob("*")
                if f.is_file() and f.name != "zarr.json"]  # fmt: skip
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size // 2)


def test_the_index_takes_in_a_part_written_under_a_deleted_parts_name(built: tuple[Path, Path, Path]) -> None:
    store, _pdb, _msa = built
    shutil.rmtree(store / "parts" / "s-000002")
    # what verify --repair writes there: a part numbered after the highest one left
    write_structure_part(store, "s-000002", PartContents())
    rebuild_index(store)
    listed = featurecache.open_store(store).entries.select(["id", "part"]).to_pylist()
    assert "2q2k" not in [r["id"] for r in listed], listed  # before: the gone part's kept rows, by its name
    assert listed == index_tables(store, complete_parts(store))["entries"].select(["id", "part"]).to_pylist()


def test_repair_after_the_highest_part_is_deleted_removes_what_it_says(
    built: tuple[Path, Path, Path],
) -> None:
    store, pdb, msa = built
    _damage(store, "102m")
    shutil.rmtree(store / "parts" / "s-000002")  # 2q2k's part, the highest; its file is still there
    before = (store / "index" / "entries.arrow").read_bytes()
    r = _cli("verify", store, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "removed from the index: 102m (part s-000000)" in r.stdout, r.stdout
    assert "removed from the index: 2q2k (part s-000002): entry 2q2k: part s-000002 is missing" in r.stdout
    assert (store / "index" / "entries.arrow").read_bytes() != before
    assert featurecache.open_store(store).ids == ["1psm"]  # before: 102m still listed, 2q2k dropped unsaid
    assert f"featurecache build --pdb-dir {pdb} --msa-dir {msa} --out {store}" in r.stdout, r.stdout
    summary = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert (summary.n_built, summary.n_failed) == (2, 0)
    assert verify_store(store) == [] and featurecache.open_store(store).ids == IDS


def test_a_deleted_msa_part_is_rebuilt_from_the_recorded_msa_dir(built: tuple[Path, Path, Path]) -> None:
    store, pdb, msa = built
    keys = featurecache.open_store(store).msas.column("key").to_pylist()
    shutil.rmtree(store / "parts" / "m-000000")  # the only MSA part: its record of --msa-dir with it
    bad = _cli("verify", store)
    assert bad.returncode == 4 and "cannot be rebuilt" not in bad.stderr, bad.stderr
    r = _cli("verify", store, "--repair")
    assert r.returncode == 0, (
        r.stdout + r.stderr
    )  # before: 4, "MISMATCH kept MSA …: its source files are gone"
    assert "MISMATCH" not in r.stdout, r.stdout
    assert r.stdout.count("removed from the index: MSA") == len(keys), r.stdout
    assert f"featurecache build --pdb-dir {pdb} --msa-dir {msa} --out {store}" in r.stdout, r.stdout
    assert featurecache.open_store(store).msas.num_rows == 0  # before: the deleted part's rows, by its name
    summary = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert summary.n_failed == 0
    assert verify_store(store) == []
    assert sorted(featurecache.open_store(store).msas.column("key").to_pylist()) == sorted(keys)


def test_repair_keeps_an_entry_whose_part_and_file_are_gone(built: tuple[Path, Path, Path]) -> None:
    store, pdb, _msa = built
    _damage(store, "1psm")
    shutil.rmtree(store / "parts" / "s-000000")
    (pdb / "102m.cif").unlink()  # 102m: its part and its file are gone
    plain = _cli("verify", store)
    assert plain.returncode == 4
    # its advice does not offer a plain --repair for 1psm, which changes nothing here (it did, then
    # said so on the next line)
    assert f"`featurecache verify {store} --repair --drop-gone` (without --drop-gone it changes nothing" in (
        plain.stderr
    ), plain.stderr
    snapshot = store_snapshot(store)
    r = _cli("verify", store, "--repair")
    assert r.returncode == 4, r.stdout + r.stderr  # before: 0, 102m gone from the index with no word
    assert (
        f"MISMATCH kept 102m: part s-000000 is missing and its source files are gone ({pdb}/102m.cif)"
        in r.stdout
    )
    assert "nothing changed" in r.stdout and "--drop-gone" in r.stdout, r.stdout
    # the store as verify found it: every problem, as plain verify prints it
    assert [ln for ln in plain.stdout.splitlines() if ln.startswith("MISMATCH")] == [
        ln for ln in r.stdout.splitlines() if ln.startswith("MISMATCH") and not ln.startswith("MISMATCH kept")
    ]
    assert store_snapshot(store) == snapshot
    assert featurecache.open_store(store).ids == IDS
    dropped = _cli("verify", store, "--repair", "--drop-gone")
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    assert (
        "removed from the index: 102m" in dropped.stdout and "removed from the index: 1psm" in dropped.stdout
    )
    assert featurecache.open_store(store).ids == ["2q2k"]


def test_prune_refuses_while_the_index_lists_a_missing_part(built: tuple[Path, Path, Path]) -> None:
    store, pdb, _msa = built
    shutil.rmtree(store / "parts" / "s-000000")  # 102m's part is gone, its file is still there
    (pdb / "1psm.cif").unlink()  # 1psm's file is gone
    snapshot = store_snapshot(store)
    for dry_run in (["--dry-run"], []):
        r = _cli("prune", store, "--sources-gone", pdb, *dry_run)
        # before: exit 0 (the dry run named 1psm only), and the prune dropped 102m as well
        assert r.returncode == 3, r.stdout + r.stderr
        assert re.search(r"the index lists entry 102m of part\(s\) s-000000, which are missing", r.stderr), (
            r.stderr
        )
        assert store_snapshot(store) == snapshot
    assert featurecache.open_store(store).ids == IDS


def test_repair_with_nothing_it_can_fix_prints_every_mismatch(built: tuple[Path, Path, Path]) -> None:
    store, _pdb, _msa = built
    for n in range(3):  # parts the index has not taken in: a stale index, which a build fixes
        shutil.copytree(store / "parts" / f"s-00000{n}", store / "parts" / f"s-00000{n + 3}")
    plain = _cli("verify", store)
    mismatches = [ln for ln in plain.stdout.splitlines() if ln.startswith("MISMATCH")]
    assert plain.returncode == 4 and len(mismatches) > 3, plain.stdout
    r = _cli("verify", store, "--repair")
    assert r.returncode == 4, r.stdout + r.stderr
    # before: one line "nothing --repair can fix: a; b; c", no MISMATCH line
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("MISMATCH")] == mismatches, r.stdout
    assert f"nothing --repair can fix: the {len(mismatches)} MISMATCH lines above" in r.stdout


def test_a_build_records_the_entries_of_a_deleted_part_whose_files_are_gone(
    built: tuple[Path, Path, Path],
) -> None:
    store, pdb, msa = built
    shutil.rmtree(store / "parts" / "s-000000")  # 102m's part; its file goes too
    shutil.rmtree(store / "parts" / "s-000001")  # 1psm's part; its file is still there
    shutil.move(pdb / "102m.cif", store.parent / "102m.cif")
    # the CLI on the session's 1-worker cluster, in this process (tests/conftest.py): a Python and a
    # cluster start saved
    build = ["build", "--pdb-dir", pdb, "--msa-dir", msa, "--out", store, *scheduler_args(1), "--part-size", "1",
             "--no-progress"]  # fmt: skip
    r = cli_in_process(*map(str, build))
    assert r.returncode == 1, r.stdout + r.stderr  # before: 0, and 102m gone from the index with no word
    warned = " ".join(r.stderr.split())  # (the log lines are wrapped)
    assert "part s-000000 is missing (deleted): its entry 102m is in no file under --pdb-dir" in warned, (
        warned
    )
    assert "lost with deleted parts" in r.stdout, r.stdout
    s = featurecache.open_store(store)
    assert s.ids == ["1psm", "2q2k"]  # 1psm rebuilt from its file
    (removal,) = s.table("removed").to_pylist()
    assert (removal["kind"], removal["id"], removal["source_path"]) == ("entry", "102m", "102m.cif")
    assert "its part s-000000 is missing (deleted)" in removal["message"], removal
    info = _cli("info", store)
    assert info.returncode == 0 and re.search(r"removed\s+│ 1 entry, 0 MSAs", info.stdout), info.stdout
    assert verify_store(store) == []
    # recorded once: the next build has nothing to say
    again = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert (again.n_built, again.n_failed, again.entries_lost) == (0, 0, {})
    # the file back: stored again, the removal superseded
    shutil.move(store.parent / "102m.cif", pdb / "102m.cif")
    back = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert (back.n_built, back.n_failed, back.entries_lost) == (1, 0, {})
    s = featurecache.open_store(store)
    assert s.ids == IDS and s.table("removed").num_rows == 0
    assert verify_store(store) == []


def test_repair_says_what_it_dropped_with_deleted_parts_and_what_it_could_not_fix(
    built: tuple[Path, Path, Path],
) -> None:
    store, pdb, msa = built
    (pdb / "bad.cif").write_text("data_bad\n_cell.length_a 1\n")  # a failure row, in a part of its own
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 1
    s = featurecache.open_store(store)
    (failed,) = s.failures.select(["path", "part"]).to_pylist()
    components = dict(zip(s.components.column("key").to_pylist(), s.components.column("part").to_pylist(),
                          strict=True))  # fmt: skip
    dna = components["DA"]  # a component part holding 2q2k's DNA residues
    shutil.rmtree(store / "parts" / "s-000000")  # 102m's part (its file is there: taken out, rebuilt)
    shutil.rmtree(store / "parts" / failed["part"])
    shutil.rmtree(store / "parts" / dna)
    # damage --repair cannot fix
    manifest = store / "parts" / "m-000000" / "_index" / "part.json"
    kept = manifest.read_bytes()
    manifest.unlink()
    r = _cli("verify", store, "--repair")
    assert r.returncode == 4, r.stdout + r.stderr  # before: 0, saying only that 102m was removed
    assert "removed from the index: 102m (part s-000000)" in r.stdout, r.stdout
    gone = sorted(k for k, part in components.items() if part == dna)
    assert (f"dropped from the index with part {failed['part']}, which is missing: 1 failure (bad.cif); the next "
            "build tries each file again") in r.stdout, r.stdout  # fmt: skip
    assert (f"dropped from the index with part {dna}, which is missing: {len(gone)} components ({', '.join(gone)}); "
            "the next build's chem stage recomputes those its entries use") in r.stdout, r.stdout  # fmt: skip
    assert "MISMATCH part m-000000: no part.json (incomplete part)" in r.stdout, r.stdout
    assert "--repair could not fix the 1 MISMATCH line above" in r.stdout, r.stdout
    # until the build: verify says that components may be missing (before: "ok: store verified")
    assert "have not been scanned" in _cli("verify", store).stdout
    manifest.write_bytes(kept)
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 1
    s = featurecache.open_store(store)
    # before: 2q2k's DNA components (DA, DC, DG, 5IU) were never computed again
    assert sorted(s.components.column("key").to_pylist()) == sorted(components)
    assert s.failures.column("path").to_pylist() == ["bad.cif"] and s.ids == IDS
    assert verify_store(store) == []


def _conformers(store: Path) -> dict[str, tuple[object, ...]]:
    """Every stored component's conformer: key -> (strategy, atom names, and each array's bytes)."""
    table = featurecache.open_store(store).component_table()
    out: dict[str, tuple[object, ...]] = {}
    for key in table.keys:
        c = table.component(key)
        out[key] = (c["strategy"], tuple(c["atom_names"]),
                    *(c[f].tobytes() for f in ("ref_pos", "mask", "element", "charge")))  # fmt: skip
    return out


def test_a_build_computes_again_the_components_of_a_deleted_component_part(
    built: tuple[Path, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    store, pdb, msa = built
    before = _conformers(store)
    dna = dict(_component_rows(store))["DA"]  # the component part holding 2q2k's DNA residues
    gone = sorted(k for k, part in _component_rows(store) if part == dna)
    assert {"DA", "DC", "DG"} <= set(gone)
    shutil.rmtree(store / "parts" / dna)
    assert any(p.startswith("components: unreadable") for p in verify_store(store))
    with caplog.at_level("WARNING", logger="featurecache.build.run"):
        summary = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert (summary.n_built, summary.n_failed) == (0, 0)
    # before: those components never came back, verify said ok, 2q2k's DNA atoms had no reference
    assert sorted(_conformers(store)) == sorted(before)
    assert _conformers(store) == before  # byte for byte what the first build computed
    s = featurecache.open_store(store)
    assert s.reference_features(s.entry("2q2k"))["ref_mask"].all()
    warned = " ".join(caplog.text.split())
    assert (
        f"component part {dna} is missing (deleted): its {len(gone)} components ({', '.join(gone)})" in warned
    )
    assert verify_store(store) == []
    again = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)  # nothing more to do
    assert again.stages["chem"]["components (store / this run)"] == f"{len(before)} / 0"


def test_verify_names_residue_codes_the_index_has_no_component_of(built: tuple[Path, Path, Path]) -> None:
    """The state a build before the fix left (the deleted part's rows dropped by the index rebuild,
    every structure part scanned): verify finds it, --repair has the next build compute them."""
    store, pdb, msa = built
    before = _conformers(store)
    dna = dict(_component_rows(store))["DA"]  # the component part holding 2q2k's DNA residues
    gone = sorted(k for k, part in _component_rows(store) if part == dna)
    shutil.rmtree(store / "parts" / dna)
    rebuild_index(store)
    r = _cli("verify", store)
    assert r.returncode == 4, r.stdout + r.stderr  # before: 0, "ok: store verified"
    line = f"MISMATCH components: the index lists no component of residue code(s) {', '.join(gone)}, used by"
    (mismatch,) = [x for x in r.stdout.splitlines() if x.startswith(line)] or [r.stdout]
    assert "2q2k" in mismatch, r.stdout
    repair = _cli("verify", store, "--repair")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "until the build below: components: the index lists no component" in repair.stdout, repair.stdout
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 0
    assert _conformers(store) == before
    assert verify_store(store) == []


def _component_rows(store: Path) -> list[tuple[str, str]]:
    s = featurecache.open_store(store)
    return list(
        zip(s.components.column("key").to_pylist(), s.components.column("part").to_pylist(), strict=True)
    )
