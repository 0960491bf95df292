"""The simulated users' clicks in a dataset's own event types: a rating
type at its top value where the dataset has one (MovieLens), else its first
positive type (a shop's click), each event naming its list."""

import pytest

from bench.simulate import click_events, rating_type
from recserve_model.catalogue import CatalogueSchema, EventKind


def test_clicks_are_sent_in_the_datasets_own_event_type(tmp_path):
    movies, shop, views = tmp_path / "movies", tmp_path / "shop", tmp_path / "views"
    for directory in (movies, shop, views):
        directory.mkdir()
    CatalogueSchema({}, {"rating": EventKind("rating", has_value=True, min=0.5, max=5)}).save(
        movies
    )
    kinds = {"view": EventKind("exposure"), "click": EventKind("positive")}
    CatalogueSchema({}, kinds).save(shop)
    CatalogueSchema({}, {"view": EventKind("exposure")}).save(views)
    assert rating_type(movies) == ("rating", 5.0)
    assert rating_type(shop) == ("click", 0.0)
    with pytest.raises(SystemExit, match="no rating or positive event type"):
        rating_type(views)
    events = click_events("sim", "u1", ["a", "b"], "rec-1", rating_type(shop))
    assert [(e.event_type, e.value, e.item_id, e.recommendation_id) for e in events] == [
        ("click", 0.0, "a", "rec-1"),
        ("click", 0.0, "b", "rec-1"),
    ]
    assert len({e.event_id for e in events}) == 2
