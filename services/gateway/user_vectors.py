"""User vectors already computed, keyed by everything the user tower reads.

The user tower is a pure function of the user's profile (the features it
reads, recent items included) and the model version. Whatever changes a
user (a push of new activity) changes the key, so an entry is never stale
for its version. An entry is used only when its version is the one its
user is on: the ranker's answers say which (``VersionSplit``: the stable
version, and during a rollout the candidate for users below its share), so
a user moved to a candidate with item vectors of its own is embedded by
it and retrieved from its items, never the stable's. Before any answer has
said, entries of the two versions the ranker answered with last are used;
an entry the ranker scored with another version is dropped either way, and
the ranker never mixes versions whatever the cache holds. A hit saves the
whole embed stage: one call to the ranker and one to Triton (about 2 ms of
CPU and 2.5 ms of latency on two cores, docs/benchmarks.md). Bounded, least
recently used out first; ``size`` 0 turns it off.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from prometheus_client import Counter

from recserve.features.v1 import features_pb2 as fpb
from recserve.ranker.v1 import ranker_pb2 as rpb
from recserve_delivery.assignment import user_position, version_at

LOOKUPS = Counter(
    "recserve_gateway_user_vector_cache_total", "User-vector cache lookups.", ["result"]
)
HIT, MISS = LOOKUPS.labels("hit"), LOOKUPS.labels("miss")
STORED = LOOKUPS.labels("stored")  # the features service's stored vector was used


class UserVectors:
    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, tuple[bytes, str]] = OrderedDict()
        # The model versions the ranker answered with last (two: a rollout's).
        self.versions: deque[str] = deque(maxlen=2)
        # (stable, the candidate arms, each arm's share %) as the ranker last said.
        self.split: tuple[str, tuple[str, ...], float] | None = None

    @staticmethod
    def key(profile: fpb.UserFeatures) -> bytes:
        return profile.SerializeToString(deterministic=True)

    def version_of(self, user_id: str) -> str | None:
        """The version this user is on, as far as the ranker has said."""
        if self.split is None:
            return None
        stable, candidates, share = self.split
        return version_at(user_position(user_id), stable, candidates, share)

    def usable(self, version: str, user_id: str) -> bool:
        """Whether a vector of ``version`` may serve this user (a stored one):
        the version the user is on, as far as the ranker has said; before it
        has said, one it answered with lately, or any before the first answer."""
        wanted = self.version_of(user_id)
        ok = version == wanted if wanted else (not self.versions or version in self.versions)
        if ok:
            STORED.inc()
        return ok

    def get(self, key: bytes, user_id: str = "") -> tuple[bytes, str] | None:
        """(vector_f32, model version) when cached for the version in use."""
        if not self.size:
            return None
        found = self._entries.get(key)
        wanted = self.version_of(user_id)
        usable = found is not None and (found[1] == wanted if wanted else found[1] in self.versions)
        if not usable:
            MISS.inc()
            return None
        self._entries.move_to_end(key)
        HIT.inc()
        return found

    def put(self, key: bytes, vector_f32: bytes, version: str) -> None:
        if not self.size or not vector_f32:
            return
        self._seen(version)
        self._entries[key] = (vector_f32, version)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def learn_split(self, split: rpb.VersionSplit) -> None:
        """Which version each user is on, from a ranker's answer."""
        if split.stable_version:
            candidates = (split.candidate_version, *split.more_candidate_versions)
            self.split = (
                split.stable_version,
                candidates if split.candidate_version else (),
                split.candidate_share_percent,
            )

    def saw_version(
        self, version: str, profile: fpb.UserFeatures | None = None, embedded_with: str = ""
    ) -> None:
        """The ranker scored with ``version``; a vector of another version that
        it was sent for ``profile`` is dropped (the ranker embedded again)."""
        if not version:
            return
        self._seen(version)
        if profile is not None and embedded_with and embedded_with != version:
            self._entries.pop(self.key(profile), None)

    def _seen(self, version: str) -> None:
        if version and (not self.versions or self.versions[-1] != version):
            if version in self.versions:
                self.versions.remove(version)
            self.versions.append(version)

    def __len__(self) -> int:
        return len(self._entries)
