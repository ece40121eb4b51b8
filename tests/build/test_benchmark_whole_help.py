"""``--help`` of every benchmark prints its whole docstring (review R31b s47 #8).

loader.py, sample_cost.py, msa_scan.py and structure_digests.py printed the first paragraph only,
while their options refer to what the rest defines ("rounds of (a) and (c)", ``--baseline REV``'s
swapped functions, the "(all)" and "per entry" rows). Every benchmark's parser now takes
``description=__doc__`` with ``RawDescriptionHelpFormatter``, as the others did.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


def _parsers(tree: ast.Module) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("ArgumentParser")
    ]


def test_every_benchmark_parser_describes_with_the_whole_docstring() -> None:
    partial = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        for call in _parsers(ast.parse(path.read_text())):
            kw = {k.arg: ast.unparse(k.value) for k in call.keywords}
            if kw.get("description") != "__doc__" or not kw.get("formatter_class", "").endswith(
                "RawDescriptionHelpFormatter"
            ):
                partial.append(path.name)
    assert partial == [], f"--help shows part of the docstring, or reflows it: {partial}"


@pytest.mark.parametrize(
    ("name", "defined"), [("loader", "(c) stragglers:"), ("msa_scan", "Both scans give the")]
)
def test_help_defines_what_the_options_name(name: str, defined: str, tmp_path: Path) -> None:
    env = {**os.environ, "FEATURECACHE_SHARED": str(tmp_path / "no-shared-data"), "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert defined in proc.stdout, proc.stdout
