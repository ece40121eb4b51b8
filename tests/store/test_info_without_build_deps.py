"""A store's info reads without the build's dependencies, as the lookup image has none of them
(deploy/requirements-serve.lock: no gemmi, RDKit, Dask). 6ee8ed5 made ``msa_stages`` import the MSA
stage version from ``build.msa_stage``, which imports gemmi: the image's ``/v1/info`` answered 500
(ModuleNotFoundError: No module named 'gemmi'); only the podman container test showed it. Here a
real interpreter with those modules made unimportable computes the store's info and the service's
info document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROGRAM = """
import json, sys
for name in ("gemmi", "rdkit", "dask", "distributed", "scipy", "Bio"):
    sys.modules[name] = None  # an import of it raises ImportError, as in the lookup image
from featurecache.store.reader import open_store
from featurecache.store.info import info_document
store = open_store(sys.argv[1])
doc = store.info()
assert info_document(store, None)["msa_stages"] == doc["msa_stages"]
print(json.dumps({"msa_stages": doc["msa_stages"], "held_parts": doc["held_parts"]}))
"""


def test_info_reads_without_gemmi_rdkit_or_dask(sample_store: Path) -> None:
    r = subprocess.run([sys.executable, "-c", PROGRAM, str(sample_store)], cwd=REPO, capture_output=True,
                       text=True, timeout=120, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert '"msa_stages"' in r.stdout and '"held_parts"' in r.stdout, r.stdout
