"""Service settings from the environment (prefix ``FEATURECACHE_``), e.g. ``FEATURECACHE_AUTH_TOKEN``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from featurecache.const import DEFAULT_MSA_DEPTH_CAP


class Settings(BaseSettings):
    """Every knob of the lookup service. Limits answer 413/422 naming the limit when exceeded."""

    model_config = SettingsConfigDict(env_prefix="FEATURECACHE_", extra="ignore")

    store_path: Path = Field(
        default=Path("/store"), description="Store directory, opened read-only; reopened when it changes."
    )
    auth_token: SecretStr | None = Field(
        default=None,
        description="Bearer token required on every route but /v1/health and the API docs (/docs, "
        "/redoc, /openapi.json); /metrics needs it too. Empty or unset: no auth.",
    )
    max_batch_entries: int = Field(default=256, ge=1, description="Entries per POST /v1/entries:batch.")
    max_response_bytes: int = Field(
        default=256 * 2**20,
        ge=1,
        description="Array bytes one entries response may carry (estimated from the index).",
    )
    max_page_size: int = Field(default=1000, ge=1, description="Rows per page of GET /v1/entries.")
    max_msa_rows: int = Field(default=DEFAULT_MSA_DEPTH_CAP, ge=1, description="Rows per MSA slice.")
    max_msa_cols: int = Field(default=10_000, ge=1, description="Columns per MSA slice.")
    max_msa_cells: int = Field(default=2**25, ge=1, description="rows × cols per MSA slice.")
    max_body_bytes: int = Field(
        default=2**20, ge=1, description="Request body size (JSON of a batch or an MSA slice)."
    )
    store_retry_seconds: float = Field(
        default=5.0, ge=0, description="Wait between attempts to open a store that failed to open."
    )
    store_check_seconds: float = Field(
        default=1.0,
        ge=0,
        description="Longest wait before a rebuilt index is noticed and served (0: on every request). "
        "The store's root zarr.json is checked on every request whatever this is.",
    )

    @field_validator("auth_token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value: object) -> object:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return value

    def limits(self) -> dict[str, int]:
        """The limits a client may want to know (GET /v1/info, ``service.limits``)."""
        return {
            name: getattr(self, name)
            for name in (
                "max_batch_entries", "max_response_bytes", "max_page_size", "max_msa_rows",
                "max_msa_cols", "max_msa_cells", "max_body_bytes",
            )
        }  # fmt: skip
