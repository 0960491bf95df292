"""Declared attributes as model inputs: fitted on the build's rows, encoded
from the one text form training and serving share, placed after the fixed
columns of the encoder, and read back from an artifact's encoding.json."""

import json

import numpy as np
import pandas as pd
import pytest

from recserve_model import attribute_features as af
from recserve_model.encoding import CATEGORY_OFFSET, USER_FIXED, Encoder, EncodingSpec


def encoded(feature: af.AttributeFeature, text: str | None) -> list[float]:
    out = np.zeros(feature.width, dtype=np.float32)
    feature.encode(text, out)
    return out.tolist()


def test_a_categorical_attribute_gets_a_column_for_each_of_its_most_frequent_values(monkeypatch):
    monkeypatch.setattr(af, "MAX_VALUES", 2)
    brand = af.fit("brand", "categorical", ["acme", "zen", "acme", None, "umbra", "zen", "acme"])
    assert brand.values == ("acme", "zen") and brand.width == 2
    assert encoded(brand, "zen") == [0.0, 1.0]
    assert encoded(brand, "umbra") == [0.0, 0.0]  # not among the most frequent: nothing
    assert encoded(brand, None) == [0.0, 0.0]


def test_tags_set_a_column_for_each_known_tag():
    tags = af.fit("tags", "tags", ["new|sale", "sale", "eco|sale", ""])
    assert tags.values == ("sale", "eco", "new")
    assert encoded(tags, "new|sale|unknown") == [1.0, 0.0, 1.0]


def test_a_numeric_attribute_is_standardised_and_marked_present():
    prices = [1.0, 10.0, 100.0, 1000.0]
    price = af.fit("price", "numeric", [af.as_text("numeric", p) for p in prices])
    assert price.log  # no negative value: log1p first (prices are skewed)
    logs = np.log1p(prices)
    z = (np.log1p(100.0) - logs.mean()) / logs.std()
    assert encoded(price, "100") == pytest.approx([z, 1.0], rel=1e-5)
    assert encoded(price, None) == [0.0, 0.0]
    assert encoded(price, "not a number") == [0.0, 0.0]
    assert encoded(price, "1e12")[0] == af.CLIP  # clipped
    signed = af.fit("delta", "numeric", ["-3", "3"])
    assert not signed.log and encoded(signed, "3") == pytest.approx([1.0, 1.0])


def test_a_boolean_is_one_column():
    flag = af.fit("on_sale", "boolean", ["true", "false"])
    assert [encoded(flag, t) for t in ("true", "false", None)] == [[1.0], [-1.0], [0.0]]


def test_text_forms_of_typed_values_and_of_stored_payloads():
    assert af.as_text("numeric", 1995) == "1995"
    assert af.as_text("numeric", 2.5) == "2.5"
    assert af.as_text("numeric", float("nan")) is None
    assert af.as_text("boolean", True) == "true"
    assert af.as_text("tags", ["a", "b"]) == "a|b"
    assert af.as_text("tags", []) is None
    assert af.as_text("categorical", None) is None
    stored = {"brand": "acme", "price": 12.0, "tags": ["a"], "on_sale": "true"}
    assert af.stored_as_text(stored) == {
        "brand": "acme",
        "price": "12",
        "tags": "a",
        "on_sale": "true",
    }
    raw = af.texts_json({"b": "2", "a": "1"})
    assert raw == '{"a":"1","b":"2"}' and af.texts_from_json(raw) == {"a": "1", "b": "2"}
    assert af.texts_from_json(None) == {} and af.texts_from_json("[1]") == {}


def spec_with_attributes() -> EncodingSpec:
    brand = af.fit("brand", "categorical", ["acme", "zen"]).as_dict()
    price = af.fit("price", "numeric", ["10", "20"]).as_dict()
    region = af.fit("region", "categorical", ["north", "south"]).as_dict()
    return EncodingSpec(["1", "2"], ["Comedy"], ["doctor"], 4, [brand, price], [region])


