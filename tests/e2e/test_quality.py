"""The quality the live stack serves equals the offline evaluation
of the artifact it serves (within 1% on every metric), through Envoy, for
every held-out user; a difference would be skew between training and serving.

Runs before test_recommend.py (file order), so nothing is soft-deleted yet;
the users whose uncached path the dependency test needs are left out."""

from bench.quality import compare
from tests.e2e.test_recommend import FRESH_USERS


def test_live_recommendations_match_the_offline_evaluation(stack):
    fresh = {user for users in FRESH_USERS.values() for user in users}
    result = compare(stack.envoy_address, stack.data_dir, exclude=fresh)
    assert result["users"] == 943 - len(fresh)
    assert result["degraded_answers"] == 0
    assert result["served_versions"] == [result["artifact"]]
    for metric, difference in result["relative_difference"].items():
        assert abs(difference) <= 0.01, (metric, result["offline"], result["live"])
    # And the served list is the one that beats the baselines (test_pipeline).
    assert result["live"]["ndcg@10"] > 0.15
