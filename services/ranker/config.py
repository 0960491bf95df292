"""Settings of the ranker service (RECSERVE_RANKER_* variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class RankerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_RANKER_", extra="ignore", frozen=True)

    port: int = Field(50054, ge=1, le=65535)
    triton_url: str = Field("127.0.0.1:8001", description="Triton's gRPC address.")
