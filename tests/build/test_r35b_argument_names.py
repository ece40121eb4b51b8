"""Review R35b s49 #9: run_build's argument errors name the Python argument and the CLI option.

A Python caller passed ``workers=0`` and read "--workers must be >= 1"; now each refused argument
is named both ways ("workers (--workers) must be ≥ 1"), and nothing starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.build.config import BuildConfig
from featurecache.build.run import run_build
from featurecache.errors import UsageError
from tests.conftest import SAMPLES


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"workers": 0}, "workers (--workers) must be ≥ 1 (got 0; leave it out for one per CPU)"),
        ({"workers": 100000}, "workers=100000 (--workers 100000) is more than this machine runs"),
        ({"part_size": 0}, "part_size (--part-size) must be ≥ 1 (got 0)"),
        ({"config": BuildConfig(msa_depth_cap=0)}, "msa_depth_cap (--msa-depth) must be ≥ 1 (got 0"),
        (
            {"config": BuildConfig(conformer_timeout_s=0.0)},
            "conformer_timeout_s (--conformer-timeout) must be > 0",
        ),
        ({"msa_dir": Path("/nonexistent/msas")}, "msa_dir (--msa-dir) /nonexistent/msas: does not exist"),
        ({"ccd": Path("/nonexistent/ccd")}, "ccd (--ccd) /nonexistent/ccd: no such file or directory"),
        ({"pdb_dir": Path("/nonexistent/pdb")}, "pdb_dir (--pdb-dir) /nonexistent/pdb: does not exist"),
    ],
)
def test_a_refused_argument_is_named_as_the_argument_and_the_option(
    tmp_path: Path, arguments: dict[str, object], says: str
) -> None:
    out = tmp_path / "store"
    given = {"pdb_dir": SAMPLES / "structures", "out": out, "progress": False, **arguments}
    with pytest.raises(UsageError) as info:
        run_build(**given)  # type: ignore[arg-type]
    assert str(info.value).startswith(says), str(info.value)
    assert not out.exists()
