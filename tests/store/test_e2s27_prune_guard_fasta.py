"""``featurecache prune STORE --sources-gone PDB --msa-dir DIR`` refuses a DIR holding no MSA file
while MSAs were built from it (an unmounted MSA volume would otherwise lose every stored MSA). A
``.fasta`` name counted as an MSA file whatever it held, so a stray ``queries.fasta`` (the input
of a ColabFold or AF3 run, left in the mount point) disarmed the guard and every stored MSA of the
directory was removed. A FASTA-named file now counts as the MSA stage would use it: the build's
own scan (``build.msa_stage._scan_one``) must read an alignment of a stored chain's sequence
from it. Sequences of different lengths are no alignment (the build's scan fails on them too, and
stores nothing from the file); a complex written as one ColabFold query ``A:B`` is no chain's
sequence; a real query-only MSA in a ``.fasta`` of one stored chain does not count either (no row
beyond the query: it could as well be a stray query, review RF2 s27 #1); named ``.a3m`` it counts,
and the build stores it as that chain's MSA.

Real builds (1 worker) of the real 1psm and 2q2k structures with their real OpenFold MSA
directories copied from the shared corpus; the real CLI, run in this process (cli_in_process)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import MSAS, STRUCTURES, CliRun, build_store, cli_in_process, store_snapshot

IDS = ["1psm", "2q2k"]
OPENFOLD = MSAS / "openfold"


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (prune): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*map(str, args))


def _query(a3m: Path) -> str:
    """The query (first record) of a real a3m file, read here by splitting lines."""
    lines = a3m.read_text().splitlines()
    assert lines[0].startswith(">")
    return lines[1].strip()


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(store, pdb, msa): 1psm and 2q2k, each with its real OpenFold a3m and MGnify files."""
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(STRUCTURES / f"{entry}.cif", pdb)
        (msa / f"{entry}_A").mkdir(parents=True)
        for name in ("bfd_uniclust_hits.a3m", "mgnify_hits.sto"):
            shutil.copy(OPENFOLD / f"{entry}_A" / name, msa / f"{entry}_A")
    store = tmp_path / "s"
    summary = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert summary.n_failed == 0 and featurecache.open_store(store).ids == IDS
    n_files = featurecache.open_store(store).msas.column("n_files").to_pylist()
    assert sorted(n_files) == [0, 2, 2], n_files  # 2q2k's DNA chains: the single-sequence MSA
    return store, pdb, msa


def _unmount(msa: Path, aside: Path) -> None:
    """``msa``'s contents moved to ``aside``: ``msa`` stays, empty, as a mount point does."""
    aside.mkdir()
    for p in msa.iterdir():
        p.rename(aside / p.name)


def _msa_keys(store: Path) -> list[str]:
    return sorted(featurecache.open_store(store).msas.column("key").to_pylist())


@pytest.mark.parametrize("layout", ["queries", "colabfold_complex"])
def test_a_stray_queries_fasta_does_not_disarm_the_guard(
    built: tuple[Path, Path, Path], tmp_path: Path, layout: str
) -> None:
    store, pdb, msa = built
    keys = _msa_keys(store)
    psm = _query(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m")
    q2k = _query(OPENFOLD / "2q2k_A" / "bfd_uniclust_hits.a3m")
    assert len(psm) != len(q2k)
    _unmount(msa, tmp_path / "msa-away")
    if layout == "queries":  # one record per chain to search, as colabfold_batch / AF3 inputs list them
        (msa / "queries.fasta").write_text(f">1psm_A\n{psm}\n>2q2k_A\n{q2k}\n")
    else:  # ColabFold's complex notation: one query, the chains joined by ':'
        (msa / "queries.fasta").write_text(f">complex\n{psm}:{q2k}\n")
    before = store_snapshot(store)
    for dry in (["--dry-run"], []):
        r = cli_in_process("prune", str(store), "--sources-gone", str(pdb), "--msa-dir", str(msa), *dry)
        assert r.returncode == 2, (dry, r.stdout + r.stderr)
        assert f"--msa-dir {msa}: no MSA file" in r.stderr and "not mounted?" in r.stderr, r.stderr
        assert "queries.fasta: " in r.stderr, r.stderr  # the file looked at, and why it is none
        assert r.stdout == "" and store_snapshot(store) == before, dry
    assert _msa_keys(store) == keys


def test_a_real_single_sequence_msa_in_a_fasta_is_refused_and_counts_named_a3m(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A query-only MSA (the real 1psm query record) named ``.fasta``: the guard refuses (a file
    with no row beyond a stored chain's query is no sign that the directory holds the MSAs) and
    says how to go on; named ``.a3m`` (a name of an MSA format) it lets the prune through (the
    stored MSAs' own files are gone: both are removed), and the next build stores it as 1psm's
    MSA, from that file."""
    store, pdb, msa = built
    psm_file = OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m"
    _unmount(msa, tmp_path / "msa-away")
    (msa / "1psm_A.fasta").write_text("\n".join(psm_file.read_text().splitlines()[:2]) + "\n")
    before = store_snapshot(store)
    r = cli_in_process("prune", str(store), "--sources-gone", str(pdb), "--msa-dir", str(msa))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "1psm_A.fasta: only the query of a stored chain, no row beyond it" in r.stderr, r.stderr
    assert "run the prune without --msa-dir" in r.stderr and "an .a3m name" in r.stderr, r.stderr
    assert r.stdout == "" and store_snapshot(store) == before
    (msa / "1psm_A.fasta").rename(msa / "1psm_A.a3m")
    r = _cli("prune", store, "--sources-gone", pdb, "--msa-dir", msa)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"removed 2 MSAs whose files are gone from {msa}" in r.stdout, r.stdout + r.stderr
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 0
    msas = featurecache.open_store(store).msas.to_pylist()
    from_file = [m for m in msas if any(s.split("#", 1)[0] == "1psm_A.a3m" for s in m["sources"])]
    assert len(from_file) == 1 and from_file[0]["n_files"] == 1, msas


def test_a_queries_fasta_gives_the_build_no_msa(built: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The guard and the build agree: from the queries file the guard refuses, a build stores no
    MSA (its chains keep theirs, or get the single-sequence MSA)."""
    _store, pdb, _msa = built
    psm = _query(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m")
    q2k = _query(OPENFOLD / "2q2k_A" / "bfd_uniclust_hits.a3m")
    only = tmp_path / "only-queries"
    only.mkdir()
    (only / "queries.fasta").write_text(f">1psm_A\n{psm}\n>2q2k_A\n{q2k}\n")
    fresh = tmp_path / "fresh"
    build_store(fresh, pdb, workers=1, msa_dir=only, part_size=1)
    msas = featurecache.open_store(fresh).msas.to_pylist()
    assert msas and all(m["n_files"] == 0 and not m["sources"] for m in msas), msas
