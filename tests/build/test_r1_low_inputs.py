"""Inputs a real build failed on, or skipped, with a poor message or none (review R1, low findings).

Each damaged input sits next to good copies of corpus files in one build (the session's Dask
cluster, one worker, no CCD: no ligand is at stake). Before the change: an HTML page saved as
``.cif`` failed with gemmi's "expected block header (data_)" (as ``.pdb``: "no ATOM/HETATM
records"); a FIFO named ``.cif`` was skipped without a word; a broken symbolic link failed with
"No such file or directory", not naming where it points; a Stockholm file cut short failed with
"sequence X has N columns, the first has M", no line; a BinaryCIF file of two data blocks was read
from the first with no warning (its mmCIF twin has one). Now each is a failure row (a warning for
the BinaryCIF file, which is built) naming the file, the stage and what is wrong, and the good
entries are built.
"""

from __future__ import annotations

import copy
import gzip
import os
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from Bio.PDB.binary_cif import _decode

import featurecache
from featurecache.store.reader import LocalStore
from tests.conftest import MSAS, STRUCTURES, build_store

# a FIFO opened by mistake blocks the build: fail in minutes, not at the suite's timeout
pytestmark = pytest.mark.timeout(300)

HTML_404 = (
    b"<!DOCTYPE html>\n<html lang=en>\n<head><meta charset=utf-8>\n<title>404 Not Found</title></head>\n"
    b"<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p></body></html>\n"
)
LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 198212\n"
)


def _encoded(values: np.ndarray) -> dict[str, Any]:
    """A column's ``data`` in BinaryCIF's plainest encodings: numbers as a ByteArray (int32 or
    float64), strings as a StringArray of int32 indices and offsets."""
    int32 = [{"kind": "ByteArray", "type": 3}]
    if values.dtype.kind in "iub":
        return {"data": values.astype("<i4").tobytes(), "encoding": int32}
    if values.dtype.kind == "f":
        return {"data": values.astype("<f8").tobytes(), "encoding": [{"kind": "ByteArray", "type": 33}]}
    unique, index = np.unique(values.astype(str), return_inverse=True)
    offsets = np.cumsum([0, *(len(u) for u in unique)]).astype("<i4")
    return {"data": index.astype("<i4").tobytes(), "encoding": [{"kind": "StringArray", "dataEncoding": int32,
            "stringData": "".join(unique), "offsetEncoding": int32, "offsets": offsets.tobytes()}]}  # fmt: skip


def _two_block_bcif() -> bytes:
    """6wg6.bcif cut to its first chain's atoms (1,446 of 20,038: its 14 chains cost seconds to
    read; the other categories as they are), with a second data block (its ``_entry`` only, named
    ``restraints``) appended."""
    doc = msgpack.unpackb(gzip.decompress((STRUCTURES / "6wg6.bcif.gz").read_bytes()), raw=False)
    first = doc["dataBlocks"][0]
    first["categories"] = [c for c in first["categories"] if c["name"] != "_atom_site_anisotrop"]
    atoms = next(c for c in first["categories"] if c["name"] == "_atom_site")
    chain = np.asarray(
        _decode(copy.deepcopy(next(c for c in atoms["columns"] if c["name"] == "label_asym_id")))
    )
    keep = chain == chain[0]
    for column in atoms["columns"]:
        column["data"] = _encoded(np.asarray(_decode(copy.deepcopy(column)))[keep])
        if column.get("mask"):
            column["mask"] = _encoded(np.asarray(_decode({"data": column["mask"]}))[keep])
    atoms["rowCount"] = int(keep.sum())
    entry = [c for c in first["categories"] if c["name"] == "_entry"]
    doc["dataBlocks"].append({"header": "restraints", "categories": entry})
    return msgpack.packb(doc, use_bin_type=True)


def _cut_sto(text: str) -> tuple[str, dict[str, Any]]:
    """4zey_A/mgnify_hits.sto cut in the middle of its third sequence line (a download cut short),
    and what the failure should name: that line, its row, its width and the first row's."""
    lines = text.split("\n")
    seq = [k for k, line in enumerate(lines) if line and not line.startswith(("#", "//"))]
    k = seq[2]
    name, row = lines[k].split()
    keep = len(row) // 2
    cut = "\n".join(lines[:k]) + "\n" + lines[k][: lines[k].index(row) + keep]
    first_name, first_row = lines[seq[0]].split()
    return cut, {"line": k + 1, "name": name, "columns": keep, "first": first_name,
                 "first_line": seq[0] + 1, "width": len(first_row)}  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalStore, Any, Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("r1_low")
    pdb, msa = tmp / "pdb", tmp / "msa"
    pdb.mkdir()
    (msa / "4zey_A").mkdir(parents=True)
    for name in ("5e5z.pdb", "4zey.cif"):
        (pdb / name).write_bytes((STRUCTURES / name).read_bytes())
    (pdb / "html.cif").write_bytes(HTML_404)
    (pdb / "html.pdb").write_bytes(b"<html>\n<body>Sign in to continue</body></html>\n")
    (pdb / "lfs.cif.gz").write_bytes(LFS_POINTER)
    (pdb / "empty.cif").write_bytes(b"")
    os.mkfifo(pdb / "fifo.cif")
    (pdb / "dangling.cif").symlink_to(tmp / "nowhere" / "1abc.cif")
    (pdb / "moved.cif").symlink_to("../elsewhere/102m.cif")  # relative: the message says where it lands
    (pdb / "two_blocks.bcif").write_bytes(_two_block_bcif())
    cut, expected = _cut_sto((MSAS / "openfold/4zey_A/mgnify_hits.sto").read_text())
    (msa / "4zey_A" / "mgnify_hits.sto").write_text(cut)
    (msa / "loose").mkdir()  # a directory that names no chain: the rows that read name it
    (msa / "loose" / "hits.sto").write_text(cut)
    summary = build_store(tmp / "store", pdb, msa_dir=msa, workers=1)
    return featurecache.open_store(tmp / "store"), summary, tmp, expected


