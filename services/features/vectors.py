"""Users' vectors computed again, off the request path, after an event
changed their profile: the stored vector stops matching the new profile at
once (recserve_model.profile_key), so the next Recommend embeds on the way
(as before stored vectors); meanwhile this asks the ranker's EmbedUsers
(many users a call), which answers with the version each user is on, and
writes the vectors with the new profile's keys to the online store, so
the Recommend after that skips the embed stage again. Users are taken in
rounds (every user changed since the last, then a rest of at least a
second): a user whose profile changes again meanwhile is computed once
more in the next round (the key says which profile a vector is for, never
a stale one served)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import grpc
import numpy as np
from prometheus_client import Counter

from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve.ranker.v1 import ranker_pb2_grpc
from recserve_kit import transport
from recserve_kit.tracing import outbound_metadata
from recserve_model.profile_key import profile_key
from services.features.config import FeaturesSettings
from services.features.messages import user_message
from services.features.records import UserRecord
from services.features.users import UserReader, profile_record

log = logging.getLogger(__name__)
WRITTEN = Counter(
    "recserve_features_user_vectors_total",
    "User vectors computed again after an event: written, or failed (embedded on the way).",
    ["result"],
)
BATCH = 256  # users a call: the most the ranker's EmbedUsers takes
MAX_PENDING = 100_000  # beyond it a changed user is embedded on the way until their next event
REST_S = 1.0  # between rounds at least; as long as a slow round took, up to
MAX_REST_S = 2.0


class VectorRefresher:
    def __init__(self, settings: FeaturesSettings, users: UserReader) -> None:
        self.users = users
        self.timeout_s = settings.embed_timeout_s
        self.channel = (
            transport.aio_channel(settings.ranker_addr, settings.tls("features"))
            if settings.ranker_addr
            else None
        )
        # Users to compute, in arrival order, with their newest activity.
        self.pending: dict[str, Mapping[str, Any]] = {}
        self._task: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()
        self.idle.set()

    def changed(self, activities: Mapping[str, Mapping[str, Any]]) -> None:
        """These users' activity (the user_activity columns just written)
        changed their profiles: compute their vectors again, soon."""
        if self.channel is None or not self.users.stores_vectors():
            return
        for user_id, activity in activities.items():
            if len(self.pending) >= MAX_PENDING and user_id not in self.pending:
                WRITTEN.labels("skipped").inc()
                continue
            self.pending[user_id] = activity  # the newest, in first-changed order
        if self._task is None or self._task.done():
            self.idle.clear()
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self.pending:
                # A round: every user changed since the last, in batches;
                # then a rest, so that a user who changes again meanwhile
                # (a busy user, under a flood) is computed once a round.
                todo, self.pending = self.pending, {}
                started = time.monotonic()
                users = iter(todo)
                while batch := {u: todo[u] for u in itertools.islice(users, BATCH)}:
                    await self._refresh_or_log(batch)
                if self.pending:
                    await asyncio.sleep(min(max(time.monotonic() - started, REST_S), MAX_REST_S))
        finally:
            self.idle.set()

    async def _refresh_or_log(self, batch: Mapping[str, Mapping[str, Any]]) -> None:
        try:
            await self._refresh(batch)
        except Exception:
            # The store or a read failed: these users' stale vectors are
            # never served (their key no longer matches); they are embedded
            # on the way until their next event.
            WRITTEN.labels("failed").inc(len(batch))
            log.exception("cannot compute %d users' vectors", len(batch))

    async def _refresh(self, activities: Mapping[str, Mapping[str, Any]]) -> None:
        # The profile from the store, the activity as just written (not read
        # back: the seen items are most of a user's row).
        ids = list(activities)
        profiles = await asyncio.to_thread(self.users.profile.read, ids)
        todo = [profile_record(u, p, activities[u]) for u, p in zip(ids, profiles, strict=True)]
        try:
            embedded = await self._embed(todo)
        except grpc.aio.AioRpcError as exc:
            WRITTEN.labels("failed").inc(len(todo))
            log.warning("cannot compute %d users' vectors: %s", len(todo), exc.code().name)
            return
        rows = {
            r.user_id: row(r, e.vector_f32, e.model_version)
            for r, e in zip(todo, embedded, strict=True)
        }
        await asyncio.to_thread(self.users.vectors.write, rows, datetime.now(UTC))
        WRITTEN.labels("written").inc(len(rows))

    async def _embed(self, records: list[UserRecord]) -> list[rpb.EmbeddedUser]:
        """The users' vectors, one call to the ranker (one Triton call a version)."""
        assert self.channel is not None
        stub = ranker_pb2_grpc.RankerServiceStub(self.channel)
        profiles = [user_message(record) for record in records]
        reply = await stub.EmbedUsers(
            rpb.EmbedUsersRequest(users=profiles),
            timeout=self.timeout_s,
            metadata=outbound_metadata(),
        )
        return list(reply.users)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.channel is not None:
            await self.channel.close()


def row(record: UserRecord, vector_f32: bytes, version: str) -> dict[str, object]:
    """The user_vectors features of one user's vector, for the profile it was computed for."""
    key = profile_key(
        record.age,
        record.gender,
        record.occupation,
        record.rating_count,
        record.mean_rating,
        record.recent_item_ids,
        record.attributes,
    )
    vector = np.frombuffer(vector_f32, "<f4").tolist()
    return {"vector": vector, "model_version": version, "profile_key": key}
