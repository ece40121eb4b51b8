"""``/v1/info`` keeps the server's filesystem to itself (review RF1 s24 #3): the store's record of
what its latest build read (``build_inputs``) reached every client with the absolute --pdb-dir,
--msa-dir and --ccd paths, although the route drops the store's own path for that reason. It now
says whether each was given and the CCD's fingerprint. A real ``featurecache serve`` (2 workers)
over the sample store, built from samples/ with --msa-dir and --ccd."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from featurecache.build.run import ccd_fingerprint
from tests.conftest import SAMPLES


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_info_names_no_server_path(lookup_url: str, sample_store: Path) -> None:
    answer = httpx.get(f"{lookup_url}/v1/info", timeout=30)
    assert answer.status_code == 200, answer.text
    # the build's --msa-dir and --ccd, and the store itself (featurizer_versions' entry_source_dirs
    # still names the --pdb-dir, for the client's rebuild hint: not this test's subject)
    for path in (SAMPLES / "msas", SAMPLES / "ccd", sample_store):
        assert str(path.resolve()) not in answer.text, f"/v1/info names {path}: {answer.text[:3000]}"
    inputs = answer.json()["build_inputs"]
    absolute = [s for s in _strings(inputs) if os.path.isabs(s) or Path(s).exists()]
    assert absolute == [], absolute
    # what a client can still use: which inputs the build had, and the CCD it read (its fingerprint,
    # computed here from samples/ccd, the --ccd of the sample store's build)
    assert answer.json()["build_inputs"] == {
        "recorded": True,
        "pdb_dir": True,
        "msa_dir": True,
        "ccd": {"fingerprint": ccd_fingerprint(SAMPLES / "ccd")},
    }
