"""Build configuration: everything that changes the stored bytes goes into the config hash."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

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
