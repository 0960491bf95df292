"""Which model versions the ranker serves: loading and warming them in
Triton, the stable pin, and the rollout that moves users to a candidate.

Each inference pins the Triton version number of the artifact in use, so
every response names exactly the model that produced it. ``load`` switches
versions without a failed request: Triton first loads the new version next
to the old one, then the pin moves. During a rollout each user is pinned to
the stable or the candidate version by a hash of the user id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tritonclient.utils import InferenceServerException

from recserve_delivery import state as rollout_state
from recserve_delivery.rollout import Plan, Rollout
from recserve_delivery.windows import RolloutMetrics
from recserve_kit.errors import FailedPrecondition, NotFound, Unavailable
from recserve_model import artifacts
from recserve_model.affinity import UserAffinity
from recserve_model.encoding import Encoder, EncodingSpec
from services.ranker.config import RankerSettings
from services.ranker.current_pointer import CurrentPointer
from services.ranker.loaded import Loaded, read_versions, warm_up
from services.ranker.replica import FOLLOW_INTERVAL_S, RolloutReplica
from services.ranker.triton_client import TritonClient
from services.ranker.triton_metrics import read_memory_fraction

log = logging.getLogger(__name__)
# Registered at import, so a scrape shows them (at zero) before any rollout.
METRICS_PREFIX = "recserve_ranker"
RolloutMetrics.named(METRICS_PREFIX)
TrackCall = Callable[[asyncio.Future[object]], None]
NOT_READY_YET = (InferenceServerException, FailedPrecondition, NotFound, Unavailable, OSError)


class ModelVersions:
    def __init__(self, settings: RankerSettings, triton: TritonClient) -> None:
        self.settings = settings
        self.triton = triton
        self.loaded: Loaded | None = None  # the stable version
        self._loading: asyncio.Task[None] | None = None  # the first load, once started
        self.versions: dict[str, Loaded] = {}  # loaded and warmed up, by artifact version
        self.rollout: Rollout | None = None  # set once the first version is loaded
        self._load_lock = asyncio.Lock()
        self.replica = RolloutReplica(settings)
        self.pointer = CurrentPointer(
            settings.data_dir, lambda: read_versions(settings, settings.ranking_model)
        )

    # -- which version -------------------------------------------------------

    def current(self) -> Loaded:
        if self.loaded is None:
            raise Unavailable("no model loaded yet")
        return self.loaded

    def for_user(self, user_id: str) -> Loaded:
        """The version this user is on: the stable one unless a rollout says."""
        stable = self.current()
        rollout = self.rollout
        if rollout is None or not rollout.state.active:
            return stable
        return self.versions.get(rollout.version_for(user_id), stable)

    def split(self) -> tuple[str, list[str], float]:
        """(stable, the candidate arms, each arm's share in percent) now: which
        version each user is on (``for_user``); no candidate outside a rollout."""
        rollout = self.rollout
        stable = self.loaded.version if self.loaded is not None else ""
        if rollout is None or not rollout.state.active:
            return stable, [], 0.0
        return stable, rollout.state.candidates, rollout.state.share_percent

    def loaded_version(self, version: str) -> Loaded:
        """A version loaded in Triton now, by name (a debug comparison)."""
        loaded = self.versions.get(version)
        if loaded is None:
            raise NotFound(f"model version {version!r} is not loaded")
        return loaded

    async def for_items(self, version: str) -> Loaded:
        """A version's item tower, loaded on demand: the retriever embeds
        upserted items for a retrained version while it prepares that
        version's items, before the version's rollout loads it here."""
        known = self.versions.get(version)
        if known is not None:
            return known
        async with self._load_lock:
            return await self._prepare(version)

    def shadow_candidate(self, served_version: str) -> Loaded | None:
        """The candidate to shadow-score an answer of the stable version with,
        for the share of requests the rollout asks for."""
        rollout = self.rollout
        if rollout is None or served_version != rollout.state.stable:
            return None
        if not rollout.shadow_wanted():
            return None
        return self.versions.get(rollout.state.candidate)

    # -- loading ---------------------------------------------------------------

    def _resolve(self, version: str) -> Loaded:
        user = read_versions(self.settings, self.settings.user_model)
        ranking = read_versions(self.settings, self.settings.ranking_model)
        if version not in user or version not in ranking:
            raise NotFound(f"model version {version!r} is not in the Triton repository")
        directory = artifacts.artifacts_root(self.settings.data_dir) / version
        artifacts.verify(directory)
        spec = EncodingSpec.load(directory / "encoding.json")
        affinity = UserAffinity.load(directory)
        item = read_versions(self.settings, self.settings.item_model).get(version)
        return Loaded(version, user[version], ranking[version], Encoder(spec), affinity, item)

    def _default_stable(self) -> str:
        """The current artifact's version when the repository holds it (a
        candidate built beside it is newer, and waits for its rollout); else
        the newest."""
        ranking = read_versions(self.settings, self.settings.ranking_model)
        if not ranking:
            raise FailedPrecondition("the Triton repository holds no ranking model")
        current = artifacts.current_version(self.settings.data_dir)
        return current if current in ranking else max(ranking, key=lambda v: ranking[v])

    async def models_ready(self) -> bool:
        """Health: Triton answers and both models of the pinned version are
        ready. The first load runs as a task of its own, which the probe only
        looks at: a large artifact's checksums and tables take longer than a
        probe waits, and a probe's timeout must not cancel and restart it."""
        loaded = self.loaded
        if loaded is None:
            if self._loading is None or self._loading.done():
                self._loading = asyncio.create_task(self._first_load())
            return False
        try:
            return await self.triton.ready(
                self.settings.user_model, loaded.user_model_version
            ) and await self.triton.ready(self.settings.ranking_model, loaded.ranking_model_version)
        except InferenceServerException:
            return False

    async def _first_load(self) -> None:
        try:
            await self._initial_load()
        except (*NOT_READY_YET, artifacts.ArtifactError) as exc:
            log.debug("initial load not possible yet: %s", exc)
        except rollout_state.RolloutStateError as exc:
            log.error("%s; fix or remove it to start", exc)

    async def _prepare(self, version: str) -> Loaded:
        """Both models of ``version`` loaded in Triton and warmed up."""
        known = self.versions.get(version)
        if known is not None:
            return known
        # Checksums and tables off the event loop (gigabytes for a large catalogue).
        target = await asyncio.to_thread(self._resolve, version)
        await self.triton.ensure_loaded(self.settings.user_model, target.user_model_version)
        await self.triton.ensure_loaded(self.settings.ranking_model, target.ranking_model_version)
        await warm_up(self.triton, self.settings, target)
        self.versions[version] = target
        return target

    async def _initial_load(self) -> None:
        """The persisted stable version (a rollout's or an operator's choice),
        unless CURRENT moved to another artifact while no rollout ran (a
        build's --promote while the ranker was down); else CURRENT's, else
        the newest. A rollout in progress resumes at its step."""
        async with self._load_lock:
            persisted = rollout_state.load(self.settings.data_dir)
            ranking = read_versions(self.settings, self.settings.ranking_model)
            stable = self._default_stable()
            reason = "is not in the repository"
            if persisted is not None and persisted.stable in ranking:
                if persisted.active or self.pointer.served_by(persisted.stable, ranking):
                    stable = persisted.stable
                else:
                    reason = "is not CURRENT's artifact"
            try:
                self.loaded = await self._prepare(stable)
            except (*NOT_READY_YET, artifacts.ArtifactError) as exc:
                if (
                    persisted is None
                    or stable == persisted.stable
                    or persisted.stable not in ranking
                ):
                    raise
                # CURRENT cannot be served (yet): the persisted stable serves,
                # and the judge loop tries CURRENT again (follow_current).
                log.warning(
                    "cannot serve CURRENT; serving the persisted stable",
                    extra={"fields": {"version": stable, "error": str(exc)}},
                )
                stable = persisted.stable
                self.loaded = await self._prepare(stable)
            rollout = Rollout(self.settings.data_dir, stable, metrics_prefix=METRICS_PREFIX)
            rollout.before_promoted = self._make_current
            rollout.writer = self.replica.lock.try_acquire()  # else another replica writes
            self.rollout = rollout
            if rollout.state.stable != stable and rollout.writer:
                rollout.rebase(stable, f"{rollout.state.stable} {reason}")
            if not rollout.state.active:
                return
            if await self._prepare_candidates(rollout) and rollout.writer:
                rollout.resumed_after_restart()

    async def _prepare_candidates(self, rollout: Rollout) -> bool:
        """The rollout's candidates loaded here; a writer that cannot rolls it
        back (a follower serves their users the stable until it can)."""
        try:
            for candidate in rollout.state.candidates:
                await self._prepare(candidate)
        except (*NOT_READY_YET, artifacts.ArtifactError) as exc:
            if rollout.writer:
                rollout.rollback(f"the candidate cannot be loaded after a restart: {exc}")
            else:
                log.warning(
                    "cannot load the rollout's candidate", extra={"fields": {"error": str(exc)}}
                )
            return False
        return True

    def _current_to_follow(self) -> str | None:
        """CURRENT's version when the ranker must switch to it (outside a
        rollout: a rollout's stable is its own)."""
        loaded, rollout = self.loaded, self.rollout
        if loaded is None or rollout is None or rollout.state.active:
            return None
        return self.pointer.to_follow(loaded.version)

    async def follow_current(self) -> None:
        version = self._current_to_follow()
        if version is None or not self.pointer.may_try():
            return
        try:
            await self.load(version, following=True)
        except (*NOT_READY_YET, artifacts.ArtifactError) as exc:
            self.pointer.failed()
            log.warning(
                "cannot serve CURRENT yet",
                extra={"fields": {"version": version, "error": str(exc)}},
            )

    async def load(self, version: str, following: bool = False) -> Loaded:
        """A switch of what users get (an operator's LoadModel, or CURRENT
        moved: ``following``): refused while a rollout runs. An artifact of
        its own becomes CURRENT, so every other service follows it too."""
        async with self._load_lock:
            rollout = self.rollout_control()
            if following and self._current_to_follow() != version:
                return self.current()  # an operator's switch came first
            if rollout.state.active:
                rollout.set_stable(version)  # raises FailedPrecondition
            target = await self._prepare(version)
            # Requests in flight finish on the version they pinned; new ones
            # pin the new version from here on.
            self.loaded = target
            persisted = rollout_state.load(self.settings.data_dir) if following else None
            if persisted is not None and persisted.stable == version and not persisted.active:
                # Another replica promoted or switched to it: its record stands.
                rollout.state = persisted
            else:
                rollout.set_stable(version)
            if not following:
                # Following, CURRENT names it already; written back, it could
                # undo a newer CURRENT written while this version loaded.
                artifacts.promote(self.settings.data_dir, version)
            log.info("switched model version", extra={"fields": {"version": version}})
            return target

    # -- rollouts ----------------------------------------------------------------

    def rollout_control(self) -> Rollout:
        if self.rollout is None:
            raise Unavailable("no model loaded yet")
        return self.rollout

    async def start_rollout(self, plan: Plan) -> Rollout:
        async with self._load_lock:
            rollout = self.rollout_control()
            plan.check()
            if rollout.state.active:
                raise FailedPrecondition(
                    f"a rollout of {rollout.state.candidate} is {rollout.state.status}; "
                    "abort it first"
                )
            for candidate in (plan.candidate, *plan.more_candidates):
                if candidate != rollout.state.stable:
                    await self._prepare(candidate)  # NotFound for an unknown version
            rollout.start(plan)
            return rollout

    def rollout_action(self, action: str) -> Rollout:
        """pause, resume, promote or abort, by an operator."""
        rollout = self.rollout_control()
        getattr(rollout, action)()
        self._follow_stable()
        return rollout

    def _follow_stable(self) -> None:
        """A promotion past the last step makes the candidate the stable pin
        (the current artifact already: ``_make_current``)."""
        rollout = self.rollout
        if rollout is not None and self.loaded is not None:
            stable = rollout.state.stable
            if stable != self.loaded.version and stable in self.versions:
                self.loaded = self.versions[stable]

    def _make_current(self, candidate: str) -> None:
        """The writer's promotion of a retrained model makes it the current
        artifact (artifacts.promote) before the rollout's state says it was
        promoted: a follower that read "promoted" with the old CURRENT beside
        it switched back to the old version and wrote the old CURRENT over
        the new one."""
        if artifacts.promote(self.settings.data_dir, candidate):
            log.info("promoted artifact is current", extra={"fields": {"version": candidate}})

    async def judge_forever(self) -> None:
        """The rollout judge: once per interval while a rollout is active;
        outside one, CURRENT is followed at the same pace. A replica that
        follows another's rollout (services.ranker.replica) reads its state
        instead, more often."""
        while True:
            rollout = self.rollout
            writer = rollout is None or self.replica.claim(rollout)
            await asyncio.sleep(self.settings.rollout_interval_s if writer else FOLLOW_INTERVAL_S)
            if rollout is None:
                continue
            if not writer:
                await self._follow_writer(rollout)
            elif not rollout.state.active:
                await self.follow_current()
            else:
                memory = await read_memory_fraction(self.settings.triton_metrics_url)
                rollout.tick(memory, others=self.replica.others(rollout))
                self._follow_stable()

    async def _follow_writer(self, rollout: Rollout) -> None:
        if rollout.follow() and rollout.state.active:
            await self._prepare_candidates(rollout)
        self._follow_stable()
        if rollout.state.active:
            self.replica.publish_figures(rollout)
        else:
            await self.follow_current()

    def tracker(self, version: str, timed: bool) -> TrackCall | None:
        """The rollout judge's figures for a call: its outcome for its version,
        and its time (``timed``: the ranking model) even when nobody waits.
        Only while a rollout runs: outside one this cost 0.1-0.2 ms of CPU
        per Recommend for figures nobody judges."""
        rollout = self.rollout
        if rollout is None or not rollout.state.active or not version:
            return None

        def track(call: asyncio.Future[object]) -> None:
            started = time.perf_counter()

            def done(finished: asyncio.Future[object]) -> None:
                if finished.cancelled() or finished.exception() is not None:
                    rollout.failed(version, "triton")
                elif timed:
                    rollout.completed(version, time.perf_counter() - started)

            call.add_done_callback(done)

        return track

    async def model_info(self) -> list[tuple[str, str, str]]:
        loaded = self.loaded
        names = {self.settings.user_model, self.settings.ranking_model}
        out = []
        for model in await self.triton.repository_index():
            if model.get("name") in names:
                number = model.get("version", "")
                versions = read_versions(self.settings, model["name"])
                artifact = next((a for a, n in versions.items() if str(n) == number), number)
                out.append((model["name"], artifact, model.get("state", "")))
        if loaded is not None and not out:
            out.append((self.settings.ranking_model, loaded.version, "READY"))
        return out