def test_the_encoder_puts_declared_attributes_after_the_fixed_columns(tmp_path):
    spec = spec_with_attributes()
    assert spec.item_dim == CATEGORY_OFFSET + 1 + 2 + 2
    assert spec.user_dim == USER_FIXED + 1 + 2
    encoder = Encoder(spec)
    item = encoder.item(1995, 3, 4.0, ["Comedy"], {"brand": "zen", "price": "20"})
    plain = encoder.item(1995, 3, 4.0, ["Comedy"])
    np.testing.assert_array_equal(item[: spec.category_end], plain[: spec.category_end])
    assert item[spec.category_end : spec.category_end + 2].tolist() == [0.0, 1.0]
    assert item[-1] == 1.0 and not plain[spec.category_end :].any()
    user = encoder.user(30, "F", "doctor", 5, 4.0, {"region": "south"})
    assert user[-2:].tolist() == [0.0, 1.0]
    spec.save(tmp_path / "encoding.json")
    again = EncodingSpec.load(tmp_path / "encoding.json")
    assert again == spec and again.item_dim == spec.item_dim
    np.testing.assert_array_equal(
        Encoder(again).item(1995, 3, 4.0, ["Comedy"], {"brand": "zen", "price": "20"}), item
    )


def test_an_artifact_from_before_declared_attributes_encodes_as_it_did(tmp_path):
    old = {"item_ids": ["1"], "genres": ["Comedy"], "occupations": ["doctor"], "embedding_dim": 4}
    (tmp_path / "encoding.json").write_text(json.dumps(old))
    spec = EncodingSpec.load(tmp_path / "encoding.json")
    assert spec.item_dim == CATEGORY_OFFSET + 1 and spec.user_dim == USER_FIXED + 1
    encoder = Encoder(spec)
    # Attributes sent to an old model are ignored: it has no columns for them.
    assert encoder.item(1995, 3, 4.0, ["Comedy"], {"brand": "zen"}).shape == (spec.item_dim,)


def test_the_build_fits_the_declared_attributes_of_a_dataset(tmp_path):
    from pipelines.dataset import attribute_json, declared_attributes
    from pipelines.inputs import fit_attributes
    from recserve_data import Column, ColumnType

    columns = {
        "year": Column(type=ColumnType.NUMERIC),  # a fixed column of the encoder
        "brand": Column(type=ColumnType.CATEGORICAL),
        "price": Column(type=ColumnType.NUMERIC),
        "summary": Column(type=ColumnType.TEXT),  # kept, not learned
    }
    kinds = declared_attributes(columns, {"year": ColumnType.NUMERIC})
    assert kinds == {"brand": "categorical", "price": "numeric"}
    frame = pd.DataFrame({"brand": ["acme", None], "price": [10.0, float("nan")]})
    stored = attribute_json(frame, kinds)
    assert stored == ['{"brand":"acme","price":"10"}', "{}"]
    fitted = fit_attributes(pd.Series(stored), kinds)
    assert [f["name"] for f in fitted] == ["brand", "price"] and fitted[0]["values"] == ["acme"]


def test_feast_serves_an_artifact_from_before_declared_attributes_and_stored_vectors(tmp_path):
    """Its tables have no attributes column and no user vectors: the views
    leave those fields out instead of failing to publish it."""
    from recserve_feast.repo import attributes_field, user_vector_view

    pd.DataFrame({"user_id": ["1"], "age": [30]}).to_parquet(tmp_path / "user_profile.parquet")
    pd.DataFrame({"item_id": ["1"], "attributes": ["{}"]}).to_parquet(
        tmp_path / "item_profile.parquet"
    )
    assert attributes_field(tmp_path, "user_profile") == []
    assert [f.name for f in attributes_field(tmp_path, "item_profile")] == ["attributes"]
    assert user_vector_view(tmp_path) is None
