"""``benchmarks/<name>.py --help`` explains the benchmark and runs nothing.

store_layout.py and msa.py parsed no arguments: ``--help`` started the benchmark (a corpus build)
and overwrote the committed ``benchmarks/results/<name>.json``; loader.py's help stopped its
description mid-sentence. The benchmarks run here without the shared data (FEATURECACHE_SHARED
names a missing directory), so one that starts running fails at once instead of running for
minutes.

Review R24 #4: every top-level script is covered. Those whose ``--help`` is cheap run it here (a
subprocess each, 0.1-1.3 s); those that import torch first (2.5-4.5 s a ``--help`` on the 2-core
test machine) are checked from their source (argparse with the docstring), and their featurecache
names by ``test_benchmarks_import.py``. R24 #3: the dev scripts without argparse took ``--help``
for an output path (``ab57.py --help`` wrote a file named ``--help``); each now answers it first
(``benchmarks/dev/devcli.py``), which the source check below holds them to.
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


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.glob("*.json"))}


def _words(text: str) -> str:
    return " ".join(text.split())


#: run with --help in a subprocess: the ones whose --help is cheap (loader parses before it imports torch)
HELP_RUN = ["store_layout", "msa", "msa_scan", "loader", "build", "chem", "serve", "worker_start", "cluster_overhead",
            "chunk_checksums", "crop_interface", "msa_scale", "reader_memory", "sampler_scale", "structure_digests",
            "cluster_tls"]  # fmt: skip
#: import torch before parsing (--help 2.5-4.5 s each here), or (train_e2e) write a results folder, not
#: one file (no --out FILE): checked from the source only
HELP_SOURCE_ONLY = [
    "kernels",
    "plan_validate",
    "sample_cost",
    "shard_reads",
    "train_e2e",
    "vs_alphafold3_pytorch",
]
#: not benchmarks: the package and the shared harness (no command line); make_page writes BENCHMARKS.md
LIBRARIES = ["__init__", "harness"]


@pytest.mark.parametrize("name", HELP_RUN)
def test_help_explains_the_benchmark_and_runs_nothing(name: str, tmp_path: Path) -> None:
    script = BENCHMARKS / f"{name}.py"
    doc = ast.get_docstring(ast.parse(script.read_text()))
    assert doc
    first_paragraph = doc.split("\n\n")[0]
    before = _snapshot(BENCHMARKS / "results")
    env = {**os.environ, "FEATURECACHE_SHARED": str(tmp_path / "no-shared-data")}
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert _words(first_paragraph) in _words(proc.stdout), proc.stdout
    assert "--out FILE" in proc.stdout  # where the results go can be changed
    assert f"benchmarks/results/{name}.json" in _words(proc.stdout)  # and the default is named right
    assert _snapshot(BENCHMARKS / "results") == before
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran either


@pytest.mark.parametrize("name", ["store_layout", "msa"])
def test_bad_option_values_are_usage_errors(name: str, tmp_path: Path) -> None:
    option = "--reads" if name == "store_layout" else "--rows"
    env = {**os.environ, "FEATURECACHE_SHARED": str(tmp_path / "no-shared-data")}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), option, "0"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "at least 1" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("name", ["loader", "serve", "train_e2e"])
def test_a_store_that_is_not_there_is_a_usage_error(name: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-store"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--store", str(missing)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}.py: error: argument --store:") and str(missing) in last, proc.stderr


def test_make_page_help_writes_nothing(tmp_path: Path) -> None:
    page = REPO / "BENCHMARKS.md"
    before = page.stat().st_mtime_ns if page.exists() else None
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "make_page.py"), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stderr[-2000:]
    assert "BENCHMARKS.md" in proc.stdout
    assert (page.stat().st_mtime_ns if page.exists() else None) == before
    assert list(tmp_path.iterdir()) == []


def _is_main_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and {"__name__", "__main__"} <= {
        getattr(n, "id", None) or getattr(n, "value", None) for n in ast.walk(node.test)
    }


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _parses_with_doc(tree: ast.Module) -> bool:
    """argparse: a parser whose description comes from the module docstring, and parse_args."""
    parsers = [c for c in _calls(tree) if ast.unparse(c.func).endswith("ArgumentParser")]
    with_doc = any(
        "__doc__" in ast.unparse(k.value) for c in parsers for k in c.keywords if k.arg == "description"
    )
    return with_doc and any(ast.unparse(c.func).endswith(".parse_args") for c in _calls(tree))


def test_every_top_level_benchmark_is_covered() -> None:
    scripts = {p.stem: ast.parse(p.read_text()) for p in sorted(BENCHMARKS.glob("*.py"))}
    runnable = {name for name, tree in scripts.items() if any(_is_main_block(n) for n in tree.body)}
    assert sorted(set(scripts) - runnable) == LIBRARIES
    assert sorted(runnable) == sorted([*HELP_RUN, *HELP_SOURCE_ONLY, "make_page"])
    not_parsed = [name for name in sorted(runnable) if not _parses_with_doc(scripts[name])]
    assert not not_parsed, f"no argparse parser described by the docstring: {not_parsed}"


def _help_first(tree: ast.Module) -> bool:
    """``help_exit(__doc__)`` is the first thing the script runs: in its (first) ``__main__`` block,
    or at module level for a script without one; imports, ``sys.path`` changes, definitions and
    constants before it do no work."""
    blocks = [n for n in tree.body if _is_main_block(n)]
    for node in blocks[0].body if blocks else tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef | ast.Try):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        call = node.value if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) else None
        if call is not None and ast.unparse(call.func).startswith("sys.path."):
            continue
        if not blocks and isinstance(node, ast.Assign | ast.AnnAssign) and not _calls(node):
            continue
        return call is not None and ast.unparse(call) == "help_exit(__doc__)"
    return False


DEV_LIBRARIES = ["abkit", "devcli"]  # imported by the dev scripts, no command line


def test_every_dev_script_answers_help_before_it_runs() -> None:
    problems = []
    for path in sorted((BENCHMARKS / "dev").glob("*.py")):
        tree = ast.parse(path.read_text())
        if path.stem in DEV_LIBRARIES:
            assert not any(_is_main_block(n) for n in tree.body), path.name
            continue
        funcs = [ast.unparse(c.func) for c in _calls(tree)]
        uses_argparse = any(f.endswith("ArgumentParser") for f in funcs) and any(
            f.endswith(".parse_args") for f in funcs
        )
        if not uses_argparse and not _help_first(tree):
            problems.append(path.name)
    assert not problems, f"neither argparse nor help_exit(__doc__) first: {problems}"


def test_help_exit_prints_the_usage_and_exits_0(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from benchmarks.dev.devcli import help_exit

    doc = "A/B of something.\n\n    PYTHONPATH=. python3 benchmarks/dev/abX.py OUT.json\n"
    monkeypatch.setattr(sys, "argv", ["benchmarks/dev/abX.py", "--help"])
    with pytest.raises(SystemExit) as exc:
        help_exit(doc)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("usage: PYTHONPATH=. python3 benchmarks/dev/abX.py OUT.json\n")
        and "A/B of something." in out
    )
    help_exit(doc, ["OUT.json"])  # no -h/--help: returns


def test_ran_elsewhere_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from benchmarks.dev.devcli import ran_elsewhere

    monkeypatch.setattr(sys, "argv", ["benchmarks/dev/abX.py", "out.json"])
    with pytest.raises(SystemExit) as exc:
        ran_elsewhere("adcf03d398e84a3fa0265a5cf359e4f205a0313c", "run 13", "no launch_dqkv here")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == ("abX.py: no launch_dqkv here; it ran against adcf03d (run 13): "
                   "git worktree add /tmp/fc-adcf03d adcf03d and run it there\n")  # fmt: skip
