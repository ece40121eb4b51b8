"""Inputs that used to be lost or mislabelled, and damage that verify and the build must see.

Each case here was a reproduced defect: two files with one name silently became one entry (and
the chains index mixed them up), a re-run hid failures, verify passed a store with a missing
component part or a stale index, a damaged index crashed every command, and invalid arguments
gave tracebacks or exit 3 after writing a store.
"""

from __future__ import annotations

import gzip
import itertools
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rich.console import Console

import featurecache
from featurecache.build.config import BuildConfig
from featurecache.build.discover import assign_ids
from featurecache.build.run import run_build
from featurecache.build.summary import render_summary
from featurecache.errors import StoreError
from featurecache.store.index import complete_parts, read_table, replace_table
from featurecache.store.root import BuildLock
from featurecache.store.verify import verify_store
from tests.clusters import scheduler_args, shared_scheduler
from tests.conftest import REPO, SAMPLES, STRUCTURES, CliRun, build_store, cli_in_process, interrupt_inputs

#: the builds of the tests that follow 102m's SO4 and 2q2k's EPE as components keep these crystallization aids
KEEP_AIDS = BuildConfig(keep_crystallization_aids=True)


def _cli_in_process(*args: str) -> CliRun:
    """``featurecache ARGS`` (info, verify, show; a build on the session's cluster, which leaves no
    thread or process running): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*args, cwd=REPO)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` in a process of its own: a build (it starts a Dask cluster)."""
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600)  # fmt: skip


def test_assign_ids_follows_the_documented_rule() -> None:
    ids = assign_ids(
        ["7a4d-assembly1.cif.gz", "1A8O.cif", "1A8O.pdb", "a/x.pdb", "b/x.pdb", "q.cif", "q.cif.gz"]
    )
    assert ids == {
        "7a4d-assembly1.cif.gz": "7a4d-assembly1",  # a unique stem is the id
        "1A8O.cif": "1A8O.cif", "1A8O.pdb": "1A8O.pdb",  # same stem: the file names
        "a/x.pdb": "a__x.pdb", "b/x.pdb": "b__x.pdb",  # same name: the paths
        "q.cif": "q.cif", "q.cif.gz": "q.cif.gz",  # differ only by .gz: the one without keeps its name
    }  # fmt: skip
    # an input the store already holds keeps its id; a newcomer that would take it moves on
    assert assign_ids(["1A8O.cif", "1A8O.pdb"], {"1A8O": "1A8O.pdb"}) == {
        "1A8O.pdb": "1A8O",
        "1A8O.cif": "1A8O.cif",
    }
    assert assign_ids(["d/x.pdb"], {"x": "x.pdb"}) == {"d/x.pdb": "x.pdb"}
    # whatever the names, ids are unique
    rels = ["a__b.cif", "a/b.cif", "b.cif", "b.cif.gz", "a/b.cif.gz", "x.pdb.cif", "x.pdb", "x.cif"]
    assert len(set(assign_ids(rels).values())) == len(rels)


def test_a_resumed_build_gives_the_ids_of_an_uninterrupted_one() -> None:
    """A build killed after some parts were written stores the fresh ids of those inputs; the
    resumed build must give the others the ids the uninterrupted build would have given them
    (it gave ``1A8O.pdb`` the id ``1A8O`` when only ``1A8O.cif`` had been stored, so the same
    inputs made different stores depending on when the kill came). Every subset of inputs as
    the stored part, over names that collide by stem, by name and by .gz."""
    rels = ["1A8O.cif", "1A8O.pdb", "a/x.pdb", "b/x.pdb", "x.cif", "q.cif", "q.cif.gz", "7a4d.cif.gz"]
    fresh = assign_ids(rels)
    for k in range(1, len(rels)):
        for stored in itertools.combinations(rels, k):
            existing = {fresh[rel]: rel for rel in stored}
            assert assign_ids(rels, existing) == fresh, stored


