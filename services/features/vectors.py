"""Users' vectors computed again, off the request path, after an event
changed their profile: the stored vector stops matching the new profile at
once (recserve_model.profile_key), so the next Recommend embeds on the way
(as before stored vectors); meanwhile this asks the ranker's EmbedUser,
which answers with the version the user is on, and pushes the vector with
the new profile's key through Feast, so the Recommend after that skips the
embed stage again. Users are taken in batches as they come; a user whose
profile changes again before their vector is written is computed again
(the key says which profile a vector is for, never a stale one served)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime

import grpc
import numpy as np
import pandas as pd
from feast import FeatureStore
from feast.data_source import PushMode
from prometheus_client import Counter

from recserve.features.v1 import features_pb2 as fpb
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_feast.repo import VECTOR_PUSH_SOURCE
from recserve_kit import transport
from recserve_kit.tracing import outbound_metadata
from recserve_model.profile_key import profile_key
from services.features.config import FeaturesSettings
from services.features.records import UserRecord
from services.features.users import UserReader

log = logging.getLogger(__name__)
WRITTEN = Counter(
    "recserve_features_user_vectors_total",
    "User vectors computed again after an event: written, or failed (embedded on the way).",
    ["result"],
)
BATCH = 64
CONCURRENT_EMBEDS = 4  # the ranker's serving comes first
MAX_PENDING = 100_000  # beyond it a changed user is embedded on the way until their next event


class VectorRefresher:
    def __init__(self, store: FeatureStore, settings: FeaturesSettings, users: UserReader) -> None:
        self.store = store
        self.users = users
        self.timeout_s = settings.embed_timeout_s
        self.channel = (
            transport.aio_channel(settings.ranker_addr, settings.tls("features"))
            if settings.ranker_addr
            else None
        )
        self.pending: dict[str, None] = {}  # users to compute, in arrival order
        self._task: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()
        self.idle.set()

    def changed(self, user_ids: Iterable[str]) -> None:
        """These users' profiles changed: compute their vectors again, soon."""
        if self.channel is None or not self.users.stores_vectors():
            return
        for user_id in user_ids:
            if len(self.pending) >= MAX_PENDING:
                WRITTEN.labels("skipped").inc()
                continue
            self.pending[user_id] = None
        if self._task is None or self._task.done():
            self.idle.clear()
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self.pending:
                batch = list(self.pending)[:BATCH]
                for user_id in batch:
                    self.pending.pop(user_id, None)
                try:
                    await self._refresh(batch)
                except Exception:
                    # The store or a read failed: these users' stale vectors
                    # are never served (their key no longer matches); they
                    # are embedded on the way until their next event.
                    WRITTEN.labels("failed").inc(len(batch))
                    log.exception("cannot compute %d users' vectors", len(batch))
        finally:
            self.idle.set()

    async def _refresh(self, user_ids: list[str]) -> None:
        records = await asyncio.to_thread(self.users.read, user_ids)
        # Unknown users, and those whose stored vector already fits, need none.
        todo = [r for r in records if r.found and not r.vector_f32]
        limit = asyncio.Semaphore(CONCURRENT_EMBEDS)

        async def embed(record: UserRecord) -> dict[str, object] | None:
            async with limit:
                try:
                    vector, version = await self._embed(record)
                except grpc.aio.AioRpcError as exc:
                    WRITTEN.labels("failed").inc()
                    log.warning(
                        "cannot compute a user's vector: %s", exc.code().name,
                        extra={"fields": {"user_id": record.user_id}},
                    )  # fmt: skip
                    return None
            return row(record, vector, version)

        rows = [r for r in await asyncio.gather(*(embed(r) for r in todo)) if r is not None]
        if rows:
            frame = pd.DataFrame(rows)
            await asyncio.to_thread(self.store.push, VECTOR_PUSH_SOURCE, frame, to=PushMode.ONLINE)
            WRITTEN.labels("written").inc(len(rows))

    async def _embed(self, record: UserRecord) -> tuple[np.ndarray, str]:
        assert self.channel is not None
        stub = ranker_pb2_grpc.RankerServiceStub(self.channel)
        profile = fpb.UserFeatures(
            user_id=record.user_id,
            found=record.found,
            age=record.age,
            gender=record.gender,
            occupation=record.occupation,
            rating_count=record.rating_count,
            mean_rating=record.mean_rating,
            recent_item_ids=record.recent_item_ids,
            attributes=record.attributes,
        )
        reply = await stub.EmbedUser(
            rpb.EmbedUserRequest(user=profile),
            timeout=self.timeout_s,
            metadata=outbound_metadata(),
        )
        return np.frombuffer(reply.vector_f32, "<f4"), reply.model_version

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.channel is not None:
            await self.channel.close()


def row(record: UserRecord, vector: np.ndarray, version: str) -> dict[str, object]:
    key = profile_key(
        record.age,
        record.gender,
        record.occupation,
        record.rating_count,
        record.mean_rating,
        record.recent_item_ids,
        record.attributes,
    )
    return {
        "user_id": record.user_id,
        "vector": vector.astype(np.float32).tolist(),
        "model_version": version,
        "profile_key": key,
        "event_timestamp": datetime.now(UTC),
    }
