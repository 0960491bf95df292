"""The gateway's user-vector cache: keyed by what the user tower reads,
never serving another model version's vector."""

from recserve.features.v1 import features_pb2 as fpb
from services.gateway.user_vectors import UserVectors


def profile(rating_count: int, recent=("1", "2")) -> fpb.UserFeatures:
    return fpb.UserFeatures(
        user_id="7", found=True, age=30, rating_count=rating_count, recent_item_ids=list(recent)
    )


def test_a_changed_profile_or_model_version_is_a_miss():
    cache = UserVectors(size=10)
    key = UserVectors.key(profile(5))
    assert cache.get(key) is None
    cache.put(key, b"v1-vector", "v1")
    assert cache.get(UserVectors.key(profile(5))) == (b"v1-vector", "v1")
    assert cache.get(UserVectors.key(profile(6))) is None  # a push changed the user
    assert cache.get(UserVectors.key(profile(5, ("3", "1", "2")))) is None
    cache.saw_version("v2")  # a rollout: users on v1 and on v2
    assert cache.get(key) == (b"v1-vector", "v1")
    cache.saw_version("v3")  # two versions on: v1's vectors are no use any more
    assert cache.get(key) is None


def test_a_vector_the_ranker_scored_with_another_version_is_dropped():
    cache = UserVectors(size=10)
    user = profile(5)
    key = UserVectors.key(user)
    cache.put(key, b"stable-vector", "stable")
    cache.saw_version("candidate", user, embedded_with="stable")  # the user moved on
    assert cache.get(key) is None
    other = profile(9)
    cache.put(UserVectors.key(other), b"c", "candidate")
    cache.saw_version("candidate", other, embedded_with="candidate")
    assert cache.get(UserVectors.key(other)) == (b"c", "candidate")


def test_bounded_least_recently_used_first_and_off_at_zero():
    cache = UserVectors(size=2)
    keys = [UserVectors.key(profile(n)) for n in range(3)]
    cache.put(keys[0], b"a", "v")
    cache.put(keys[1], b"b", "v")
    assert cache.get(keys[0]) == (b"a", "v")  # now the most recent
    cache.put(keys[2], b"c", "v")
    assert len(cache) == 2 and cache.get(keys[1]) is None and cache.get(keys[0]) is not None
    off = UserVectors(size=0)
    off.put(keys[0], b"a", "v")
    assert off.get(keys[0]) is None and len(off) == 0


def test_once_the_ranker_says_who_is_on_which_version_only_that_versions_vector_is_used():
    """A rollout of a retrained model: a user moved to the candidate must be
    embedded by it (and retrieved from its items), not given the stable's
    vector, even before the ranker scored them once."""
    from recserve.ranker.v1 import ranker_pb2 as rpb
    from recserve_delivery.rollout import user_position

    cache = UserVectors(size=10)
    users = [str(n) for n in range(1, 200)]
    moved = next(u for u in users if user_position(u) < 50)
    stayed = next(u for u in users if user_position(u) >= 50)
    keys = {}
    for user in (moved, stayed):
        keys[user] = UserVectors.key(fpb.UserFeatures(user_id=user, found=True))
        cache.put(keys[user], b"stable-vector", "stable")
    cache.learn_split(rpb.VersionSplit(stable_version="stable"))
    assert cache.get(keys[moved], moved) == (b"stable-vector", "stable")
    cache.learn_split(
        rpb.VersionSplit(
            stable_version="stable", candidate_version="retrained", candidate_share_percent=50
        )
    )
    assert cache.get(keys[moved], moved) is None  # embed again, by the candidate
    assert cache.get(keys[stayed], stayed) == (b"stable-vector", "stable")
    cache.put(keys[moved], b"retrained-vector", "retrained")
    assert cache.get(keys[moved], moved) == (b"retrained-vector", "retrained")
    # Promoted: the retrained version is everyone's.
    cache.learn_split(rpb.VersionSplit(stable_version="retrained"))
    assert cache.get(keys[stayed], stayed) is None
    assert cache.get(keys[moved], moved) == (b"retrained-vector", "retrained")
