"""Settings of the gateway service (RECSERVE_GATEWAY_* variables)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_GATEWAY_", extra="ignore", frozen=True)

    port: int = Field(50051, ge=0, le=65535, description="The gateway's gRPC port.")
    features_addr: str = Field(
        "127.0.0.1:50052", description="The features service's gRPC address."
    )
    retriever_addr: str = Field(
        "127.0.0.1:50053", description="The retriever service's gRPC address."
    )
    ranker_addr: str = Field("127.0.0.1:50054", description="The ranker service's gRPC address.")
    # The latency budget: 100 ms end to end inside a 120 ms p99 objective,
    # split into per-stage caps. A call gets the smaller of its cap and what
    # remains of the request's budget.
    budget_ms: float = Field(
        100.0,
        gt=0,
        le=10_000,
        description="End-to-end budget of a request; the time it queued before the "
        "gateway counts against it.",
    )
    features_ms: float = Field(15.0, gt=0, description="Cap on the features stage.")
    embed_ms: float = Field(
        15.0, gt=0, description="Cap on the embed stage (the ranker's user tower)."
    )
    retrieve_ms: float = Field(15.0, gt=0, description="Cap on the retrieval stage.")
    rank_ms: float = Field(30.0, gt=0, description="Cap on the ranking stage.")
    min_stage_ms: float = Field(
        1.0, gt=0, description="Below this much budget a stage is not attempted: fallback."
    )
    candidates: int = Field(200, ge=1, le=1000, description="Retrieved before ranking.")
    user_vector_cache_size: int = Field(
        50_000,
        ge=0,
        description="User vectors kept, keyed by the profile the user tower reads and the "
        "model version (never stale); a hit skips the embed stage. 0: off.",
    )
    max_in_flight: int = Field(
        64, ge=1, description="Requests served at once; past it, answered from the fallback."
    )
    min_in_flight: int = Field(
        2,
        ge=1,
        description="The bound on requests in flight is learned from latency (AIMD) between "
        "this and max_in_flight; equal to max_in_flight, a fixed bound.",
    )
    # Half the budget: at 200/s on 2 cores it halved p99 against a fixed
    # bound and served the most full answers; 30 ms cut p99 further but shed
    # more at 100/s (docs/benchmarks.md, "Overload: a fixed bound ...").
    limit_target_ms: float = Field(
        50.0,
        gt=0,
        description="A request slower than this end to end (or with a stage timeout) "
        "lowers the adaptive bound.",
    )
    limit_recovery_s: float = Field(
        1.0,
        gt=0,
        description="After this long without a late request or stage timeout, the adaptive "
        "bound is back at max_in_flight: a burst after a quiet spell is not shed.",
    )
    # A queue that was empty just before (a burst) may hold a request most
    # of the budget; one that stands (overload) a quarter (limiter.QueueWait).
    # A burst of 32 after a quiet spell: 6-7 served whole with 25 ms alone,
    # 16-22 with 75 ms for a burst; 400/s as before (docs/benchmarks.md,
    # "A burst's queue and a standing one").
    max_queue_ms: float = Field(
        25.0,
        gt=0,
        description="Under overload (the queue before the gateway not empty for "
        "burst_queue_ms), a request that waited longer than this between Envoy "
        "(x-request-start) and the gateway is answered at once from the fallback (SHED): "
        "the queue, not the stages, is where the time goes.",
    )
    burst_queue_ms: float = Field(
        75.0,
        gt=0,
        description="While the queue before the gateway has been empty within this many ms "
        "(a request waited under 5 ms: a burst, not overload), a request may have waited up "
        "to this long and still take the full path; past it, SHED.",
    )
    fallback_refresh_s: float = Field(5.0, ge=0, description="How often to reload popular lists.")
    impressions: bool = Field(
        True,
        description="Record what each answer showed (its impression) under "
        "data_dir/events/impressions, off the request path.",
    )
    impression_queue: int = Field(
        100_000,
        ge=1,
        description="Impressions held in memory for the log writer; past it they are "
        "dropped and counted (recserve_gateway_impressions_total{outcome=dropped}).",
    )
    impressions_keep_days: int = Field(
        30,
        ge=0,
        description="Days of impressions kept under data_dir/events/impressions (the outcome "
        "report, the guardrail and experiments read them); older days go as a new day "
        "begins. 0: keep every day.",
    )
    live_update_queue: int = Field(
        20_000,
        ge=1,
        description="Kept events waiting for the features service (the users' live features); "
        "past it they are kept but not applied live, and counted "
        "(recserve_gateway_event_online_updates_total{outcome=dropped}): how stale live "
        "features may get under an event flood.",
    )

    @model_validator(mode="after")
    def stages_fit_budget(self) -> GatewaySettings:
        total = self.features_ms + self.embed_ms + self.retrieve_ms + self.rank_ms
        if total > self.budget_ms * 1.5:
            raise ValueError(f"stage budgets add up to {total} ms, far over budget_ms")
        if self.min_in_flight > self.max_in_flight:
            raise ValueError("min_in_flight is above max_in_flight")
        if not self.max_queue_ms <= self.burst_queue_ms < self.budget_ms:
            raise ValueError("need max_queue_ms <= burst_queue_ms < budget_ms")
        return self
