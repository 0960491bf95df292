"""Settings of the ranker service (RECSERVE_RANKER_* variables)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class RankerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_RANKER_", extra="ignore", frozen=True)

    port: int = Field(50054, ge=0, le=65535, description="The ranker's gRPC port.")
    triton_url: str = Field("127.0.0.1:8001", description="Triton's gRPC address.")
    features_addr: str = Field(
        "127.0.0.1:50052",
        description="The features service, whose item catalogue the ranker's table follows.",
    )
    ranking_model: str = Field("ranker", description="'ranker' (fp32) or 'ranker_int8'.")
    user_model: str = Field(
        "user_tower", description="Triton model that embeds a user (EmbedUser)."
    )
    item_model: str = Field(
        "item_tower", description="Triton model that embeds an item (EmbedItems)."
    )
    max_candidates: int = Field(
        1000, ge=1, le=10000, description="Most candidates one Score call may carry."
    )
    triton_timeout_s: float = Field(
        0.5, gt=0, description="Cap on one Triton call; the caller's deadline can shorten it."
    )
    triton_client_timeout_s: float = Field(
        10.0,
        gt=0,
        description="gRPC deadline of a Triton call: a backstop only, far past "
        "triton_timeout_s, since Triton 2.51 can crash on cancelled requests.",
    )
    max_abandoned_calls: int = Field(
        64,
        ge=1,
        description="Triton calls that finished too late for their caller but still run; "
        "past this many, new calls fail at once (UNAVAILABLE) until Triton catches up.",
    )
    health_interval_s: float = Field(
        1.0, gt=0, description="How often Triton's readiness is checked (2 calls each time)."
    )
    triton_metrics_url: str = Field(
        "http://127.0.0.1:8002/metrics",
        description="Triton's Prometheus endpoint: its memory, for the rollout judge; "
        "empty: memory is not judged.",
    )
    rollout_interval_s: float = Field(
        1.0, gt=0, description="How often the rollout judge looks; outside a rollout, CURRENT."
    )
    advertise_addr: str = Field(
        "",
        description="Where the other ranker replicas reach this one (host:port) with the "
        "operator actions they forward to the rollout's writer; empty: host:port as bound, "
        "or for a wildcard bind (0.0.0.0) the address this host's name resolves to.",
    )
    rollout_steps_percent: list[float] = Field(
        [5.0, 25.0, 50.0, 100.0], description="Default steps of a rollout (users on the candidate)."
    )
    rollout_soak_s: float = Field(60.0, ge=0, description="Default time each step is held.")
    rollout_min_requests: int = Field(
        50, ge=1, description="Default candidate requests a step needs before it is promoted."
    )
    rollout_max_p99_ms: float = Field(
        150.0, gt=0, description="Default limit: a candidate whose p99 is above it is rolled back."
    )
    rollout_max_error_rate: float = Field(
        0.005,
        ge=0,
        le=1,
        description="Default limit on a candidate's error rate (errors and non-finite scores).",
    )
    rollout_max_memory_fraction: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Default limit on Triton's memory (the fullest GPU's, or the host's), "
        "as a fraction.",
    )
    shadow_max_in_flight: int = Field(
        2, ge=1, description="Shadow scorings at once; more are dropped (and counted)."
    )
    shadow_timeout_s: float = Field(1.0, gt=0, description="Cap on one shadow scoring.")
    triton_repository: Path | None = Field(
        None,
        description="Model repository (for versions.json); default <data_dir>/triton/repository.",
    )

    @property
    def repository(self) -> Path:
        return self.triton_repository or self.data_dir / "triton" / "repository"