def test_same_named_inputs_are_all_kept_and_ids_stay_stable(tmp_path: Path) -> None:
    d = tmp_path / "in"
    (d / "a").mkdir(parents=True)
    (d / "b").mkdir()
    shutil.copy(STRUCTURES / "5e5z.pdb", d / "a" / "x.pdb")
    shutil.copy(STRUCTURES / "5wkd.pdb", d / "b" / "x.pdb")
    shutil.copy(STRUCTURES / "1psm.cif", d / "a" / "y.cif")
    (d / "b" / "y.cif.gz").write_bytes(gzip.compress((STRUCTURES / "102m.cif").read_bytes()))
    shutil.copy(STRUCTURES / "1A8O.pdb", d / "1A8O.pdb")
    out = d / "store"  # inside the input directory: the build must not read its own files
    first = build_store(out, d, workers=1, part_size=2)
    assert first.n_built == 5 and first.n_failed == 0
    store = featurecache.open_store(out)
    sources = dict(zip(store.entries.column("id").to_pylist(), store.entries.column("source_path").to_pylist(),
                       strict=True))  # fmt: skip
    assert sources == {"a__x.pdb": "a/x.pdb", "b__x.pdb": "b/x.pdb", "a__y.cif": "a/y.cif",
                       "b__y.cif": "b/y.cif.gz", "1A8O": "1A8O.pdb"}  # fmt: skip
    # each entry's chain rows are its own: 102m has 2 chains (myoglobin, heme; its sulfate is a crystallization
    # aid, removed), 1psm 1
    n_chains = dict(zip(store.entries.column("id").to_pylist(), store.entries.column("n_chains").to_pylist(),
                        strict=True))  # fmt: skip
    assert n_chains["b__y.cif"] == 2 and n_chains["a__y.cif"] == 1
    assert verify_store(out) == []

    # a file with the same stem arrives later: the stored entry keeps its id and is not rebuilt
    shutil.copy(STRUCTURES / "1A8O.cif", d / "1A8O.cif")
    again = build_store(out, d, workers=1, part_size=2)
    assert again.n_built == 1 and again.n_skipped == 5 and again.n_failed == 0
    store = featurecache.open_store(out)
    ids = store.entries.column("id").to_pylist()
    assert sorted(ids) == sorted([*sources, "1A8O.cif"])
    assert len(set(store.entries.column("source_path").to_pylist())) == len(ids)  # no file twice
    assert not any(p.startswith("store/") for p in store.failures.column("path").to_pylist())
    assert verify_store(out) == []


