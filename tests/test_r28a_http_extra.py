"""Reading a store over HTTP needs the base install and the ``[http]`` extra only (review R28a s46
#3): ``featurecache.client.http.LookupClient`` imports httpx, which only ``[client]`` brought, and
``[client]`` brings torch too (2.6 GB from PyPI)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from featurecache import open_store
from services.lookup.server import background_server

REPO = Path(__file__).resolve().parents[1]

#: In a process where the modules of every installed distribution outside the base and ``[http]``
#: cannot be imported (as in an install of those only: the optional imports of zarr and numcodecs,
#: such as fsspec or msgpack, fail as they would there), read an entry from a lookup service.
_READ_WITH_ONLY = """
import json, sys

blocked = set(json.loads(sys.argv[1]))
for name in blocked:
    sys.modules[name] = None  # find_spec gives None, an import raises ModuleNotFoundError
from featurecache.client.http import LookupClient

entry = LookupClient(sys.argv[2]).entry(sys.argv[3], arrays=["atoms/coords"])
print(entry.atoms["coords"].shape)
"""


def _closure(requirements: list[str], optional: dict[str, list[str]]) -> set[str]:
    """The installed distributions these requirements bring, through their own requirements (those
    whose environment marker holds here) and featurecache's ``featurecache[...]`` references."""
    todo = [Requirement(r) for r in requirements]
    out: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == "featurecache":
            todo += [Requirement(r) for extra in req.extras for r in optional[extra]]
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
            continue
        if name in out:
            continue
        out.add(name)
        for text in metadata.distribution(req.name).requires or []:
            inner = Requirement(text)
            if inner.marker is None or any(inner.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(inner)
    return out


def test_the_http_reader_needs_only_the_base_and_the_http_extra(sample_store: Path) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    allowed = _closure([*project["dependencies"], *optional["http"]], optional)
    assert "torch" not in allowed and "httpx" in allowed
    assert allowed <= _closure(optional["client"], optional) | _closure(project["dependencies"], optional)

    blocked = sorted(
        module
        for module, dists in packages_distributions().items()
        if module != "featurecache" and not {canonicalize_name(d) for d in dists} & allowed
    )
    assert {"torch", "scipy", "dask"} <= set(blocked)  # installed here, outside base + [http]
    entry_id = open_store(sample_store).ids[0]
    with background_server(sample_store) as url:
        run = subprocess.run([sys.executable, "-c", _READ_WITH_ONLY, json.dumps(blocked), url, entry_id],
                             capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.fullmatch(r"\(\d+, 3\)", run.stdout.strip()), run.stdout


_IMPORT_WITHOUT_HTTPX = """
import sys

sys.modules["httpx"] = None  # as an install without the [http] extra
try:
    import featurecache.client.http
except ModuleNotFoundError as exc:
    print(exc.name)
    print(exc)
"""


def test_without_httpx_the_import_error_names_the_extra() -> None:
    """The bare ``No module named 'httpx'`` named no extra (review R28a s46 #3); the error keeps its
    ``name``, which callers read."""
    run = subprocess.run([sys.executable, "-c", _IMPORT_WITHOUT_HTTPX], capture_output=True, text=True,
                         timeout=120, cwd=REPO)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    name, message = run.stdout.strip().splitlines()
    assert name == "httpx", run.stdout
    assert "pip install 'featurecache[http]'" in message and "httpx" in message, message
