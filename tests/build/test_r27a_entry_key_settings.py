"""Every setting that changes a structure entry's features is in its key, so a build with it
changed rebuilds the entry (review R27a s45, K1). The documented list (build/config.py's module
docstring and ``feature_dict``: interface cutoff, featurizer version, crystallization aids) is
checked on the key; crystallization aids also with real builds of 102m (SOURCES.tsv: X-ray,
myoglobin with HEM + SO4), whose stored entry must hold the SO4 exactly when asked to."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import gemmi
import pytest

import featurecache
from featurecache.build import config as config_module
from featurecache.build.config import BuildConfig
from featurecache.const import decode_res_name
from tests.conftest import STRUCTURES, build_store

#: (setting, another value) of each field the module docstring lists as keying an entry
DOCUMENTED = (("interface_cutoff", 6.0), ("keep_crystallization_aids", True))
#: settings documented as in no entry key (an MSA's key holds the depth cap; the timeout keys nothing)
NOT_IN_THE_ENTRY_KEY = (("msa_depth_cap", 64), ("conformer_timeout_s", 5.0))


@pytest.mark.parametrize(("field", "value"), DOCUMENTED)
def test_each_documented_setting_changes_the_entry_key(field: str, value: object) -> None:
    base = BuildConfig()
    assert getattr(base, field) != value
    assert replace(base, **{field: value}).entry_config_hash() != base.entry_config_hash()


def test_the_featurizer_version_changes_the_entry_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = BuildConfig().entry_config_hash()
    monkeypatch.setattr(config_module, "FEATURIZER_VERSION", "0.0.0-r27a")
    assert BuildConfig().entry_config_hash() != before


@pytest.mark.parametrize(("field", "value"), NOT_IN_THE_ENTRY_KEY)
def test_settings_in_no_entry_key_leave_it(field: str, value: object) -> None:
    base = BuildConfig()
    assert replace(base, **{field: value}).entry_config_hash() == base.entry_config_hash()


def _so4_in_file() -> tuple[int, int]:
    """(SO4 residues, their heavy atoms) of 102m.cif's first model, counted with gemmi."""
    st = gemmi.read_structure(str(STRUCTURES / "102m.cif"))
    res = [r for ch in st[0] for r in ch if r.name == "SO4"]
    return len(res), sum(1 for r in res for a in r if not a.is_hydrogen())


def _stored_so4_tokens(store: Path) -> int:
    with featurecache.open_store(store) as reader:
        names = reader.entry("102m").tokens["res_name"]
        return sum(decode_res_name(n) == "SO4" for n in names)


def test_keep_cryst_aids_rebuilds_102m_with_and_without_its_sulfate(tmp_path: Path) -> None:
    n_res, n_atoms = _so4_in_file()
    assert n_res >= 1 and n_atoms == 5 * n_res  # SO4: S + 4 O per residue
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1)
    assert first.n_built == 1 and _stored_so4_tokens(store) == 0  # X-ray: aids removed (AF3 SI 2.5.4)
    kept = build_store(store, pdb, workers=1, config=BuildConfig(keep_crystallization_aids=True))
    assert (kept.n_built, kept.n_rebuilt) == (1, 1), kept
    assert _stored_so4_tokens(store) == n_atoms  # one token per heavy atom of each SO4
    again = build_store(store, pdb, workers=1, config=BuildConfig(keep_crystallization_aids=True))
    assert (again.n_built, again.n_rebuilt) == (0, 0), again  # same settings: nothing to do
    # dropped explicitly: left out, a build over a store built with them is refused (review R35b s49 #1)
    dropped = build_store(store, pdb, workers=1, config=BuildConfig(keep_crystallization_aids=False))
    assert (dropped.n_built, dropped.n_rebuilt) == (1, 1), dropped
    assert _stored_so4_tokens(store) == 0
