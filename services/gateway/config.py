"""Settings of the gateway service (RECSERVE_GATEWAY_* variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_GATEWAY_", extra="ignore", frozen=True)

    port: int = Field(50051, ge=1, le=65535)
    features_addr: str = "127.0.0.1:50052"
    retriever_addr: str = "127.0.0.1:50053"
    ranker_addr: str = "127.0.0.1:50054"
