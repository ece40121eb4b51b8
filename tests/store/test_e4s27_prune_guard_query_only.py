"""``featurecache prune STORE --sources-gone PDB --msa-dir DIR`` refuses a DIR that shows no sign
of holding the MSAs while MSAs were built from it (an unmounted MSA volume would otherwise lose
every stored MSA). A FASTA file whose records were only a stored chain's query (a monomer job's
input left in the mount point, one record) or that query twice (a homodimer's two chains) counted
as an alignment of that chain, so the guard let the prune through and every stored MSA of the
directory was removed (review RF2 s27 #1). A file counts only with a row beyond the query.

The guard also read a FASTA-named file whole to decide (a 97 MB FASTA database in the directory:
+410 MB of memory, review RF2 s27 #7); it now reads its first records only.

Real builds (1 worker) of the real 1psm and 2q2k structures with their real OpenFold MSA
directories copied from the shared corpus; the real CLI, run in this process (cli_in_process; the
memory measurement in a process of its own)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import featurecache
from tests.conftest import MSAS, STRUCTURES, CliRun, build_store, cli_in_process, store_snapshot

IDS = ["1psm", "2q2k"]
OPENFOLD = MSAS / "openfold"
PSM_HITS = OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m"


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (prune): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*map(str, args))


def _records(a3m: Path) -> list[tuple[str, str]]:
    """(header, sequence) of each record of a real a3m file (one sequence line each), read here."""
    lines = a3m.read_text().splitlines()
    assert len(lines) % 2 == 0 and all(h.startswith(">") for h in lines[::2])
    return list(zip(lines[::2], lines[1::2], strict=True))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(store, pdb, msa): 1psm and 2q2k, each with its real OpenFold a3m and MGnify files, then
    ``msa`` emptied (its files moved aside) as an unmounted mount point is."""
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(STRUCTURES / f"{entry}.cif", pdb)
        (msa / f"{entry}_A").mkdir(parents=True)
        for name in ("bfd_uniclust_hits.a3m", "mgnify_hits.sto"):
            shutil.copy(OPENFOLD / f"{entry}_A" / name, msa / f"{entry}_A")
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, msa_dir=msa, part_size=1).n_failed == 0
    n_files = sorted(featurecache.open_store(store).msas.column("n_files").to_pylist())
    assert n_files == [0, 2, 2], n_files  # 2q2k's DNA chains: the single-sequence MSA
    aside = tmp_path / "msa-away"
    aside.mkdir()
    for p in msa.iterdir():
        p.rename(aside / p.name)
    return store, pdb, msa


def _refused(store: Path, pdb: Path, msa: Path, name: str) -> str:
    """The prune (dry run and real) is refused, exit 2, the store unchanged; its stderr."""
    before = store_snapshot(store)
    for dry in (["--dry-run"], []):
        r = cli_in_process("prune", str(store), "--sources-gone", str(pdb), "--msa-dir", str(msa), *dry)
        assert r.returncode == 2, (dry, r.stdout + r.stderr)
        assert f"--msa-dir {msa}: no MSA file" in r.stderr and "not mounted?" in r.stderr, r.stderr
        assert f"{name}: only the query of a stored chain, no row beyond it" in r.stderr, r.stderr
        assert r.stdout == "" and store_snapshot(store) == before, dry
    return r.stderr


@pytest.mark.parametrize("layout", ["monomer", "homodimer"])
def test_a_stray_fasta_of_a_stored_query_does_not_disarm_the_guard(
    built: tuple[Path, Path, Path], layout: str
) -> None:
    store, pdb, msa = built
    psm = _records(PSM_HITS)[0][1]
    if layout == "monomer":  # a ColabFold / AF3 monomer job's input
        (msa / "queries.fasta").write_text(f">1psm\n{psm}\n")
    else:  # a homodimer's two chains: two records of one length, the same sequence
        (msa / "queries.fasta").write_text(f">job_A\n{psm}\n>job_B\n{psm}\n")
    err = _refused(store, pdb, msa, "queries.fasta")
    # how to go on when the directory really holds only query-only MSAs
    assert "run the prune without --msa-dir" in err and "an .a3m name" in err, err


def test_a_real_alignment_in_a_fasta_still_counts(built: tuple[Path, Path, Path]) -> None:
    """The real 1psm alignment (query and its hits) saved as ``.fasta``, its hits repeated past the
    MiB the guard reads: it counts, and the stored MSAs whose files are gone are removed."""
    store, pdb, msa = built
    records = _records(PSM_HITS)
    assert len(records) > 2 and records[1][1] != records[0][1]
    body = "".join(f"{h}\n{s}\n" for h, s in records[1:])
    copies = (2 << 20) // len(body) + 1  # over 2 MiB in all
    (msa / "1psm_A.fasta").write_text(f"{records[0][0]}\n{records[0][1]}\n" + body * copies)
    assert (msa / "1psm_A.fasta").stat().st_size > 2 << 20
    r = _cli("prune", store, "--sources-gone", pdb, "--msa-dir", msa)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"removed 2 MSAs whose files are gone from {msa}" in r.stdout, r.stdout + r.stderr


_PEAK = "import resource, runpy, sys; sys.argv = ['featurecache'] + sys.argv[1:]\ntry:\n    " \
        "runpy.run_module('featurecache.cli', run_name='__main__')\nfinally:\n    " \
        "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"  # fmt: skip


def _peak_kib(*args: str | Path) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-c", _PEAK, *map(str, args)], capture_output=True, text=True,
                       timeout=300, check=False)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    return int(r.stderr.rsplit("PEAK", 1)[1]), r.stderr


def test_a_large_fasta_database_is_not_read_whole(built: tuple[Path, Path, Path]) -> None:
    """A 128 MiB unaligned FASTA database (sequences of 1psm's query length + 1) is refused from its
    first records: the command's peak memory grows by far less than the file (it was read whole,
    and copied as it was scanned: over twice its size)."""
    store, pdb, msa = built
    base, err = _peak_kib("prune", store, "--sources-gone", pdb, "--msa-dir", msa, "--dry-run")  # empty
    assert "uniref_db.fasta" not in err and "not mounted?" in err, err
    psm = _records(PSM_HITS)[0][1]
    record = f">sp|X{{}}|DB\n{psm}A\n"
    chunk = "".join(record.format(i) for i in range(1000)).encode()
    with open(msa / "uniref_db.fasta", "wb") as fh:
        for _ in range((128 << 20) // len(chunk) + 1):
            fh.write(chunk)
    peak, err = _peak_kib("prune", store, "--sources-gone", pdb, "--msa-dir", msa, "--dry-run")
    assert "uniref_db.fasta: no alignment of a stored chain's sequence" in err, err
    assert peak - base < 64 << 10, (base, peak)  # KiB: under half the file
