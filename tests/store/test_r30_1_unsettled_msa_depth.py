"""The ``depth`` of an MSA that ``verify --repair`` took out as untrustworthy does not decide the
``--msa-depth`` of the next build (review R30 s46 #1). An MSA part written before session 46 records
no ``index_sha256``: when its own ``_index/msas.arrow`` and ``STORE/index/`` differ, the store cannot
tell which copy is damaged, and the repair takes the MSA out for the build to rebuild from its files.
The build's check of ``--msa-depth`` (and verify's hint) still read that part's damaged row: a
``depth`` of 837 for an MSA of 838 distinct rows looked cut by a cap of 837, so a plain build was
refused and the printed command (``--msa-depth 837``) rebuilt the MSA cut to 837 rows, verify ok.

Real build (1 worker, one input per part) of the repo's sample 102m with its MSA directory; the
MSA part made to look older by dropping ``index_sha256`` from its ``part.json``; one ``depth``
cell of its own index rewritten (schema kept)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

import featurecache
from featurecache.build.config import settings_left_out
from featurecache.store.verify import msas_from_files
from featurecache.store.writer import INDEX_SHA256_KEY
from tests.conftest import MSAS, SAMPLES, STRUCTURES, build_store, cli_in_process


def _set_depth(f: Path, key: str, depth: int) -> None:
    with ipc.open_file(f) as r:
        t = r.read_all()
    i = t.column_names.index("depth")
    keys = t.column("key").to_pylist()
    values = [depth if k == key else d for k, d in zip(keys, t.column("depth").to_pylist(), strict=True)]
    t = t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))
    with ipc.new_file(f, t.schema) as w:
        w.write_table(t)


def test_an_unsettled_msas_damaged_depth_does_not_cap_the_rebuild(tmp_path: Path) -> None:
    pdb, msa, store = tmp_path / "pdb", tmp_path / "msa", tmp_path / "s"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)
    shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / "3", msa / "3")
    ccd = SAMPLES / "ccd"
    assert build_store(store, pdb, workers=1, part_size=1, msa_dir=msa, ccd=ccd).n_failed == 0
    rows = msas_from_files(store, None)
    assert rows is not None and len(rows) == 1
    key, depth = rows[0]["key"], rows[0]["depth"]
    assert rows[0]["n_distinct"] == depth > 1  # the premise: an MSA no cap cut
    part = store / "parts" / rows[0]["part"] / "_index"
    doc = json.loads((part / "part.json").read_text())
    del doc[INDEX_SHA256_KEY]  # as a part written before session 46
    (part / "part.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    _set_depth(part / "msas.arrow", key, depth - 1)

    bad = cli_in_process("verify", str(store), "--no-progress")
    assert bad.returncode == 4 and "--msa-depth" not in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    fixed = cli_in_process("verify", str(store), "--repair", "--no-progress")
    out = fixed.stdout + fixed.stderr
    assert fixed.returncode == 0 and "--msa-depth" not in out, out
    assert key not in featurecache.open_store(store).msas.column("key").to_pylist()
    assert settings_left_out(store, {"--ccd"}, msa, pdb) == []  # no --msa-depth asked for

    assert build_store(store, pdb, workers=1, part_size=1, msa_dir=msa, ccd=ccd).n_failed == 0
    assert featurecache.open_store(store).msa(key).depth == depth
    assert cli_in_process("verify", str(store), "--no-progress").returncode == 0
