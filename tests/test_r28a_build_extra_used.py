"""Every distribution the ``[build]`` extra names is used by featurecache (review R28a s46 #9):
tqdm was installed on every build node and in the worker image, and no code imported it."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def test_each_build_requirement_is_imported_or_looked_for() -> None:
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    modules: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules.setdefault(canonicalize_name(dist), set()).add(module)
    code = "\n".join(p.read_text() for p in (REPO / "featurecache").rglob("*.py"))
    unused = []
    for text in optional["build"]:
        name = canonicalize_name(Requirement(text).name)
        names = modules.get(name, {name})
        # an import, or a look-up by name (find_spec("bokeh"): the dashboard's optional pages)
        alternatives = "|".join(map(re.escape, names))
        used = re.compile(rf"^\s*(?:import|from) ({alternatives})\b|\"({alternatives})\"", re.M)
        if not used.search(code):
            unused.append(name)
    assert unused == []
