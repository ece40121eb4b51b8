"""The model's hyper-parameters, one frozen dataclass that round-trips through JSON.

The memory planner (``featurecache plan --model-config``) reads the same file, so every size that
drives activation memory lives here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from featurecache.const import NUM_RESTYPES
from featurecache.errors import UsageError


def pad16(n: int) -> int:
    """n rounded up to a multiple of 16: the bias-head columns of the trunk's attention projections
    (and the memory planner's model of them), so the row stride of the q, k, v views is a multiple
    of 16 elements. The Triton kernels specialise integer strides on divisibility by 16; with a row
    stride of 4·H·D + 8 = 520 the attention kernels read q, k, v tiles with 2-byte scalar loads
    instead of 16-byte async copies (sass.py --qkv-row-stride 520: forward loop 1187 -> 1458
    instructions) and ran 2-3x slower inside the trunk than in benchmarks/kernels.py (run 45)."""
    return -(-n // 16) * 16


#: the largest value each size may take (AF3: 48 blocks, 4 and 16 heads, n = 4, 64 bins, clips 32 and 2)
UPPER_BOUNDS = {"n_blocks": 512, "n_heads": 64, "transition_n": 16, "distogram_bins": 1024, "relpos_max": 4096,
                "relchain_max": 4096}  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the Pairformer-style trunk (AF3 values in brackets).

    A value the trunk cannot run, or would train wrong with (a mistyped field, a clip below 0,
    distogram edges out of order, fewer than 2 bins), is a :class:`~featurecache.errors.UsageError`
    naming the field. Integers are taken for the float fields (JSON's 2 for 2.0).

    ``n_heads`` × ``head_dim`` is the width of the triangle attention (4 × 32); the single-track
    attention with pair bias uses ``n_heads_single`` heads of ``c_token / n_heads_single``.
    """

    c_token: int = 128  # single representation [384]
    c_pair: int = 128  # pair representation [128]
    n_blocks: int = 4  # Pairformer blocks [48]
    n_heads: int = 4  # triangle-attention heads [4]
    head_dim: int = 32  # triangle-attention head dim [32]
    n_heads_single: int = 4  # single attention with pair bias heads [16 of 24]
    transition_n: int = 4  # transition expansion factor n [4]
    distogram_bins: int = 64  # [64]
    #: Å: the bins split [distogram_min, distogram_max] into equal widths, the first and last open
    #: below / above (AF3's distogram head: 64 bins, breaks 2.3125 … 21.6875 Å, 0.3125 Å apart) [2, 22]
    distogram_min: float = 2.0
    distogram_max: float = 22.0
    relpos_max: int = 32  # relative position clip r_max [32]
    relchain_max: int = 2  # relative chain clip s_max [2]
    msa_classes: int = 32  # restype / MSA alphabet
    eps: float = 1e-5  # LayerNorm epsilon

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise UsageError(f"model config: {f.name} must be an integer; got {value!r}")
            if f.type in ("float", float):
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise UsageError(f"model config: {f.name} must be a number; got {value!r}")
                if not math.isfinite(value):
                    raise UsageError(f"model config: {f.name} must be a finite number; got {value!r}")
                object.__setattr__(self, f.name, float(value))  # 2 in a JSON file means 2.0
        for name in ("c_token", "c_pair", "n_blocks", "n_heads", "n_heads_single", "transition_n"):
            if getattr(self, name) < 1:
                raise UsageError(f"model config: {name} must be ≥ 1; got {getattr(self, name)}")
        # far above AF3's (in brackets above) and this trunk's; past them a config is a typo, which
        # would overflow the memory planner's integers or plan for minutes (review R9 F4)
        for name, most in UPPER_BOUNDS.items():
            if getattr(self, name) > most:
                raise UsageError(f"model config: {name} must be ≤ {most}; got {getattr(self, name)}")
        if self.head_dim not in (16, 32, 64):
            raise UsageError(
                f"model config: head_dim must be 16, 32 or 64 (the kernel's); got {self.head_dim}"
            )
        if self.c_token % self.n_heads_single or (self.c_token // self.n_heads_single) not in (16, 32, 64):
            raise UsageError(
                "model config: c_token / n_heads_single must be 16, 32 or 64; "
                f"got {self.c_token} / {self.n_heads_single}"
            )
        if max(self.c_token, self.c_pair) > 512:
            raise UsageError(
                "model config: c_token and c_pair must be ≤ 512 (fused LayerNorm+Linear keeps a row in registers)"
            )
        if self.msa_classes != NUM_RESTYPES:  # the profile and one-hot widths of every batch
            raise UsageError(
                f"model config: msa_classes must be {NUM_RESTYPES} (the featurizer's residue classes); "
                f"got {self.msa_classes}"
            )
        for name in ("relpos_max", "relchain_max"):  # a clip below 0 indexes outside the embedding
            if getattr(self, name) < 0:
                raise UsageError(f"model config: {name} must be ≥ 0; got {getattr(self, name)}")
        # one bin learns nothing (the loss is 0), and edges out of order put every pair in one bin
        if self.distogram_bins < 2:
            raise UsageError(f"model config: distogram_bins must be ≥ 2; got {self.distogram_bins}")
        if self.distogram_min < 0:
            raise UsageError(f"model config: distogram_min must be ≥ 0 Å; got {self.distogram_min}")
        if self.distogram_min >= self.distogram_max:
            raise UsageError(
                "model config: need distogram_min < distogram_max (the range the bins split); "
                f"got {self.distogram_min} and {self.distogram_max}"
            )
        if self.eps <= 0:
            raise UsageError(f"model config: eps must be > 0; got {self.eps}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"model config: unknown keys {unknown}")
        return cls(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        """The config as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, path_or_text: str | Path) -> ModelConfig:
        """Read a config from a JSON file (or JSON text starting with ``{``). Every refusal is one
        UsageError line naming the option and the file: ``--model-config PATH: not valid JSON (…)``,
        ``--model-config PATH: unknown keys ['bogus']``, ``--model-config PATH: eps must be > 0; …``."""
        text = str(path_or_text)
        where = "--model-config (JSON text)"
        if not text.lstrip().startswith("{"):
            where = f"--model-config {path_or_text}"
            try:
                text = Path(path_or_text).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"{where}: cannot read it: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            where_in = f"line {exc.lineno} column {exc.colno}"
            raise UsageError(f"{where}: not valid JSON ({exc.msg} at {where_in})") from exc
        if not isinstance(data, dict):
            kinds = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
            got = kinds.get(type(data), "a number")
            raise UsageError(f'{where}: must be a JSON object ({{"c_token": 128, …}}), not {got}')
        try:
            return cls.from_dict(data)
        except UsageError as exc:
            # a field's refusal ("model config: eps must be > 0; …"): the file named too
            raise UsageError(f"{where}: {str(exc).removeprefix('model config: ')}") from exc
