"""``--pdb-dir`` / ``--msa-dir`` at a path that does not exist say so ("does not exist"); at a
file they say "not a directory" (before: "not a directory" for both). Usage error, exit 2, nothing
written. The CLI run in this process (tests.conftest.cli_in_process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, cli_in_process


@pytest.mark.parametrize("option", ["--pdb-dir", "--msa-dir"])
@pytest.mark.parametrize(("kind", "says"), [("missing", "does not exist"), ("file", "not a directory"),
                                            ("broken link", "does not exist")])  # fmt: skip
def test_an_input_directory_that_is_not_there_is_named_for_what_it_is(
    tmp_path: Path, option: str, kind: str, says: str
) -> None:
    path = tmp_path / "inputs"
    if kind == "file":
        path.write_text("a file, not a directory\n")
    elif kind == "broken link":
        path.symlink_to(tmp_path / "gone")
    dirs = {"--pdb-dir": SAMPLES / "structures", "--msa-dir": SAMPLES / "msas", option: path}
    out = tmp_path / "s"
    args = ["build", *(a for o, d in dirs.items() for a in (o, str(d))), "--out", str(out), "--no-progress"]
    r = cli_in_process(*args, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    argument = option.removeprefix("--").replace("-", "_")  # run_build's (review R35b s49 #9)
    assert line == f"error: {argument} ({option}) {path}: {says}", line
    assert r.stdout == "" and not out.exists()


@pytest.mark.parametrize("spelling", ["same", "trailing slash", "via a link"])
def test_out_naming_the_pdb_dir_is_refused_as_that(tmp_path: Path, spelling: str) -> None:
    """``--out`` at the ``--pdb-dir`` itself (review R4 M2): before, its structure files were all
    skipped as the store's and the build said the directory held no structure file. Now one line
    says what is wrong; nothing is written."""
    pdb = tmp_path / "structures"
    pdb.mkdir()
    names = sorted(p.name for p in (SAMPLES / "structures").iterdir())
    for name in names:
        (pdb / name).write_bytes((SAMPLES / "structures" / name).read_bytes())
    out = {"same": str(pdb), "trailing slash": f"{pdb}/", "via a link": str(tmp_path / "link")}[spelling]
    if spelling == "via a link":
        (tmp_path / "link").symlink_to(pdb)
    args = ["build", "--pdb-dir", str(pdb), "--out", out, "--no-progress"]
    r = cli_in_process(*args, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith(
        f"error: out (--out) {Path(out)} is the pdb_dir (--pdb-dir): a store is a directory of its own"
    ), line
    assert sorted(p.name for p in pdb.iterdir()) == names  # nothing written into it
