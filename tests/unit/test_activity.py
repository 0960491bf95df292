"""A user's activity after events: many events at once change it exactly
as the same events one at a time (the rule the live path, the nightly
catch-up and the build share)."""

import random

import pytest

from recserve_feast.activity import RECENT_ITEMS, SEEN_ITEMS, Activity


def one_at_a_time(activity: Activity, events: list[tuple[str, float]]) -> Activity:
    """The rule written plainly, event by event: each moves its item to the
    front of both lists; a rating joins the running mean."""
    for item_id, rating in events:
        activity.rating_count += 1
        if rating > 0:
            activity.mean_rating = (activity.mean_rating * activity.rated + rating) / (
                activity.rated + 1
            )
            activity.rated += 1
        activity.recent = [item_id] + [i for i in activity.recent if i != item_id]
        activity.seen = [item_id] + [i for i in activity.seen if i != item_id]
    return activity


@pytest.mark.parametrize("seed", range(5))
def test_many_events_at_once_equal_the_same_events_one_at_a_time(seed):
    rng = random.Random(seed)
    seen = [f"i{n}" for n in rng.sample(range(3000), 1200)]
    events = [(f"i{rng.randrange(3000)}", rng.choice([0.0, 0.5, 3.0, 5.0])) for _ in range(300)]
    batched = Activity.of(40, 3.5, seen[:RECENT_ITEMS], seen)
    batched.extend(events)
    single = one_at_a_time(Activity.of(40, 3.5, seen[:RECENT_ITEMS], seen), events)
    assert batched == single
    assert batched.columns()["seen_item_ids"] == single.seen[:SEEN_ITEMS]


def test_events_move_their_items_to_the_front_newest_first_and_keep_the_mean():
    activity = Activity.of(2, 4.0, ["b", "a"], ["b", "a", "z"])
    activity.extend([("a", 0.0), ("c", 2.0), ("a", 5.0), ("d", 0.0)])
    assert activity.recent == ["d", "a", "c", "b"]
    assert activity.seen == ["d", "a", "c", "b", "z"]
    assert activity.rating_count == 6
    assert activity.mean_rating == pytest.approx((4.0 * 2 + 2.0 + 5.0) / 4)
    fresh = Activity.from_columns(None)
    fresh.extend([("x", 0.0)])
    assert fresh.columns() == {
        "rating_count": 1, "mean_rating": 0.0, "recent_item_ids": ["x"], "seen_item_ids": ["x"],
    }  # fmt: skip
