"""Settings of the features service (RECSERVE_FEATURES_* variables)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings

REDIS_ADDRESS = re.compile(r"[A-Za-z0-9._-]+:\d{1,5}(,[a-z_]+=[^,]*)*")


def redis_connection(url: str) -> str:
    """Feast's Redis connection string (``host:port[,db=N,...]``) from that
    form or a ``redis://host:port[/db]`` URL; ValueError for anything else
    (issue 19: Compose passed a URL, which crashed Feast at first use)."""
    if url.startswith("redis://"):
        parts = urlsplit(url)
        if not parts.hostname or not parts.port:
            raise ValueError(f"{url!r}: a Redis URL needs a host and a port")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise ValueError(f"{url!r}: the database must be a number, got {db!r}")
        return f"{parts.hostname}:{parts.port}" + (f",db={db}" if db else "")
    if not REDIS_ADDRESS.fullmatch(url):
        raise ValueError(f"{url!r}: expected host:port[,db=N] or redis://host:port[/db]")
    return url


class FeaturesSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_FEATURES_", extra="ignore", frozen=True)

    port: int = Field(50052, ge=0, le=65535)
    redis_url: str = Field(
        "",
        description="Redis online store (host:port[,db=N] or redis://host:port[/db]); "
        "empty uses SQLite under <data_dir>/feast.",
    )
    max_item_ids: int = Field(1000, ge=1, le=10000)
    max_events: int = Field(1000, ge=1, le=100000)
    item_cache_size: int = Field(200_000, ge=0, description="Items kept in the in-process cache.")
    item_cache_ttl_s: float = Field(300.0, gt=0)
    refresh_interval_s: float = Field(
        5.0, ge=0, description="How often to look for a newly published artifact; 0 disables."
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_address(cls, value: str) -> str:
        # Checked at start: a bad address used to crash at the first lookup.
        return redis_connection(value) if value else value
