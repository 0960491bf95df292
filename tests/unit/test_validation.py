"""One id policy at every service's edge: ASCII only,
so Unicode digits can neither crash a lookup nor alias a real id."""

import pytest

from recserve_kit.errors import InvalidArgument
from recserve_kit.validation import check_id, check_ids, is_decimal
from services.retriever.store import point_id

FULLWIDTH = "".join(chr(0xFF10 + int(d)) for d in "9000000042")  # "9000000042" in wide digits


@pytest.mark.parametrize("bad", ["²", "①", "٤٢", FULLWIDTH, "a b", "x" * 129, ""])
def test_non_ascii_empty_or_long_ids_are_refused_with_the_field_named(bad):
    with pytest.raises(InvalidArgument) as raised:
        check_id(bad, "item_id")
    assert raised.value.message.startswith("item_id: ")


@pytest.mark.parametrize(
    "bad", ["²", "٤٢", "a b", "x" * 129, "", "7\n8", "7\n", "\n8", "\n", "9\n\n9"]
)
def test_a_list_of_ids_is_checked_as_each_id_is_and_the_first_bad_one_named(bad):
    with pytest.raises(InvalidArgument) as raised:
        check_id(bad, "item_id")  # one id that holds a newline is refused alone too
    values = ["1", "sku:2", bad, "²"]
    with pytest.raises(InvalidArgument) as listed:
        check_ids(values, "item_ids")
    assert listed.value.message == raised.value.message.replace("item_id: ", "item_ids[2]: ")
    with pytest.raises(InvalidArgument) as unindexed:
        check_ids(values, "history_item_ids", indexed=False)
    assert unindexed.value.message.startswith("history_item_ids: ")


def test_a_list_of_ordinary_ids_passes():
    check_ids([], "item_ids")
    check_ids(["42", "new-user-x", "sku:123/a", "x" * 128, *map(str, range(1000))], "item_ids")


def test_ordinary_ids_pass():
    for good in ["42", "new-user-x", "sku:123/a", "__health__", "a.b@c"]:
        assert check_id(good, "user_id") == good


def test_unicode_digits_never_alias_a_decimal_point_id():
    assert is_decimal("42") and not is_decimal("٤٢") and not is_decimal("²")
    assert point_id("42") == 42
    assert point_id("٤٢") != 42 and point_id("٤٢") >= 1 << 63  # hashed, no crash
    assert point_id(FULLWIDTH) != 9000000042
