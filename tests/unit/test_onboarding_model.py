"""The model behind new users' lists (pipelines/onboarding_model.py): what users
with given attributes rate first, with attribute effects that add up."""

import pandas as pd

from pipelines import onboarding_model
from recserve_model import segments as segment
from recserve_model.encoding import Encoder, EncodingSpec

OCCUPATIONS = ["retired", "student"]
KINDS = {"age": "numeric", "gender": "categorical", "occupation": "categorical"}


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
    attributes, unused = onboarding_model.attributes_of(KINDS, users)
    assert [a.name for a in attributes] == ["gender", "age", "occupation"] and not unused
    lists = onboarding_model.segment_lists(train, users, encoder, attributes)["lists"]

    # Every segment, each attribute given or not (not all three left out).
    assert len(lists) == (2 + 1) * (len(segment.AGE_BANDS) - 1 + 1) * (len(OCCUPATIONS) + 1) - 1
    top = onboarding_model.FIRST_RATINGS
    assert set(lists[segment.key("F", 22, "student")][:top]) == women
    assert set(lists[segment.key("M", 60, "retired")][:top]) == men
    # No retired woman trained it: her gender says f0..f9, her occupation and
    # age m0..m9; those lead her list, ahead of the popular z0..z9.
    assert set(lists[segment.key("F", 60, "retired")][: 2 * top]) == women | men
    assert all(len(ids) == len(set(ids)) == len(items) for ids in lists.values())
    # Gender alone picks its side: a value not given adds nothing.
    assert set(lists["F||"][:top]) == women and set(lists["M||"][:top]) == men


def test_declared_attributes_of_any_kind_make_the_segments():
    """A shop's users: a region (categorical), a premium flag (boolean), a
    spend figure (numeric, banded at its quintiles); a zip-code-like column
    with too many values and a text column are left out, and said so."""
    n = 200
    users = pd.DataFrame(
        {
            "user_id": [f"u{i}" for i in range(n)],
            "region": ["north", "south"] * (n // 2),
            "premium": [i % 4 == 0 for i in range(n)],
            "spend": [float(i) for i in range(n)],
            "zip": [f"{i:05d}" for i in range(n)],
            "bio": ["text"] * n,
        }
    )
    kinds = {
        "zip": "categorical",
        "region": "categorical",
        "premium": "boolean",
        "spend": "numeric",
        "bio": "text",
    }
    attributes, unused = onboarding_model.attributes_of(kinds, users)
    assert [a.name for a in attributes] == ["region", "premium", "spend"]
    assert set(unused) == {"zip", "bio"}
    spend = attributes[2]
    assert spend.numeric and len(spend.tokens) == onboarding_model.QUANTILE_BANDS
    assert spend.token(0.0) == "0" and spend.token(199.0) == "4" and spend.token(1e9) == "4"
    # Region tells what users rate first: north r0..r9, south s0..s9.
    rows = [
        (u.user_id, f"{'r' if u.region == 'north' else 's'}{t}", t)
        for u in users.itertuples()
        for t in range(onboarding_model.FIRST_RATINGS)
    ]
    train = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    items = sorted(set(train["item_id"]))
    encoder = Encoder(EncodingSpec(items, [], [], 8))
    document = onboarding_model.segment_lists(train, users, encoder, attributes, unused)
    assert document["unused"] == list(unused)
    north = set(_items("r"))
    key = segment.segment_key(attributes, {"region": "north", "premium": "true", "spend": "50"})
    assert set(document["lists"][key][: onboarding_model.FIRST_RATINGS]) == north
    assert set(document["lists"]["north||"][: onboarding_model.FIRST_RATINGS]) == north
