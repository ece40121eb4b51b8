"""Print the requirements of featurecache's base dependencies plus the given extras, one per line.

Used by the Dockerfiles to install dependencies in a layer that depends on pyproject.toml alone, so
editing the code does not re-download them:  python3 pyproject_requirements.py pyproject.toml serve
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    out = list(project.get("dependencies", []))
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"unknown extra {extra!r}; pyproject has {sorted(optional)}")
        out += [r for r in optional[extra] if not r.startswith(project["name"] + "[")]
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    sys.stdout.write("\n".join(requirements(Path(sys.argv[1]), sys.argv[2:])) + "\n")
