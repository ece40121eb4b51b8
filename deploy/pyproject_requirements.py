"""Print the requirements of featurecache's base dependencies plus the given extras, one per line.

Used by the Dockerfiles to install dependencies in a layer that depends on pyproject.toml alone, so
editing the code does not re-download them:  python3 pyproject_requirements.py pyproject.toml serve

An extra that names others of featurecache's (``client = ["featurecache[http]", ...]``) stands for
their requirements, followed recursively (review R29a s46 #5: they were dropped, so ``client``
lacked httpx). Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

#: ``name[extra, ...]``: a requirement on extras of a project, with no version or marker
_EXTRAS_OF = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\]\s*$")


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Feature_Cache`` is ``feature-cache``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    """The base dependencies, then each extra's requirements in order (an extra of featurecache's
    own, as ``featurecache[http]``, replaced by its requirements), each once."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    own = _canonical(project["name"])
    out = list(project.get("dependencies", []))
    expanded: set[str] = set()

    def expand(extra: str) -> None:
        if extra not in optional:
            raise SystemExit(f"unknown extra {extra!r}; pyproject has {sorted(optional)}")
        if extra in expanded:  # a cycle, or an extra two others name
            return
        expanded.add(extra)
        for req in optional[extra]:
            name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if name is None or _canonical(name.group(1)) != own:
                out.append(req)
                continue
            m = _EXTRAS_OF.match(req)
            if m is None:  # a version or marker on the project itself: no meaning in its own extras
                raise SystemExit(
                    f"extra {extra!r}: cannot expand {req!r} (want {project['name']}[extra, ...])"
                )
            for sub in m.group(2).split(","):
                if sub.strip():
                    expand(sub.strip())

    for extra in extras:
        expand(extra)
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    sys.stdout.write("\n".join(requirements(Path(sys.argv[1]), sys.argv[2:])) + "\n")
