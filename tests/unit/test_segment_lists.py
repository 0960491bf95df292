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
    lists.lists = {"F|1|student": ["1", "2"], "F|1|other": ["3"]}
    lists.occupations = frozenset({"student", "other"})
    assert lists.items(Attributes(22, "F", "student")) == ["1", "2"]
    assert lists.items(Attributes(22, "F", "astronaut")) == ["3"]
    assert lists.items(Attributes(22, "M", "student")) == []  # no list: popular instead


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
