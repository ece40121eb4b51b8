"""docs/store.md "Reading a store without featurecache": its example, as printed, refuses a store whose root
``format_version`` is not the integer 1 or 2, as featurecache does (``store.root.check_format``).

Review R28c s46 #6: the example read a copy whose format_version was 3 (or 2.0, 0, none) without a
word, where featurecache refuses each; and the section stated no rule for third-party readers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.docs.test_plain_read import HEADING, PAGE, _run_example, readme_example

_ABSENT = object()


def _copy_with_format(store: Path, dest: Path, fmt: Any) -> Path:
    shutil.copytree(store, dest, symlinks=True)
    meta = dest / "zarr.json"
    doc = json.loads(meta.read_text())
    if fmt is _ABSENT:
        doc["attributes"].pop("format_version", None)
    else:
        doc["attributes"]["format_version"] = fmt
    meta.write_text(json.dumps(doc))
    return dest


@pytest.mark.parametrize("fmt", [3, 2.0, "2", True, _ABSENT], ids=["3", "2.0", "str", "true", "absent"])
def test_the_readme_example_refuses_a_format_it_does_not_read(
    sample_store: Path, tmp_path: Path, fmt: Any
) -> None:
    from featurecache.errors import StoreVersionError
    from featurecache.store.root import check_format

    if fmt is not _ABSENT:  # the premise: featurecache refuses it too
        with pytest.raises(StoreVersionError):
            check_format(fmt, "copy")
    copy = _copy_with_format(sample_store, tmp_path / "copy" / "s", fmt)
    proc = _run_example(readme_example(), copy, tmp_path / "copy")
    assert proc.returncode != 0, proc.stdout
    tail = proc.stderr[-2000:]
    assert "RuntimeError" in tail and "this reader reads formats 1 and 2" in tail, tail
    assert not proc.stdout  # refused before it read anything


@pytest.mark.parametrize("fmt", [1, 2])
def test_the_readme_example_reads_formats_1_and_2(sample_store: Path, tmp_path: Path, fmt: int) -> None:
    """A format-1 root over these parts is not a real store (their tokens are format 2's), but the
    example's version check is all that differs: it passes both, and the example reads on."""
    copy = _copy_with_format(sample_store, tmp_path / "copy" / "s", fmt)
    proc = _run_example(readme_example(), copy, tmp_path / "copy")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("102m ")


def test_the_section_states_the_rule_for_readers() -> None:
    section = " ".join(PAGE.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0].split())
    assert "`format_version` must be the JSON integer 1 or 2: refuse any other value" in section
    assert "2 adds the tokens' `centre_coords`" in section
