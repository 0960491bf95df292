"""The model behind new users' lists (pipelines/onboarding_model.py): what users
with given attributes rate first, with attribute effects that add up."""

import pandas as pd

from pipelines import onboarding_model
from recserve_model import segments as segment
from recserve_model.encoding import Encoder, EncodingSpec

OCCUPATIONS = ["retired", "student"]


def _items(prefix: str) -> list[str]:
    return [f"{prefix}{i}" for i in range(onboarding_model.FIRST_RATINGS)]


def _ratings(users: pd.DataFrame) -> pd.DataFrame:
    """Women rate f0..f9 first, men m0..m9; then everyone rates z0..z9, the
    most popular items, which nobody rates first."""
    rows = []
    for user in users.itertuples():
        for t, item in enumerate(_items(user.gender.lower()) + _items("z")):
            rows.append((user.user_id, item, t))
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])


def test_each_segment_gets_what_users_like_it_rate_first_and_unseen_ones_borrow():
    users = pd.DataFrame(
        [(f"f{i}", "F", 22, "student") for i in range(30)]
        + [(f"m{i}", "M", 60, "retired") for i in range(30)],
        columns=["user_id", "gender", "age", "occupation"],
    )
    train = _ratings(users)
    women, men = set(_items("f")), set(_items("m"))
    items = [*women, *men, *_items("z")]
    encoder = Encoder(EncodingSpec(items, [], OCCUPATIONS, 8))
    lists = onboarding_model.segment_lists(train, users, encoder, OCCUPATIONS)["lists"]

    assert len(lists) == len(segment.GENDERS) * (len(segment.AGE_BANDS) - 1) * len(OCCUPATIONS)
    top = onboarding_model.FIRST_RATINGS
    assert set(lists[segment.key("F", 22, "student")][:top]) == women
    assert set(lists[segment.key("M", 60, "retired")][:top]) == men
    # No retired woman trained it: her gender says f0..f9, her occupation and
    # age m0..m9; those lead her list, ahead of the popular z0..z9.
    assert set(lists[segment.key("F", 60, "retired")][: 2 * top]) == women | men
    assert all(len(ids) == len(set(ids)) == len(items) for ids in lists.values())