def _failure(store: LocalStore, path: str) -> dict[str, str]:
    (row,) = [f for f in store.failures.to_pylist() if f["path"] == path]
    return row


def test_good_inputs_are_built_and_every_bad_one_is_a_failure(built: Any) -> None:
    store, summary, _tmp, _expected = built
    assert sorted(store.ids) == ["4zey", "5e5z", "two_blocks"]
    assert {f["path"] for f in store.failures.to_pylist()} == {
        "html.cif", "html.pdb", "lfs.cif.gz", "empty.cif", "fifo.cif", "dangling.cif", "moved.cif",
        "4zey_A/mgnify_hits.sto", "loose/hits.sto",
    }  # fmt: skip
    assert summary.n_failed == 9  # what makes the build's exit status 1


def test_a_web_page_saved_as_a_structure_is_named_as_such(built: Any) -> None:
    store = built[0]
    row = _failure(store, "html.cif")
    assert (row["stage"], row["error_class"]) == ("parse", "UnsupportedFormatError")
    assert row["message"] == (
        "html.cif: an HTML page, not an mmCIF file (it starts '<!DOCTYPE html>', title '404 Not Found'): a web "
        "page saved in place of the file (a download that got an error or sign-in page?)"
    )
    assert _failure(store, "html.pdb")["message"].startswith(
        "html.pdb: an HTML page, not a PDB file (it starts '<html>'): a web page saved in place of the file"
    )
    assert _failure(store, "lfs.cif.gz")["message"] == (
        "lfs.cif.gz: a Git LFS pointer, not an mmCIF file (it starts 'version "
        "https://git-lfs.github.com/spec/v1'): the file's content was never fetched (git lfs pull)"
    )
    assert _failure(store, "empty.cif")["message"] == "empty.cif: empty file (0 bytes)"


def test_a_fifo_is_a_failure_naming_it_and_is_not_opened(built: Any) -> None:
    row = _failure(built[0], "fifo.cif")
    assert (row["stage"], row["error_class"]) == ("discover", "InputError")
    assert row["message"] == (
        "not a regular file: fifo.cif is a named pipe (FIFO); not opened (opening a pipe waits for a writer: "
        "the build would hang): write the structure to a regular file"
    )


def test_a_broken_symlink_names_its_target(built: Any) -> None:
    store, _summary, tmp, _expected = built
    row = _failure(store, "dangling.cif")
    assert (row["stage"], row["error_class"]) == ("discover", "InputError")
    assert row["message"] == (
        f"broken symbolic link: dangling.cif -> {tmp}/nowhere/1abc.cif: No such file or directory; not read"
    )
    assert _failure(store, "moved.cif")["message"] == (
        f"broken symbolic link: moved.cif -> ../elsewhere/102m.cif (that is {tmp}/elsewhere/102m.cif): "
        "No such file or directory; not read"
    )


def test_a_stockholm_file_cut_short_names_the_line_and_the_chain(built: Any) -> None:
    store, _summary, _tmp, e = built
    row = _failure(store, "4zey_A/mgnify_hits.sto")
    assert (row["stage"], row["entry_id"]) == ("msa", "4zey")
    assert row["message"] == (
        f"line {e['line']}: sequence {e['name']!r} has {e['columns']} columns, the first ({e['first']!r}, line "
        f"{e['first_line']}) has {e['width']}; no '//' closes the alignment (the file ends at line {e['line']}): "
        "a file cut short?; the file is left out: chain 4zey/A gets a single-sequence MSA"
    )
    loose = _failure(store, "loose/hits.sto")
    assert (loose["stage"], loose["entry_id"]) == ("msa", "4zey"), loose
    assert loose["message"].endswith("the file is left out: chain 4zey/A gets a single-sequence MSA"), loose


def test_binarycif_of_two_data_blocks_is_built_from_the_first_with_a_warning(built: Any) -> None:
    store = built[0]
    rows = [w for w in store.warnings.to_pylist() if w["entry_id"] == "two_blocks"]
    assert [(w["path"], w["stage"], w["message"]) for w in rows] == [
        ("two_blocks.bcif", "parse",
         "two_blocks.bcif: 2 data blocks: read the first, data_6WG6; 1 other block ignored (data_restraints)"),
    ]  # fmt: skip
