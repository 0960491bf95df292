"""Settings of the features service (RECSERVE_FEATURES_* variables)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from recserve_feast.stores import redis_connection
from recserve_kit.config import ServiceSettings


class FeaturesSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_FEATURES_", extra="ignore", frozen=True)

    port: int = Field(50052, ge=0, le=65535, description="The features service's gRPC port.")
    redis_url: str = Field(
        "",
        description="Redis online store (host:port[,db=N] or redis://host:port[/db]); "
        "empty uses SQLite under <data_dir>/feast.",
    )
    max_item_ids: int = Field(
        1000, ge=1, le=10000, description="Most item ids one GetItemFeatures call may ask for."
    )
    max_events: int = Field(
        10_000,
        ge=1,
        le=100_000,
        description="Most events one PushUserEvents call may carry (the gateways merge up to "
        "10,000 kept events a call).",
    )
    item_cache_size: int = Field(200_000, ge=0, description="Items kept in the in-process cache.")
    item_cache_ttl_s: float = Field(
        300.0, gt=0, description="Seconds an item stays in the in-process cache."
    )
    refresh_interval_s: float = Field(
        5.0, ge=0, description="How often to look for a newly published artifact; 0 disables."
    )
    publish: bool = Field(
        True,
        description="Publish the current artifact's features to the online store when it "
        "changes; false: only read what another features process publishes (each further "
        "request-path process of the local stack), which it follows within "
        "refresh_interval_s.",
    )
    ranker_addr: str = Field(
        "",
        description="The ranker, whose user tower computes a user's vector again after an "
        "event changed their profile (off the request path); empty: not computed again, "
        "so such a user is embedded on the way until the next build.",
    )
    embed_timeout_s: float = Field(
        2.0,
        gt=0,
        description="Cap on each EmbedUsers call to the ranker (users' vectors after events).",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_address(cls, value: str) -> str:
        # Checked at start: a bad address used to crash at the first lookup.
        return redis_connection(value) if value else value
