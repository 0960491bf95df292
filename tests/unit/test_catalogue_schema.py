"""The catalogue's filterable attributes: which filters are valid for which
kind, how values are stored, and how a stored value matches a filter."""

import numpy as np
import pytest

from recserve_model.catalogue import AttributeFilter, CatalogueSchema

SCHEMA = CatalogueSchema(
    {"brand": "categorical", "price": "numeric", "tags": "tags", "on_sale": "boolean"}
)


@pytest.mark.parametrize(
    ("condition", "field", "words"),
    [
        (AttributeFilter("brnad", ("acme",)), "name", "'brnad' is not a filterable attribute"),
        (AttributeFilter("price", ("3",)), "any_of", "price is numeric"),
        (AttributeFilter("price"), "min", "give min, max or both"),
        (AttributeFilter("price", min=5, max=2), "max", "below min"),
        (AttributeFilter("price", min=float("nan")), "min", "finite"),
        (AttributeFilter("brand", min=1), "min", "brand is categorical"),
        (AttributeFilter("brand"), "any_of", "at least one value"),
        (AttributeFilter("brand", ("",)), "any_of", "empty value"),
        (AttributeFilter("on_sale", ("yes",)), "any_of", "'true' and 'false'"),
    ],
)
def test_a_filter_that_does_not_fit_its_attribute_names_the_field(condition, field, words):
    problem = SCHEMA.filter_problem(condition)
    assert problem is not None and problem[0] == field and words in problem[1]


@pytest.mark.parametrize(
    "condition",
    [
        AttributeFilter("brand", ("acme", "zeta")),
        AttributeFilter("price", min=1),
        AttributeFilter("price", max=1),
        AttributeFilter("price", min=1, max=1),
        AttributeFilter("tags", ("eco",)),
        AttributeFilter("on_sale", ("true",)),
    ],
)
def test_filters_that_fit_are_valid(condition):
    assert SCHEMA.filter_problem(condition) is None


def test_values_are_stored_in_payload_form_and_match_filters():
    stored = SCHEMA.stored(
        {"brand": "acme", "price": np.int64(3), "tags": np.array(["eco", "new"]), "on_sale": True}
    )
    assert stored == {"brand": "acme", "price": 3.0, "tags": ["eco", "new"], "on_sale": "true"}
    assert SCHEMA.stored({"price": None, "brand": float("nan")}) == {}
    assert AttributeFilter("brand", ("acme",)).matches(stored["brand"])
    assert not AttributeFilter("brand", ("zeta",)).matches(stored["brand"])
    assert AttributeFilter("tags", ("new",)).matches(stored["tags"])
    assert AttributeFilter("price", min=3, max=3).matches(stored["price"])
    assert not AttributeFilter("price", min=3.5).matches(stored["price"])
    assert not AttributeFilter("price", max=10).matches(None)  # no value never qualifies
    assert AttributeFilter("on_sale", ("true",)).matches(stored["on_sale"])


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"colour": "red"}, "'colour' is not a filterable attribute"),
        ({"price": "cheap"}, "price is numeric"),
        ({"price": float("inf")}, "finite"),
        ({"brand": 3}, "brand is categorical"),
        ({"tags": "eco"}, "a list of tags"),
        ({"on_sale": 1}, "on_sale is boolean"),
    ],
)
def test_a_value_that_does_not_fit_is_refused(values, words):
    with pytest.raises(ValueError, match=words):
        SCHEMA.stored(values)


def test_the_schema_round_trips_and_an_older_artifact_has_none(tmp_path):
    SCHEMA.save(tmp_path)
    assert CatalogueSchema.load(tmp_path) == SCHEMA
    assert CatalogueSchema.load(tmp_path / "older").attributes == {}
