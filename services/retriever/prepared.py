"""A retrained model's items, ready before its rollout.

A model built with item vectors of its own (a retrain: new towers, a new
vector space) cannot be rolled out against the current generation: its
users' vectors would search another model's items. ``prepare`` builds the
version's generation in the background (PrepareModelVersion, which the
operator's ``rollout start`` calls until READY before the ranker moves any
user; READY once every live follower holds it too, ``followers.py``);
searches naming the version use it, and every write goes to it too. The
rollout's end decides its fate: promoted, the artifact becomes current
and the retriever switches to this generation without a rebuild
(``Retriever.refresh_from_artifacts``); rolled back, aborted or concluded,
it is dropped (``follow_rollout``). A version whose item vectors are the
current generation's (the current artifact, a rehearsal copy) needs none.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recserve_delivery import state as rollout_state
from recserve_kit.errors import FailedPrecondition, InvalidArgument, NotFound
from recserve_model import artifacts
from recserve_model.catalogue import CatalogueSchema
from recserve_model.encoding import EncodingSpec
from services.retriever import followers
from services.retriever.generations import Journal, Recorded
from services.retriever.store import VectorStore

if TYPE_CHECKING:
    from services.retriever.domain import Retriever

log = logging.getLogger(__name__)

ITEMS_FILE = artifacts.ITEM_VECTORS
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # a name under artifacts/, no path
BUILDING, READY = "BUILDING", "READY"
ENDED = frozenset({"rolled_back", "aborted", "concluded"})  # a rollout's ends but promotion


@dataclass
class Prepared:
    version: str
    items_sha256: str
    dimension: int
    store: VectorStore | None = None  # None while it is built
    asked_at: float = 0.0  # a rollout that ended before this is not its own
    task: asyncio.Task[None] | None = None
    error: str = ""  # why the last build failed


@dataclass(frozen=True)
class Preparation:
    state: str  # BUILDING or READY
    generation: str
    own_generation: bool


class Preparer:
    def __init__(self, retriever: Retriever) -> None:
        self.retriever = retriever

    async def prepare(self, version: str) -> Preparation:
        """Idempotent; starts the build on the first call (see the module)."""
        r = self.retriever
        if r.writer:
            raise FailedPrecondition(f"this retriever follows {r.writer}: prepare versions there")
        if not VERSION.fullmatch(version):
            raise InvalidArgument(
                "model_version", "an artifact version: 1 to 128 letters, digits, '-' or '_'"
            )
        directory = artifacts.artifacts_root(r.settings.data_dir) / version
        if not directory.is_dir():
            raise NotFound(f"model_version: no artifact {version!r}")
        held = r.prepared
        # The held version answers before any verification: `rollout start`
        # asks once a second, and hashing a 10^6-item artifact each time
        # would keep a core busy for the whole build.
        if held is not None and held.version == version:
            if held.store is not None:
                # A new rollout of it: one that ended before now is not its own.
                held.asked_at = time.time()
                self._record(held, held.store)
                if followers.lacking(r.generations.state_dir, held.store.generation):
                    return Preparation(BUILDING, "", own_generation=True)  # theirs still built
                return Preparation(READY, held.store.generation, own_generation=True)
            if held.task is not None and not held.task.done():
                return Preparation(BUILDING, "", own_generation=True)
        try:
            manifest = await asyncio.to_thread(artifacts.verify, directory)
        except artifacts.ArtifactError as exc:
            raise FailedPrecondition(f"model_version: {exc}") from None
        digest = artifacts.items_checksum(manifest)
        current = r._store()
        if digest and digest == r.items_sha256:
            return Preparation(READY, current.generation, own_generation=False)
        if held is not None:
            in_use = self._rollout_arms()
            if held.version in in_use:
                raise FailedPrecondition(
                    f"model_version: {held.version} is prepared for the running rollout "
                    f"(its users search its items); end that rollout before preparing {version}"
                )
            await self.drop(f"{version} is prepared instead")
        dimension = EncodingSpec.load(directory / "encoding.json").embedding_dim
        prepared = Prepared(version, digest, dimension, asked_at=time.time())
        schema = CatalogueSchema.load(directory)
        # Journaled from the moment writes start going to it (they skip a
        # store still being built), not from when the build gets its turn.
        r.prepared = prepared
        journal = r.journal_from_now(version)
        prepared.task = asyncio.create_task(
            self._build(prepared, directory / ITEMS_FILE, schema, journal)
        )
        return Preparation(BUILDING, "", own_generation=True)

    async def _build(
        self, prepared: Prepared, items_path: Any, schema: CatalogueSchema, journal: Journal
    ) -> None:
        r = self.retriever

        def install(store: VectorStore) -> None:
            if r.prepared is not prepared:  # dropped while it was built
                store.close()
                store.drop()
                return
            prepared.store = store
            self._record(prepared, store)
            log.info(
                "prepared model version",
                extra={"fields": {"version": prepared.version, "generation": store.generation}},
            )

        try:
            async with r._refresh_lock:
                await r.build_journaled(prepared.version, items_path, schema, install, journal)
        except Exception as exc:
            prepared.error = str(exc)
            log.exception("preparing %s failed", prepared.version)
        finally:
            r.forget_journal(journal)  # also when cancelled before its turn

    def _record(self, prepared: Prepared, store: VectorStore) -> None:
        """Kept across restarts, with the time it was last asked for."""
        recorded = Recorded(
            store.generation,
            store.dimension,
            prepared.version,
            prepared.items_sha256,
            prepared.asked_at,
            self.retriever.from_seqs.get(store.generation, 0),
        )
        self.retriever.generations.record_prepared(recorded)

    def _rollout_arms(self) -> list[str]:
        """The candidate versions of a rollout that is running or paused."""
        try:
            state = rollout_state.load(self.retriever.settings.data_dir)
        except rollout_state.RolloutStateError as exc:
            log.warning("cannot read the rollout state: %s", exc)
            return []
        return state.candidates if state is not None and state.active else []

    async def drop(self, reason: str) -> None:
        """Forgets the prepared version and removes its generation."""
        r = self.retriever
        async with r._write_lock:
            prepared, r.prepared = r.prepared, None
            if prepared is None:
                return
            r.generations.record_prepared(None)
        if prepared.store is not None:
            prepared.store.close()
            prepared.store.drop()
        r.trim_feed()
        log.info(
            "dropped prepared model version",
            extra={"fields": {"version": prepared.version, "reason": reason}},
        )

    async def follow_rollout(self) -> None:
        """Drops the prepared version once its rollout has ended without a
        promotion (a promotion makes it current: refresh_from_artifacts)."""
        prepared = self.retriever.prepared
        if prepared is None or prepared.store is None:
            return
        try:
            state = rollout_state.load(self.retriever.settings.data_dir)
        except rollout_state.RolloutStateError as exc:
            log.warning("cannot read the rollout state: %s", exc)
            return
        if (
            state is not None
            and prepared.version in state.candidates
            and state.status in ENDED
            and state.ended_at >= prepared.asked_at
        ):
            await self.drop(f"its rollout {state.status}")
