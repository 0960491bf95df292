"""The features service builds Feast values directly for the types its views
write (services/features/records.py: proto_values); the bytes stored must be
those Feast's own conversion gives, or a reader would see other values."""

import numpy as np
import pytest
from feast.type_map import python_values_to_proto_values
from feast.value_type import ValueType

from services.features.records import plain, proto_values

SAMPLES = {
    ValueType.STRING: ["a", "", "ünïcode", None],
    ValueType.INT64: [0, -3, 2**40, np.int64(7), None],
    ValueType.FLOAT: [0.5, -1.25, 3.0, np.float32(0.1), 1e-7, None],
    ValueType.STRING_LIST: [["1", "22", "333"], [], ["only"], None],
    ValueType.FLOAT_LIST: [[0.5, -1.0], np.array([0.1, 2.5], dtype=np.float32), [], None],
    ValueType.INT64_LIST: [[1, 2, 3], [], np.array([4, 5], dtype=np.int64), None],
}


@pytest.mark.parametrize("value_type", list(SAMPLES), ids=lambda t: t.name)
def test_the_values_are_feasts_byte_for_byte(value_type):
    ours = proto_values(SAMPLES[value_type], value_type)
    feasts = python_values_to_proto_values(SAMPLES[value_type], value_type)
    assert [v.SerializeToString() for v in ours] == [v.SerializeToString() for v in feasts]


def test_an_unset_value_reads_back_as_none_and_a_list_as_itself():
    unset, listed = proto_values([None, ["9", "8"]], ValueType.STRING_LIST)
    assert plain(unset) is None and plain(listed) == ["9", "8"]


def test_other_types_go_through_feasts_own_conversion():
    (flag,) = proto_values([True], ValueType.BOOL)
    assert flag.bool_val is True


def test_a_value_of_the_wrong_type_is_refused_not_written():
    with pytest.raises(TypeError):
        proto_values(["not a number"], ValueType.INT64)
    with pytest.raises(TypeError):
        proto_values([["1", 2]], ValueType.STRING_LIST)
