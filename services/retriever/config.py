"""Settings of the retriever service (RECSERVE_RETRIEVER_* variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from recserve_kit.config import ServiceSettings


class RetrieverSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RECSERVE_RETRIEVER_", extra="ignore", frozen=True)

    port: int = Field(50053, ge=0, le=65535, description="The retriever's gRPC port.")
    qdrant_url: str = Field(
        "",
        description="Qdrant server URL (gRPC used); empty selects the embedded Qdrant Edge "
        "shard under <data_dir>/qdrant. ':memory:' selects qdrant-client's local mode.",
    )
    collection: str = Field("items", description="Alias (server) / folder prefix (Edge).")
    hnsw_m: int = Field(
        16, ge=4, le=128, description="HNSW links per node, for a newly built generation."
    )
    hnsw_ef_construct: int = Field(
        128, ge=8, le=1024, description="HNSW build breadth, for a newly built generation."
    )
    search_ef: int = Field(128, ge=8, le=4096, description="Default HNSW search breadth.")
    candidate_sources: bool = Field(
        True,
        description="Answer a Search that sends the user's history with the artifact's "
        "item-to-item and popular candidates beside the nearest neighbours (what its ranker "
        "was trained on); false: nearest neighbours only, about half the retriever's CPU "
        "per search and a worse list (docs/benchmarks.md).",
    )
    max_k: int = Field(1000, ge=1, le=10000, description="Most hits one Search may ask for.")
    max_upsert_batch: int = Field(
        10000, ge=1, description="Most items one UpsertItems or DeleteItems call may carry."
    )
    refresh_interval_s: float = Field(
        5.0, ge=0, description="How often to look for a new artifact version; 0 disables."
    )
    ranker_addr: str = Field(
        "",
        description="The ranker, whose item tower embeds items upserted without a vector; "
        "empty: such an item is refused (FAILED_PRECONDITION).",
    )
    follow: bool = Field(
        False,
        description="A read-only follower of the writer retriever whose shards lie under the "
        "same data_dir (one request-path process per core): it rebuilds the writer's "
        "generations in shards of its own and replays the writer's change feed; writes and "
        "PrepareModelVersion sent to it are refused (FAILED_PRECONDITION).",
    )
    follow_interval_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often a follower looks for the writer's new writes besides when "
        "Linux reports them written (inotify: at once); where it cannot, the only look.",
    )
    embed_timeout_s: float = Field(
        5.0, gt=0, description="Cap on each EmbedItems call (of up to 1,000 items) to the ranker."
    )
