"""docs/store.md "Reading a store without featurecache": its example, taken from the page as written,
runs with numpy + zarr + pyarrow alone on a store built here and reads what featurecache's own
reader reads (entry arrays, an MSA with its deletions, a reference conformer), so the section
cannot drift from the store's layout. And the page and types.py agree on residue_index."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "store.md"
HEADING = "\n## Reading a store without featurecache\n"


def readme_example() -> str:
    text = PAGE.read_text()
    assert HEADING in text, f"docs/store.md has no {HEADING!r} section"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"expected one python block in the section, found {len(blocks)}"
    return blocks[0]


def _run_example(
    code: str, store: Path, tmp_path: Path, dump: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The example exactly as printed, on ``store`` (as ``stores/sample``), in a fresh interpreter
    that cannot import featurecache (its directory is not on the path, and the example names no
    featurecache module); with ``dump``, what it read is saved there for a comparison."""
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "sample").symlink_to(store)
    script = code
    if dump is not None:
        script += ("\nimport numpy as _np\n_np.savez(" + repr(str(dump)) + ", atoms=atoms, tokens=tokens, "
                   "bonds=bonds, interfaces=interfaces, residues=residues, deletions=deletions, rows=rows, cols=cols, "
                   "hem_atoms=hem_atoms, msa_key=_np.array(chain['msa_key']))\n")  # fmt: skip
    blocker = tmp_path / "nofc"
    blocker.mkdir()
    (blocker / "featurecache.py").write_text(
        "raise ImportError('the docs example must not need featurecache')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(blocker)
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_the_readme_example_reads_what_the_reader_reads(sample_store: Path, tmp_path: Path) -> None:
    from featurecache import open_store
    from featurecache.const import RESTYPE_INDEX

    code = readme_example()
    assert 'STORE, ENTRY = "stores/sample", "102m"' in code  # the quick start's store, as the README says
    dump = tmp_path / "read.npz"
    proc = _run_example(code, sample_store, tmp_path, dump)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("102m "), proc.stdout
    got = np.load(dump)

    store = open_store(sample_store)
    entry = store.entry("102m")
    for group in ("atoms", "tokens", "bonds", "interfaces"):
        fields = getattr(entry, group)
        assert fields, group
        assert len(got[group]) == int(entry.meta[f"{group[:-1]}_count"])
        for name, want in fields.items():
            np.testing.assert_array_equal(got[group][name], want, err_msg=f"{group}.{name}")
    assert len(got["atoms"]) > 1000 and len(got["interfaces"]) > 0  # 102m: myoglobin + HEM + SO4

    key = str(got["msa_key"])
    protein = next(c for c in entry.chains if c["msa_key"])
    assert key == protein["msa_key"]
    block = store.msa(key)
    np.testing.assert_array_equal(got["residues"], block.residues)
    np.testing.assert_array_equal(got["deletions"], block.deletions)
    assert got["deletions"].any()  # the CSR part of the example is exercised
    np.testing.assert_array_equal(got["rows"]["species"], block.species)
    np.testing.assert_array_equal(got["rows"]["source"], block.source)
    np.testing.assert_array_equal(got["cols"]["profile"], block.profile)
    np.testing.assert_array_equal(got["cols"]["deletion_mean"], block.deletion_mean)
    # row 0 is the query: the chain's own sequence in RESTYPES classes (independent of the store)
    three = {"M": "MET", "V": "VAL", "L": "LEU", "S": "SER", "E": "GLU", "G": "GLY", "W": "TRP", "Q": "GLN"}
    want_query = [RESTYPE_INDEX[three[c]] for c in "MVLSEGEWQL"]
    assert protein["sequence"].startswith("MVLSEGEWQL")
    assert got["residues"][0, :10].tolist() == want_query

    hem = store.component_table().component("HEM")
    np.testing.assert_array_equal(got["hem_atoms"]["ref_pos"], hem["ref_pos"])
    np.testing.assert_array_equal(got["hem_atoms"]["mask"], hem["mask"])
    np.testing.assert_array_equal(got["hem_atoms"]["element"], hem["element"])
    assert len(got["hem_atoms"]) == 43  # heme's heavy atoms (C34 H32 Fe N4 O4)


def test_readme_and_types_agree_on_residue_index() -> None:
    """residue_index is the entity-sequence position, else label_seq_id, else a counter
    (tokenize/af3.py); types.py said "label_seq_id for polymers"."""
    types_src = (REPO / "featurecache" / "types.py").read_text()
    comment = types_src.split('("residue_index"', 1)[0].rsplit('("restype"', 1)[1]
    assert "entity-sequence" in comment and "label_seq_id" in comment, comment
    section = PAGE.read_text().split(HEADING, 1)[1]
    assert "position in its entity sequence" in section and "label_seq_id" in section


def test_the_readme_example_refuses_what_would_read_wrong(sample_store: Path, tmp_path: Path) -> None:
    """Review R16 s40 #1: the section left out three signals featurecache's reader relies on, and
    its example read on regardless: an MSA shard file deleted read as an MSA of zeros (every residue
    ALA); an index flagged as a first build's unfinished one gave StopIteration (no MSA listed yet).
    The example as printed now refuses both, naming why."""
    import shutil

    import pyarrow as pa
    import pyarrow.ipc as ipc

    from featurecache import open_store

    code = readme_example()
    store = open_store(sample_store)
    key = next(c["msa_key"] for c in store.entry("102m").chains if c["msa_key"])
    row = next(r for r in store.msas.to_pylist() if r["key"] == key)

    gone = tmp_path / "gone" / "s"
    shutil.copytree(sample_store, gone, symlinks=True)
    shard = gone / "parts" / row["part"] / row["array"] / "c" / "0" / "0"
    shard.unlink()
    proc = _run_example(code, gone, tmp_path / "gone")
    assert proc.returncode != 0 and "FileNotFoundError" in proc.stderr, proc.stdout + proc.stderr[-2000:]
    assert f"parts/{row['part']}/{row['array']}/c/0/0 (zarr would read zeros)" in proc.stderr

    unfinished = tmp_path / "unfinished" / "s"
    shutil.copytree(sample_store, unfinished, symlinks=True)
    path = unfinished / "index" / "entries.arrow"
    t = ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()  # not mapped: the file is rewritten
    t = t.replace_schema_metadata({**(t.schema.metadata or {}), b"featurecache.first_build": b"unfinished"})
    with ipc.new_file(str(path), t.schema) as w:
        w.write_table(t)
    assert not open_store(unfinished).finished  # featurecache reads the flag so
    proc = _run_example(code, unfinished, tmp_path / "unfinished")
    assert proc.returncode != 0 and "its first build has not finished" in proc.stderr, proc.stderr[-2000:]
