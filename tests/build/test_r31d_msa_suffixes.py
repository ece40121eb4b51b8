"""Review R31d s47 #2: the build's places that read an MSA file's name agree on which names are
MSA names (``parse.hits.MSA_NAME_SUFFIXES``, the one list).

Before, three lists disagreed: ``discover`` (which files under ``--pdb-dir`` are the MSA stage's)
took ``.a3m .sto .hhr .m8``, ``prune``'s "not mounted?" guard also ``.stockholm``. A real
Stockholm MSA named ``uniref90_hits.stockholm`` under a ``--msa-dir`` inside ``--pdb-dir`` was
read by the MSA stage and also listed as a failed structure input: the build exited 1.

One real build (1 worker) of 1psm with its real OpenFold MSAs in the data directory, one of them
renamed ``.stockholm``; then the real CLI's ``prune --sources-gone --dry-run`` in this process
(tests/conftest.py's cli_in_process), once per file name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.build.discover import msa_file_name
from featurecache.build.run import BuildSummary
from featurecache.parse.hits import sniff_msa_format
from tests.conftest import MSAS, SAMPLES, STRUCTURES, build_store, cli_in_process, store_snapshot

OPENFOLD = MSAS / "openfold" / "1psm_A"
#: names of every kind the lists held (each list's suffixes, other cases, gzipped) and decoys
NAMES = [
    "x.a3m", "x.sto", "x.stockholm", "x.hhr", "x.m8", "X.STOCKHOLM.GZ", "x.Sto.gz", "x.fasta",
    "x.fa", "x.aln", "x.stockholm.txt", "notes.a3m.txt", "x.txt",
]  # fmt: skip
#: a file of no MSA format by content (not Stockholm, FASTA or a hit table): only its name can count
NO_FORMAT = "these are not the MSAs\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, BuildSummary]:
    """(store, data, data/msas, the build's summary) of the review's repro, built."""
    tmp = tmp_path_factory.mktemp("r31d_suffixes")
    data = tmp / "data"
    msas = data / "msas"
    (msas / "1psm_A").mkdir(parents=True)
    shutil.copy(STRUCTURES / "1psm.cif", data)
    shutil.copy(OPENFOLD / "uniref90_hits.sto", msas / "1psm_A" / "uniref90_hits.stockholm")
    shutil.copy(OPENFOLD / "mgnify_hits.sto", msas / "1psm_A")
    store = tmp / "store"
    summary = build_store(store, data, workers=1, msa_dir=msas, ccd=SAMPLES / "ccd")
    return store, data, msas, summary


def test_a_stockholm_named_msa_inside_the_pdb_dir_is_the_msa_stages_only(
    built: tuple[Path, Path, Path, BuildSummary],
) -> None:
    store, _data, _msas, summary = built
    failures = featurecache.open_store(store).failures.to_pylist()
    # before: msas/1psm_A/uniref90_hits.stockholm | read | UnsupportedFormatError, exit status 1
    assert failures == [], failures
    assert summary.n_failed == 0 and summary.n_failed_earlier == 0
    assert summary.n_inputs == 1 and featurecache.open_store(store).ids == ["1psm"]
    msa = summary.stages["msa"]
    assert msa["MSA files failed"] == 0, msa
    sources = {s for row in featurecache.open_store(store).msas.to_pylist() for s in row["sources"]}
    assert "1psm_A/uniref90_hits.stockholm" in {s.split("#", 1)[0] for s in sources}, sources


@pytest.mark.parametrize("name", NAMES)
def test_discover_sniffing_and_the_prune_guard_read_a_name_alike(
    built: tuple[Path, Path, Path, BuildSummary], tmp_path: Path, name: str
) -> None:
    """For a file whose content says nothing: discover takes it for the MSA stage's exactly when the
    MSA stage's sniffing takes its name for a format, and when prune's guard counts it as a sign
    that ``--msa-dir`` holds the MSAs (it lets the prune through instead of refusing, exit 2)."""
    store, data, msas, _summary = built
    aside = tmp_path / "aside"
    shutil.copytree(msas, aside)
    shutil.rmtree(msas)
    msas.mkdir()
    try:
        (msas / name).write_text(NO_FORMAT)
        before = store_snapshot(store)
        r = cli_in_process(
            "prune", str(store), "--sources-gone", str(data), "--msa-dir", str(msas), "--dry-run"
        )
        assert store_snapshot(store) == before
        assert r.returncode in (0, 2), r.stdout + r.stderr
        guard_counts = r.returncode == 0
        if not guard_counts:
            assert f"--msa-dir {msas}: no MSA file" in r.stderr, r.stderr
        by_name = msa_file_name(name)
        sniffed = sniff_msa_format(NO_FORMAT, name) != "unknown"
        assert (by_name, sniffed, guard_counts) in ((True, True, True), (False, False, False)), (
            f"{name}: discover {by_name}, sniffing {sniffed}, prune's guard {guard_counts}"
        )
    finally:
        shutil.rmtree(msas)
        shutil.copytree(aside, msas)


def test_an_aligned_fasta_named_msa_inside_the_pdb_dir_is_the_msa_stages_only(tmp_path: Path) -> None:
    """The MSA stage reads every file under --msa-dir and its content decides (a ``>`` line: a3m), so
    a real alignment named ``.fasta`` there is one of its inputs; discover decided by name only and
    listed it as a failed structure input as well (exit 1). A non-MSA text file there stays a
    structure failure, as with separate directories."""
    data = tmp_path / "data"
    msas = data / "msas"
    (msas / "1psm_A").mkdir(parents=True)
    shutil.copy(STRUCTURES / "1psm.cif", data)
    shutil.copy(OPENFOLD / "bfd_uniclust_hits.a3m", msas / "1psm_A" / "bfd_uniclust_hits.fasta")
    (msas / "notes.txt").write_text(NO_FORMAT)
    store = tmp_path / "store"
    summary = build_store(store, data, workers=1, msa_dir=msas, ccd=SAMPLES / "ccd")
    failures = featurecache.open_store(store).failures.to_pylist()
    assert [f["path"] for f in failures] == ["msas/notes.txt"], failures
    assert summary.n_failed == 1
    sources = {s for row in featurecache.open_store(store).msas.to_pylist() for s in row["sources"]}
    assert "1psm_A/bfd_uniclust_hits.fasta" in {s.split("#", 1)[0] for s in sources}, sources


def test_a_damaged_gzip_under_a_msa_dir_inside_the_pdb_dir_is_one_failure(tmp_path: Path) -> None:
    """Review R32a s47 #1: sniffing the content of a non-MSA-named file (e430de4) met a .gz whose
    deflate stream is damaged: zlib.error, not an OSError, killed the build in discovery with a
    traceback. Now the file is the MSA stage's (it reads every file under --msa-dir) and its failure
    is listed once, naming it; the structures build."""
    import gzip

    data = tmp_path / "data"
    msas = data / "msas"
    (msas / "1psm_A").mkdir(parents=True)
    shutil.copy(STRUCTURES / "1psm.cif", data)
    shutil.copy(OPENFOLD / "mgnify_hits.sto", msas / "1psm_A")
    packed = bytearray(gzip.compress((OPENFOLD / "bfd_uniclust_hits.a3m").read_bytes() * 50))
    for i in range(30, 60):
        packed[i] ^= 0x5A  # inside the deflate stream: gzip.read raises zlib.error
    (msas / "corrupt.fa.gz").write_bytes(bytes(packed))
    store = tmp_path / "store"
    summary = build_store(store, data, workers=1, msa_dir=msas, ccd=SAMPLES / "ccd")
    assert featurecache.open_store(store).ids == ["1psm"]
    failures = featurecache.open_store(store).failures.to_pylist()
    assert [f["path"] for f in failures] == ["corrupt.fa.gz"], failures
    assert failures[0]["stage"] == "msa" and "corrupt.fa.gz" in failures[0]["message"], failures
    assert summary.n_failed == 1  # that one MSA file: the build's exit status 1
