"""Build configuration: everything that changes the stored bytes goes into the config hash."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from featurecache.const import DEFAULT_MSA_DEPTH_CAP, FEATURIZER_VERSION


@dataclass(frozen=True)
class BuildConfig:
    msa_depth_cap: int = DEFAULT_MSA_DEPTH_CAP
    conformer_timeout_s: float = 20.0
    interface_cutoff: float = 5.0
    #: keep an X-ray structure's crystallization aids (``const.CRYSTALLIZATION_AIDS``; AF3 removes them)
    keep_crystallization_aids: bool = False

    def feature_dict(self) -> dict[str, object]:
        """Fields that change structure-entry features (the entry key covers these)."""
        return {"interface_cutoff": self.interface_cutoff, "featurizer_version": FEATURIZER_VERSION,
                "keep_crystallization_aids": self.keep_crystallization_aids}  # fmt: skip

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def entry_config_hash(self, ccd_fingerprint: str = "") -> str:
        doc = {**self.feature_dict(), "ccd": ccd_fingerprint}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def settings_left_out(store: Path, given: set[str], msa_dir: Path | None = None) -> list[str]:
    """The settings ``store`` records from its builds that this build leaves out (``given``: the
    options given on its command line, by flag; ``msa_dir``: its ``--msa-dir``), each as the line
    saying how to keep or change it.

    A build without an option builds at its default: over a store built with ``--ccd`` (or
    ``--msa-depth 64``, ``--keep-cryst-aids``, another ``--conformer-timeout``) that rebuilt every
    entry or MSA under other settings, silently, for hours on a large store, and the new entries
    replaced the served ones (review R15 s40 #2). Nothing for a store not built yet, or built at the
    defaults."""
    from featurecache.errors import StoreError
    from featurecache.store.info import recorded_build_inputs
    from featurecache.store.root import group_attributes

    meta = Path(store) / "zarr.json"
    try:
        attrs = group_attributes(meta) if meta.is_file() else {}
    except StoreError:  # a damaged root: the build names it
        return []
    config = attrs.get("config")
    if not isinstance(config, dict):
        return []
    defaults = BuildConfig()
    out: list[str] = []
    if "--msa-depth" not in given and msa_dir is not None:
        out += _msa_depth_left_out(store, msa_dir, config.get("msa_depth_cap", defaults.msa_depth_cap))
    timeout = config.get("conformer_timeout_s", defaults.conformer_timeout_s)
    if "--conformer-timeout" not in given and timeout != defaults.conformer_timeout_s:
        out.append(f"it was built with --conformer-timeout {timeout:g}: give --conformer-timeout {timeout:g} to "
                   f"keep its conformers (--conformer-timeout {defaults.conformer_timeout_s:g}, or another, "
                   "changes it)")  # fmt: skip
    if (
        not given & {"--keep-cryst-aids", "--drop-cryst-aids"}
        and config.get("keep_crystallization_aids") is True
    ):
        out.append("it was built with --keep-cryst-aids: give --keep-cryst-aids to keep its entries "
                   "(--drop-cryst-aids rebuilds every X-ray entry without them)")  # fmt: skip
    if "--ccd" not in given and "--no-ccd" not in given:
        recorded = recorded_build_inputs(attrs)
        if recorded["ccd"] is not None:
            out.append(f"it was built with --ccd {recorded['ccd']['path']}: give --ccd to keep its entries "
                       "(--no-ccd rebuilds every entry with a ligand or modified residue without CCD "
                       "definitions)")  # fmt: skip
    return out


def _msa_depth_left_out(store: Path, msa_dir: Path, recorded: int) -> list[str]:
    """The line for the MSAs from ``msa_dir`` that a build at the default ``--msa-depth`` rebuilds to
    other rows than they hold (cut by a smaller cap), if any. The root records only the latest
    build's cap (an extension with another overwrites it), so the MSAs' own depths decide
    (``verify.msas_from_files``), as they do for the rebuild command verify prints."""
    from featurecache.store.verify import changed_by_cap, msas_from_files

    default = BuildConfig().msa_depth_cap
    rows = msas_from_files(store, {str(Path(msa_dir).resolve())}) or []
    cut = changed_by_cap(rows, default)
    if not cut:
        return []
    keeps = recorded if not changed_by_cap(cut, recorded) else None
    depths = sorted({int(r["depth"]) for r in cut})
    what = (f"give --msa-depth {keeps} to keep them" if keeps is not None
            else f"give the --msa-depth they were built with (cut to {', '.join(map(str, depths[-3:]))} rows)")  # fmt: skip
    return [f"{len(cut)} of its MSAs from {msa_dir} were cut to fewer rows than their files hold (the latest "
            f"build's --msa-depth: {recorded}); without --msa-depth they are rebuilt at {default}: {what} "
            f"(--msa-depth {default}, or another, rebuilds them at that depth)"]  # fmt: skip
