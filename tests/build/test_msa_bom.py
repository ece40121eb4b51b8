"""An MSA file that starts with a UTF-8 byte-order mark (Windows editors write one) is read as the
same file without it, as structure files already are (review R3 finding 8): a3m and Stockholm,
plain and gzipped. Before, each such file was a failure row ("sequence data before the first '>'
header: '\\ufeff>query'") and its chain got an MSA from the other files only."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from featurecache.store.index import read_table
from tests.conftest import MSAS, STRUCTURES, build_store

BOM = b"\xef\xbb\xbf"
#: the real openfold folder of 1psm chain A: one a3m and four Stockholm files
FOLDER = "openfold/1psm_A"


def _with_bom(msa_dir: Path) -> None:
    """Put a BOM in front of the text of the a3m file and of two Stockholm files, one of them
    gzipped (the BOM inside the compressed text, where an editor puts it)."""
    a3m = msa_dir / "1psm_A" / "bfd_uniclust_hits.a3m"
    a3m.write_bytes(BOM + a3m.read_bytes())
    sto = msa_dir / "1psm_A" / "mgnify_hits.sto"
    sto.write_bytes(BOM + sto.read_bytes())
    plain = msa_dir / "1psm_A" / "uniref90_hits.sto"
    (plain.parent / (plain.name + ".gz")).write_bytes(gzip.compress(BOM + plain.read_bytes(), mtime=0))
    plain.unlink()


def _gzip_only(msa_dir: Path) -> None:
    """The same file gzipped without a BOM (the reference keeps the names of the BOM copy)."""
    plain = msa_dir / "1psm_A" / "uniref90_hits.sto"
    (plain.parent / (plain.name + ".gz")).write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    plain.unlink()


def _msas(store: Path) -> list[dict[str, object]]:
    t = read_table(store / "index" / "msas.arrow", memory_map=False)
    return t.select(["key", "depth", "n_input_rows", "n_files", "sources", "content_hash"]).to_pylist()


def test_an_msa_file_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb)
    ref_msa, bom_msa = tmp_path / "msa_ref", tmp_path / "msa_bom"
    shutil.copytree(MSAS / FOLDER, ref_msa / "1psm_A")
    shutil.copytree(MSAS / FOLDER, bom_msa / "1psm_A")
    _gzip_only(ref_msa)
    _with_bom(bom_msa)
    assert (bom_msa / "1psm_A" / "bfd_uniclust_hits.a3m").read_bytes().startswith(BOM)

    ref = build_store(tmp_path / "ref", pdb, msa_dir=ref_msa, workers=1)
    bom = build_store(tmp_path / "bom", pdb, msa_dir=bom_msa, workers=1)

    assert ref.n_failed == 0
    assert bom.n_failed == 0, bom.failures
    failures = read_table(tmp_path / "bom" / "index" / "failures.arrow", memory_map=False)
    assert failures.num_rows == 0, failures.to_pylist()
    want = _msas(tmp_path / "ref")
    # the four alignment files are merged into chain A's MSA (hmm_output.sto holds template hits,
    # not an alignment), the three with a BOM among them, and the stored arrays are the same bytes
    assert [m["n_files"] for m in want] == [4]
    assert _msas(tmp_path / "bom") == want
