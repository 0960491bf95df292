"""Settings of the features service (RECSERVE_FEATURES_* variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class FeaturesSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_FEATURES_", extra="ignore", frozen=True)

    port: int = Field(50052, ge=1, le=65535)
