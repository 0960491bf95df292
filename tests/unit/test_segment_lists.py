"""New users' segments: the age bands and the gateway's lookup."""

from pathlib import Path

import pytest

from recserve_kit.errors import InvalidArgument
from recserve_model import segments as segment
from services.gateway.query import Query, check_query
from services.gateway.segment_lists import Attributes, SegmentLists


def test_age_bands_cover_every_age_and_serve_their_middle():
    assert [segment.band(a) for a in (1, 17, 18, 24, 25, 49, 50, 56, 119)] == [
        0,
        0,
        1,
        1,
        2,
        4,
        5,
        6,
        6,
    ]
    assert segment.band_age(1) == 21.5
    assert segment.key("F", 22, "student") == "F|1|student"


def test_an_unknown_occupation_is_served_as_other(tmp_path: Path):
    lists = SegmentLists(tmp_path)
    lists.load({"lists": {"F|1|student": ["1", "2"], "F|1|other": ["3"]}})  # an older file
    assert lists.items(Attributes(22, "F", "student")) == ["1", "2"]
    assert lists.items(Attributes(22, "F", "astronaut")) == ["3"]
    assert lists.items(Attributes(22, "M", "student")) == []  # no list: popular instead


SHOP = {
    "attributes": [
        {"name": "region", "values": ["north", "south"]},
        {"name": "premium", "values": ["false", "true"]},
        {"name": "spend", "edges": [0, 10, 100]},
    ],
    "unused": ["zip"],
    "lists": {"north||": ["1"], "north|true|1": ["2"], "|false|": ["3"]},
}


def declared(**values: str) -> Attributes:
    return Attributes(declared=tuple(sorted(values.items())))


def test_declared_attributes_pick_their_segment(tmp_path: Path):
    lists = SegmentLists(tmp_path)
    lists.load(SHOP)
    assert lists.items(declared(region="north")) == ["1"]
    assert lists.items(declared(region="north", premium="true", spend="250")) == ["2"]
    assert lists.items(declared(premium="false", zip="10115")) == ["3"]  # zip: in no segment
    assert lists.items(declared(region="west")) == []  # unseen: not given, so no list
    assert lists.items(declared(zip="10115")) == []  # nothing segments use: popular


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"planet": "mars"}, 'attributes.values["planet"]', "declares premium, region, spend, zip"),
        ({"spend": "lots"}, 'attributes.values["spend"]', "must be a number"),
        ({"spend": "nan"}, 'attributes.values["spend"]', "must be finite"),
        ({"premium": "yes"}, 'attributes.values["premium"]', "true or false"),
        ({"region": ""}, 'attributes.values["region"]', "1 to 64 characters"),
        ({f"a{i}": "x" for i in range(33)}, "attributes.values", "at most 32"),
        ({'a"]: b': "x"}, "attributes.values", "is no attribute name"),
    ],
)
def test_bad_declared_attributes_name_the_field(tmp_path: Path, values, field, message):
    lists = SegmentLists(tmp_path)
    lists.load(SHOP)
    with pytest.raises(InvalidArgument) as raised:
        check_query(Query("u", 5, attributes=declared(**values)), True, frozenset(), segments=lists)
    assert str(raised.value).startswith(field) and message in str(raised.value)


def test_a_catalogue_without_user_attributes_says_so(tmp_path: Path):
    lists = SegmentLists(tmp_path)
    lists.load({"attributes": [], "unused": [], "lists": {}})
    with pytest.raises(InvalidArgument, match="it declares none"):
        check_query(
            Query("u", 5, attributes=declared(region="x")), True, frozenset(), segments=lists
        )


def test_typed_fields_and_declared_values_together_are_refused(tmp_path: Path):
    both = Attributes(22, "F", "student", (("region", "north"),))
    with pytest.raises(InvalidArgument, match="not both"):
        check_query(Query("u", 5, attributes=both), True, frozenset())


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        (Attributes(0, "F", "student"), "attributes.age"),
        (Attributes(121, "F", "student"), "attributes.age"),
        (Attributes(30, "f", "student"), "attributes.gender"),
        (Attributes(30, "M", "x" * 65), "attributes.occupation"),
    ],
)
def test_bad_attributes_name_the_field(attributes, field):
    with pytest.raises(InvalidArgument) as raised:
        check_query(Query("u", 5, attributes=attributes), True, frozenset())
    assert str(raised.value).startswith(field)


def test_a_value_not_given_is_no_token_whatever_form_it_takes():
    """A shopper first seen in events (pipelines snapshot) has no attributes:
    None, NaN, "" or pandas' NA, each is "not given", never an error."""
    import pandas as pd

    from recserve_model.segments import Attribute

    for attribute in (
        Attribute("region", values=("east", "west")),
        Attribute("age", edges=(0, 18, 99)),
    ):
        for missing in (None, float("nan"), "", pd.NA):
            assert attribute.token(missing) == ""
    assert Attribute("age", edges=(0, 18, 99)).token(30) == "1"
