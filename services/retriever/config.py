"""Settings of the retriever service (RECSERVE_RETRIEVER_* variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class RetrieverSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_RETRIEVER_", extra="ignore", frozen=True)

    port: int = Field(50053, ge=1, le=65535)
