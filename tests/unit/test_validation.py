"""One id policy at every service's edge: ASCII only,
so Unicode digits can neither crash a lookup nor alias a real id."""

import pytest

from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id, is_decimal
from services.retriever.store import point_id

FULLWIDTH = "".join(chr(0xFF10 + int(d)) for d in "9000000042")  # "9000000042" in wide digits


@pytest.mark.parametrize("bad", ["²", "①", "٤٢", FULLWIDTH, "a b", "x" * 129, ""])
def test_non_ascii_empty_or_long_ids_are_refused_with_the_field_named(bad):
    with pytest.raises(InvalidArgument) as raised:
        check_id(bad, "item_id")
    assert raised.value.message.startswith("item_id: ")


def test_ordinary_ids_pass():
    for good in ["42", "new-user-x", "sku:123/a", "__health__", "a.b@c"]:
        assert check_id(good, "user_id") == good


def test_unicode_digits_never_alias_a_decimal_point_id():
    assert is_decimal("42") and not is_decimal("٤٢") and not is_decimal("²")
    assert point_id("42") == 42
    assert point_id("٤٢") != 42 and point_id("٤٢") >= 1 << 63  # hashed, no crash
    assert point_id(FULLWIDTH) != 9000000042
