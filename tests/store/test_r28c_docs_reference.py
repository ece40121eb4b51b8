"""docs/FORMAT.md "Reference conformers: the join": its function, run as printed with numpy, zarr and
pyarrow alone, gives featurecache's ``ref_pos`` and ``ref_mask`` byte for byte on a store holding a
renamed ligand (1GBT's GBS, stored as the perceived component ``GBS#<hash>``).

Review R28c s46 #5: the README said an atom takes the conformer "of its token's res_name", keyed
by the CCD code or ``code#hash`` "for a residue no CCD definition covers"; a reader written from
that took the CCD GBS conformer for 1GBT, and two of GBS's atoms silently got other atoms' positions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CCD, STRUCTURES, build_store

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Reference conformers: the join"

#: reads every entry of the store in argv[1] and saves ref_pos / ref_mask per entry to argv[2];
#: FORMAT.md's block is prepended as it is printed
LOADER = """
import ast, sys
import numpy as np, pyarrow as pa, pyarrow.ipc as ipc, zarr

STORE, OUT = sys.argv[1], sys.argv[2]


def table(name):
    with pa.memory_map(f"{STORE}/index/{name}.arrow") as f:
        return ipc.open_file(f).read_all().to_pylist()


def records(part, name, start, count):
    a = zarr.open_array(f"{STORE}/parts/{part}/{name}", mode="r")
    dtype = np.dtype(ast.literal_eval(a.attrs["record_dtype"]))
    return np.ascontiguousarray(a[start : start + count]).view(dtype).reshape(count)


components = {}
for row in table("components"):
    components[row["key"]] = row  # the last row of a key counts
got = {}
for e in table("entries"):
    atoms = records(e["part"], "atoms", e["atom_start"], e["atom_count"])
    tokens = records(e["part"], "tokens", e["token_start"], e["token_count"])
    conformer = lambda r: records(r["part"], "atoms", r["atom_start"], r["atom_count"])
    got[e["id"] + "/ref_pos"], got[e["id"] + "/ref_mask"] = reference_positions(atoms, tokens, components, conformer)
np.savez(OUT, **got)
"""


def format_md_code() -> str:
    text = (REPO / "docs" / "FORMAT.md").read_text()
    assert SECTION in text
    blocks = re.findall(r"```python\n(.*?)```", text.split(SECTION, 1)[1].split("\n## ", 1)[0], flags=re.S)
    assert len(blocks) == 1, f"expected one python block in {SECTION!r}, found {len(blocks)}"
    return blocks[0]


@pytest.fixture(scope="module")
def renamed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1GBT (GBS with every atom renamed) and 102m (HEM, standard residues), built with the CCD."""
    root = tmp_path_factory.mktemp("r28c_reference")
    inputs = root / "in"
    inputs.mkdir()
    for name in ("1GBT.cif", "102m.cif"):
        (inputs / name).symlink_to(STRUCTURES / name)
    summary = build_store(root / "store", inputs, ccd=CCD, workers=1)
    assert summary.n_failed == 0
    return root / "store"


def _run_doc_reader(store: Path, tmp_path: Path) -> dict[str, np.ndarray]:
    """FORMAT.md's function plus LOADER in a fresh interpreter that cannot import featurecache."""
    blocker = tmp_path / "nofc"
    blocker.mkdir()
    (blocker / "featurecache.py").write_text(
        "raise ImportError('the FORMAT.md reader must not need featurecache')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(blocker)
    out = tmp_path / "doc.npz"
    proc = subprocess.run([sys.executable, "-c", format_md_code() + LOADER, str(store), str(out)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as got:
        return {k: got[k] for k in got.files}


def test_the_format_md_join_gives_featurecaches_reference_positions(
    renamed_store: Path, tmp_path: Path
) -> None:
    from featurecache import open_store

    store = open_store(renamed_store)
    keys = store.component_table().keys
    perceived = [k for k in keys if k.startswith("GBS#")]
    assert perceived and "GBS" in keys  # the premise: the definition and the renamed residue's own key
    got = _run_doc_reader(renamed_store, tmp_path)
    assert sorted(k.split("/")[0] for k in got) == sorted(2 * ["102m", "1GBT"])
    for entry_id in ("102m", "1GBT"):
        want = store.reference_features(store.entry(entry_id))
        pos, mask = got[f"{entry_id}/ref_pos"], got[f"{entry_id}/ref_mask"]
        assert pos.dtype == np.float32 and pos.tobytes() == np.asarray(want["ref_pos"]).tobytes(), entry_id
        np.testing.assert_array_equal(mask, want["ref_mask"], err_msg=entry_id)


def test_a_join_by_code_alone_would_differ(renamed_store: Path) -> None:
    """Why the rule matters: GBS's atoms joined to the CCD GBS conformer by name get other positions
    (some names exist in both, for other atoms) or none, where featurecache uses GBS#<hash>."""
    from featurecache import open_store
    from featurecache.const import decode_atom_name, decode_res_name

    store = open_store(renamed_store)
    entry = store.entry("1GBT")
    want = store.reference_features(entry)
    table = store.component_table()
    ccd = table.component("GBS")
    by_name = dict(zip(ccd["atom_names"], ccd["ref_pos"], strict=True))
    tok = np.asarray(entry.atoms["token_index"])
    gbs = [k for k in range(len(tok)) if decode_res_name(entry.tokens["res_name"][tok[k]]) == "GBS"]
    assert gbs and bool(np.asarray(want["ref_mask"])[gbs].all())
    naive = np.array([by_name.get(decode_atom_name(entry.atoms["name"][k]), np.zeros(3)) for k in gbs])
    differ = (np.abs(naive - np.asarray(want["ref_pos"])[gbs]).max(axis=1) > 1e-3).sum()
    assert differ == len(gbs), json.dumps({"differ": int(differ), "atoms": len(gbs)})