def test_rerun_still_reports_failed_inputs(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", d)
    (d / "garbage.cif").write_text("this is not an mmCIF file\n")
    (d / "gone.cif").symlink_to(tmp_path / "missing.cif")  # a broken link: an input listed as failed, unread
    out = tmp_path / "s"
    args = ("build", "--pdb-dir", str(d), "--out", str(out), "--workers", "1", "--no-progress")
    # the first build on the session's 1-worker cluster, by the CLI in this process (only its exit
    # status and the store are checked); the second, whose stderr is checked for tracebacks, on an
    # embedded one as a user's, in a process of its own
    first = _cli_in_process(
        "build", "--pdb-dir", str(d), "--out", str(out), *scheduler_args(1), "--no-progress"
    )
    assert first.returncode == 1, first.stderr
    store = featurecache.open_store(out)
    failed = dict(zip(store.failures.column("path").to_pylist(), store.failures.column("stage").to_pylist(),
                      strict=True))  # fmt: skip
    assert failed.keys() == {"garbage.cif", "gone.cif"} and failed["gone.cif"] == "discover"
    second = _cli(*args)  # nothing to rebuild, but two inputs still fail: not a clean exit
    assert second.returncode == 1, second.stderr
    # the summary table (the build's result) is on stdout
    assert "still failing" in second.stdout, second.stdout
    assert "Traceback" not in second.stderr, second.stderr


def test_a_symlink_loop_is_a_failed_input_not_a_crash(tmp_path: Path) -> None:
    """Two links pointing at each other under --pdb-dir, with the store inside it (the path that
    resolves every input to skip the store's own files): each link is an input that fails to read;
    the build ran into ``RuntimeError: Symlink loop`` before."""
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", d)
    (d / "a.cif").symlink_to("b.cif")
    (d / "b.cif").symlink_to("a.cif")
    out = d / "store"
    # on the session's 1-worker cluster, by the CLI in this process: the links are met by the
    # driver's discovery and the worker's read, not by the embedded cluster's start or shutdown
    r = _cli_in_process("build", "--pdb-dir", str(d), "--out", str(out), *scheduler_args(1), "--no-progress")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    store = featurecache.open_store(out)
    assert store.ids == ["1psm"]
    failed = dict(zip(store.failures.column("path").to_pylist(), store.failures.column("stage").to_pylist(),
                      strict=True))  # fmt: skip
    assert failed == {"a.cif": "read", "b.cif": "read"}


@pytest.fixture(scope="module")
def ligand_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """102m (3 chains, heme) and 1psm with the sample CCD: structure and component parts."""
    d = tmp_path_factory.mktemp("lig_in")
    shutil.copy(STRUCTURES / "102m.cif", d)
    shutil.copy(STRUCTURES / "1psm.cif", d)
    out = tmp_path_factory.mktemp("lig") / "s"
    build_store(out, d, workers=1, ccd=SAMPLES / "ccd")
    assert verify_store(out) == []
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_verify_sees_a_missing_component_part(tmp_path: Path, ligand_store: Path) -> None:
    s = _copy(ligand_store, tmp_path / "s")
    comp = [p for p in complete_parts(s) if p.name.startswith("c-")]
    assert comp, "the CCD build should have written component parts"
    shutil.rmtree(comp[0])
    problems = verify_store(s)
    assert any(p.startswith("components:") and comp[0].name in p for p in problems), problems


def test_verify_sees_a_stale_index_and_chains_that_do_not_tile(tmp_path: Path, ligand_store: Path) -> None:
    s = _copy(ligand_store, tmp_path / "stale")
    entries = read_table(s / "index" / "entries.arrow", memory_map=False)
    keep = pa.array([i != "1psm" for i in entries.column("id").to_pylist()])
    replace_table(s / "index" / "entries.arrow", entries.filter(keep))  # as if the index lagged behind
    assert any("entry 1psm of part" in p and "stale index" in p for p in verify_store(s))

    c = _copy(ligand_store, tmp_path / "chains")
    chains = read_table(c / "index" / "chains.arrow", memory_map=False)
    rows = chains.to_pylist()
    drop = next(i for i, r in enumerate(rows) if r["entry_id"] == "102m" and r["asym_id"] == 1)
    replace_table(c / "index" / "chains.arrow", chains.take([i for i in range(len(rows)) if i != drop]))
    assert any(p.startswith("entry 102m: 1 chain rows") for p in verify_store(c)), verify_store(c)


def test_a_damaged_index_is_one_line_and_the_build_repairs_it(tmp_path: Path, ligand_store: Path) -> None:
    s = _copy(ligand_store, tmp_path / "s")
    f = s / "index" / "entries.arrow"
    f.write_bytes(f.read_bytes()[:500])
    for cmd in (("info", str(s)), ("verify", str(s)), ("show", str(s), "102m")):
        r = _cli_in_process(*cmd)
        assert r.returncode == 3 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert "entries.arrow is unreadable" in r.stderr
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", d)
    shutil.copy(STRUCTURES / "1psm.cif", d)
    summary = build_store(s, d, workers=1, ccd=SAMPLES / "ccd")
    assert summary.n_built == 0 and summary.n_skipped == 2  # repaired from the parts, nothing redone
    assert verify_store(s) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--workers", "-1"), "workers (--workers) must be ≥ 1"),
        (("--msa-depth", "0"), "msa_depth_cap (--msa-depth) must be ≥ 1"),
        (("--part-size", "0"), "part_size (--part-size) must be ≥ 1"),
        # past RDKit's unsigned 32-bit seconds every embedding raised OverflowError (exit 0, all failed)
        (
            ("--conformer-timeout", "inf"),
            "conformer_timeout_s (--conformer-timeout) must be > 0 and ≤ 4294967295",
        ),
        (
            ("--conformer-timeout", "1e10"),
            "conformer_timeout_s (--conformer-timeout) must be > 0 and ≤ 4294967295",
        ),
        (("--conformer-timeout", "nan"), "conformer_timeout_s (--conformer-timeout) must be > 0"),
        (("--scheduler", "notaurl"), "is not a Dask scheduler address"),
    ],
)
def test_invalid_arguments_exit_2_and_write_nothing(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    out = tmp_path / "never"
    r = cli_in_process("build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(out), *args, "--no-progress",
                       cwd=REPO)  # fmt: skip
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


def test_a_missing_input_directory_is_a_usage_error(tmp_path: Path) -> None:
    r = cli_in_process("build", "--pdb-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "s"), "--no-progress",
                       cwd=REPO)  # fmt: skip
    assert r.returncode == 2 and "does not exist" in r.stderr and not (tmp_path / "s").exists(), r.stderr


def test_a_refused_concurrent_build_changes_nothing(tmp_path: Path, ligand_store: Path) -> None:
    s = _copy(ligand_store, tmp_path / "s")
    before = (s / "zarr.json").read_bytes()
    with BuildLock(s), pytest.raises(StoreError, match="another build is writing"):
        # (its recorded CCD given: a setting left out is refused before the lock is asked for)
        run_build(pdb_dir=SAMPLES / "structures", out=s, scheduler=shared_scheduler(1), progress=False,
                  ccd=SAMPLES / "ccd", config=BuildConfig(msa_depth_cap=7))  # fmt: skip
    assert (s / "zarr.json").read_bytes() == before


def test_a_ccd_without_definitions_is_refused_before_the_build(tmp_path: Path) -> None:
    bad = tmp_path / "components.cif"
    bad.write_text("garbage\n")
    out = tmp_path / "s"
    r = cli_in_process(
        "build", "--pdb-dir", str(SAMPLES / "structures"), "--ccd", str(bad), "--out", str(out), "--no-progress",
        cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 2 and str(bad) in r.stderr and "no chemical component definitions" in r.stderr, (
        r.stderr
    )
    assert not out.exists()


@contextmanager
def _sigint(handler: Any) -> Iterator[None]:
    """This session's SIGINT handler meanwhile. A child starts with a handled SIGINT at its default,
    an ignored one ignored (an ignored signal stays ignored across fork and exec)."""
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_after_four_parts(tmp_path: Path, sig: int) -> tuple[int, str, Path, Path, int]:
    """Start a real 2-worker CLI build (one input per part) as its own process group, send ``sig`` to
    the group once 4 structure parts are committed; (exit status, stderr, store, inputs, inputs count)."""
    import os
    import time

    inputs = interrupt_inputs(tmp_path / "in")
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(inputs), "--out", str(out),
           "--workers", "2", "--part-size", "1", "--no-progress"]  # fmt: skip
    n_inputs = sum(1 for p in inputs.rglob("*") if p.is_file() and not p.name.startswith("."))
    with _sigint(signal.SIG_IGN), _sigint(signal.default_int_handler):  # see the Ctrl-C test's docstring
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _structure_parts(out) < 4:
            assert proc.poll() is None, f"the build ended before its 4th part (exit {proc.returncode})"
            assert time.monotonic() < deadline, "4 structure parts not committed within 120 s"
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err, out, inputs, n_inputs


def _structure_parts(out: Path) -> int:
    from featurecache.store.layout import STRUCTURE_PART_PREFIX

    return sum(1 for p in complete_parts(out) if p.name.startswith(STRUCTURE_PART_PREFIX))


def _rerun_resumes(out: Path, inputs: Path, n_inputs: int) -> None:
    """The interrupted build kept 4 or more parts but not all; the re-run skips those, builds the
    rest, and the store verifies."""
    kept = _structure_parts(out)
    assert 4 <= kept < n_inputs, kept
    summary = build_store(out, inputs, workers=2, part_size=1)
    assert summary.n_inputs == n_inputs and kept <= summary.n_skipped < n_inputs, summary
    assert verify_store(out) == []


@pytest.mark.timeout(300)
def test_ctrl_c_stops_cleanly_and_the_rerun_resumes(tmp_path: Path) -> None:
    """SIGINT to the whole process group (what a terminal's Ctrl-C sends), once 4 structure parts
    are committed (one input per part: 20 of the 24 inputs still to come): one line, exit 130, no
    worker's KeyboardInterrupt traceback; the re-run skips what was kept, builds the rest, and the
    store verifies.

    The build starts as a terminal's foreground job does, with SIGINT at its default, whatever this
    session has: here it is first ignored, as in a session started in the background (``pytest &``,
    nohup). A build started from such a session inherited SIGINT ignored, rightly ignored the
    interrupt and ran to its end (exit 1, its failed inputs): the test failed in a loaded full run."""
    code, err, out, inputs, n_inputs = _interrupt_after_four_parts(tmp_path, signal.SIGINT)
    assert code == 130, f"the interrupt should stop the build (exit {code}): {err}"
    # (a worker's heartbeat may still log the scheduler going away: distributed's shutdown race)
    assert "interrupted: every finished part" in err and "KeyboardInterrupt" not in err, err
    _rerun_resumes(out, inputs, n_inputs)


@pytest.mark.timeout(300)
def test_sigterm_stops_like_ctrl_c_and_the_rerun_resumes(tmp_path: Path) -> None:
    """SIGTERM to the whole process group (what ``timeout`` and Slurm send; Kubernetes sends it to
    the driver), once 4 structure parts are committed: as Ctrl-C, the one "interrupted" line, last,
    nothing of Dask's shutdown, the finished parts kept, but exit status 143 (README). Before, the
    build died of the signal at once, silently (the workers with it). The re-run skips what was
    kept, builds the rest, and the store verifies."""
    from tests.build.test_ctrl_c_quiet import INTERRUPTED, noise_lines

    code, err, out, inputs, n_inputs = _interrupt_after_four_parts(tmp_path, signal.SIGTERM)
    assert code == 143, f"SIGTERM should stop the build with 143 (exit {code}): {err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(INTERRUPTED), err
    assert noise_lines(lines) == [], err
    _rerun_resumes(out, inputs, n_inputs)


def _gemmi_inputs(paths: list[Path]) -> tuple[set[str], set[str]]:
    """What gemmi reads in the input files: every residue name (model and entity sequences,
    waters aside; MSE becomes MET as the tokenizer makes it) and the polymer entity sequences
    as ``protein:SEQ`` / ``dna:SEQ`` (one-letter codes)."""
    import gemmi

    names: set[str] = set()
    sequences: set[str] = set()
    for path in paths:
        st = gemmi.read_structure(str(path))
        st.setup_entities()
        names.update(r.name for ch in st[0] for r in ch)
        for ent in st.entities:
            names.update(gemmi.Entity.first_mon(m) for m in ent.full_sequence)
            if ent.entity_type == gemmi.EntityType.Polymer:
                kind = "dna" if ent.polymer_type == gemmi.PolymerType.Dna else "protein"
                sequences.add(f"{kind}:{gemmi.one_letter_code(ent.full_sequence)}")
    names -= {"HOH", "DOD"}
    return {"MET" if n == "MSE" else n for n in names}, sequences


def test_an_input_replaced_by_another_structure_leaves_no_orphan_index_rows(tmp_path: Path) -> None:
    """102m.cif is replaced by another structure (2q2k's bytes, other sequences and ligands): the
    top-level msas and components tables list only what a live entry uses (the myoglobin MSA,
    HEM, SO4 and TRP stayed listed before), the index is still the one a full rebuild gives, and
    a changed CCD definition leaves one component row, the recomputed one."""
    from featurecache.featurize.seqhash import sequence_hash
    from featurecache.store.components import component_rows_in_parts
    from tests.build.test_index_incremental import _full_rebuild, _index_files

    inputs, out = tmp_path / "in", tmp_path / "s"
    inputs.mkdir()
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    ccd = tmp_path / "ccd"
    shutil.copytree(SAMPLES / "ccd", ccd)
    build_store(out, inputs, workers=1, msa_dir=SAMPLES / "msas", ccd=ccd, config=KEEP_AIDS)
    names, _ = _gemmi_inputs(sorted(inputs.iterdir()))
    myoglobin = sequence_hash(_gemmi_inputs([inputs / "102m.cif"])[1].pop().split(":", 1)[1], 0)
    first = featurecache.open_store(out)
    assert myoglobin in first.msas.column("key").to_pylist()
    assert {"HEM", "SO4"} <= set(first.components.column("code").to_pylist()) == names

    shutil.copy(SAMPLES / "structures" / "2q2k.cif", inputs / "102m.cif")  # same path and id
    summary = build_store(out, inputs, workers=1, msa_dir=SAMPLES / "msas", ccd=ccd, config=KEEP_AIDS)
    assert summary.n_built == 1 and summary.n_skipped == 1
    names, sequences = _gemmi_inputs(sorted(inputs.iterdir()))
    assert "HEM" not in names and "SO4" not in names
    store = featurecache.open_store(out)
    msa_keys = store.msas.column("key").to_pylist()
    assert myoglobin not in msa_keys
    assert len(msa_keys) == len(set(msa_keys)) == len(sequences) == 3
    chains = store.chains.to_pylist()
    assert set(msa_keys) == {c["sequence_hash"] for c in chains if c["mol_type"] != 3}
    codes = store.components.column("code").to_pylist()
    assert sorted(codes) == sorted(names)  # one row per code, each a residue of a live input
    assert _index_files(out) == _full_rebuild(out, tmp_path / "full")
    assert verify_store(out) == []
    # the orphaned MSA and components are not deleted (their parts hold live rows too)
    assert myoglobin in {r["key"] for p in complete_parts(out) if p.name.startswith("m-")
                         for r in read_table(p / "_index" / "msas.arrow").to_pylist()}  # fmt: skip

    # EPE's definition changes (a CCD update): recomputed into a new component part, which alone
    # is listed
    new_ccd = Path(shutil.copytree(ccd, tmp_path / "ccd-update"))
    epe = new_ccd / "EPE.cif"
    epe.write_text(epe.read_text().replace("2024-09-27", "2025-01-31", 1))
    build_store(out, inputs, workers=1, msa_dir=SAMPLES / "msas", ccd=new_ccd, config=KEEP_AIDS)
    in_parts = component_rows_in_parts(out).to_pylist()
    epe_parts = sorted(r["part"] for r in in_parts if r["key"] == "EPE")
    assert len(epe_parts) == 2
    components = featurecache.open_store(out).components.to_pylist()
    assert [r["part"] for r in components if r["key"] == "EPE"] == [epe_parts[-1]]
    assert sorted(r["key"] for r in components) == sorted(names)
    assert _index_files(out) == _full_rebuild(out, tmp_path / "full-2")
    assert verify_store(out) == []
    # the rows kept for the next build's incremental index are written zstd-compressed
    kept = {f.name: f.stat().st_size for f in (out / "index" / ".part-rows").glob("*.arrow")}
    plain = tmp_path / "plain.arrow"
    replace_table(plain, read_table(out / "index" / ".part-rows" / "chains.arrow", memory_map=False))
    assert kept["chains.arrow"] < plain.stat().st_size, (kept, plain.stat().st_size)


def test_a_ccd_edited_in_place_is_read_again_by_the_next_build_of_the_same_process(tmp_path: Path) -> None:
    """The CCD is parsed once per path and process; EPE.cif edited in place (same path) between
    two builds run by one process must give a recomputed EPE component, as a new path does
    (the driver kept the old definition: the component was not recomputed, while the CCD's new
    fingerprint rebuilt the entry)."""
    from featurecache.store.components import component_rows_in_parts

    inputs, out, ccd = tmp_path / "in", tmp_path / "s", tmp_path / "ccd"
    inputs.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", inputs / "2q2k.cif")  # holds EPE
    shutil.copytree(SAMPLES / "ccd", ccd)
    build_store(out, inputs, workers=1, ccd=ccd, config=KEEP_AIDS)
    before = [r["part"] for r in component_rows_in_parts(out).to_pylist() if r["key"] == "EPE"]
    assert len(before) == 1
    epe = ccd / "EPE.cif"
    text = epe.read_text()
    assert "2024-09-27" in text
    epe.write_text(text.replace("2024-09-27", "2025-01-31", 1))  # a new revision of the definition
    summary = build_store(out, inputs, workers=1, ccd=ccd, config=KEEP_AIDS)
    assert summary.n_rebuilt == 1  # the CCD's fingerprint changed: the entry is rebuilt
    after = sorted(r["part"] for r in component_rows_in_parts(out).to_pylist() if r["key"] == "EPE")
    assert len(after) == 2 and after[0] == before[0]  # recomputed into a new part
    listed = [r["part"] for r in featurecache.open_store(out).components.to_pylist() if r["key"] == "EPE"]
    assert listed == [after[-1]]
    assert verify_store(out) == []


def test_an_input_put_back_to_its_earlier_version_is_served_again(tmp_path: Path) -> None:
    """102m.cif is replaced by other bytes (1psm's), then put back: the store must serve 102m's
    structure again. Its key was still held by the first, superseded part, and the build skipped
    it as done, so the store went on serving the replacement. Checked against gemmi's reading."""
    import gemmi

    inputs, out = tmp_path / "in", tmp_path / "s"
    inputs.mkdir()
    original = SAMPLES / "structures" / "102m.cif"
    shutil.copy(original, inputs / "102m.cif")
    build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd")
    shutil.copy(SAMPLES / "structures" / "1psm.cif", inputs / "102m.cif")
    assert build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd").n_replaced == 1
    shutil.copy(original, inputs / "102m.cif")
    summary = build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd")
    assert summary.n_replaced == 1 and summary.n_skipped == 0
    st = gemmi.read_structure(str(original))
    first_chain = st[0][0].get_polymer()
    expected = gemmi.one_letter_code([r.name for r in first_chain])
    chains = featurecache.open_store(out).chains.to_pylist()
    assert any(c["sequence"] == expected for c in chains), [c["sequence"] for c in chains]
    row = featurecache.open_store(out).entries.to_pylist()[0]
    import hashlib

    assert row["source_sha256"] == hashlib.sha256(original.read_bytes()).hexdigest()
    # a fourth build with nothing changed builds nothing
    assert build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd").n_skipped == 1
    assert verify_store(out) == []


def test_an_input_whose_new_content_fails_is_not_counted_as_replaced(tmp_path: Path) -> None:
    """2q2k.cif cut to its first 3000 bytes after a build: this run fails it and the store keeps
    serving the entry built before. The summary said "entries built 0 / replaced 1" (it counted the
    inputs it was about to build, not the entries it built); now "entry kept 1"."""
    inputs, out = tmp_path / "in", tmp_path / "s"
    inputs.mkdir()
    for name in ("102m.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd")
    before = featurecache.open_store(out).entry_meta("2q2k")["source_sha256"]
    (inputs / "2q2k.cif").write_bytes((SAMPLES / "structures" / "2q2k.cif").read_bytes()[:3000])
    summary = build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd")
    assert (summary.n_built, summary.n_failed, summary.n_replaced, summary.n_kept) == (0, 1, 0, 1)
    assert featurecache.open_store(out).entry_meta("2q2k")["source_sha256"] == before
    console = Console(record=True, width=200)
    render_summary(summary, console)
    text = console.export_text()
    assert "replaced" not in text and "entry kept" in text and "still served" in text, text


def test_a_part_deleted_by_hand_keeps_its_number_so_the_new_parts_components_are_computed(
    tmp_path: Path,
) -> None:
    """1psm's part (the highest) deleted by hand, then a build with 2q2k's bytes added: its part was
    written under the deleted one's name, which the chem stage had recorded as scanned, so its
    ligand EPE never got a component (its atoms silently without a reference conformer)."""
    inputs, out = tmp_path / "in", tmp_path / "s"
    inputs.mkdir()
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd", part_size=1, config=KEEP_AIDS)
    parts = sorted(p.name for p in (out / "parts").iterdir() if p.name.startswith("s-"))
    assert parts == ["s-000000", "s-000001"]
    shutil.rmtree(out / "parts" / parts[-1])
    # 2q2k's bytes as 1abc.cif: built before 1psm (inputs go in path order), into the first new part
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", inputs / "1abc.cif")
    build_store(out, inputs, workers=1, ccd=SAMPLES / "ccd", part_size=1, config=KEEP_AIDS)
    new = sorted(p.name for p in (out / "parts").iterdir() if p.name.startswith("s-"))
    assert "s-000001" not in new, new
    keys = {r["key"] for r in featurecache.open_store(out).components.to_pylist()}
    assert "EPE" in keys, sorted(keys)
    assert verify_store(out) == []
