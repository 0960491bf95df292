"""User vectors already computed, keyed by everything the user tower reads.

The user tower is a pure function of the user's profile (the features it
reads, recent items included) and the model version. Whatever changes a
user (a push of new activity) changes the key, so an entry is never stale.
Entries of the two model versions the ranker answered with last are used
(during a rollout users are on either); an older version's are misses, and
an entry the ranker scored with another version (the user moved to the
candidate) is dropped, so the next request embeds with the right one. The
ranker never mixes versions whatever the cache holds. A hit saves the whole
embed stage: one call to the ranker and one to Triton (about 2 ms of CPU and
2.5 ms of latency on two cores, docs/benchmarks.md). Bounded, least recently
used out first; ``size`` 0 turns it off.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from prometheus_client import Counter

from recserve.features.v1 import features_pb2 as fpb

LOOKUPS = Counter(
    "recserve_gateway_user_vector_cache_total", "User-vector cache lookups.", ["result"]
)
HIT, MISS = LOOKUPS.labels("hit"), LOOKUPS.labels("miss")


class UserVectors:
    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, tuple[bytes, str]] = OrderedDict()
        # The model versions the ranker answered with last (two: a rollout's).
        self.versions: deque[str] = deque(maxlen=2)

    @staticmethod
    def key(profile: fpb.UserFeatures) -> bytes:
        return profile.SerializeToString(deterministic=True)

    def get(self, key: bytes) -> tuple[bytes, str] | None:
        """(vector_f32, model version) when cached for the version in use."""
        if not self.size:
            return None
        found = self._entries.get(key)
        if found is None or found[1] not in self.versions:
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
