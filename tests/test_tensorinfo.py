"""TensorInfo stays a frozen dataclass however the index builds it, and to_dict mirrors it."""

from __future__ import annotations

import dataclasses

import pytest

from reader.pt2.frozen import fast_constructor
from reader.pt2.tensorinfo import StorageRef, TensorInfo, build_storage_ref, build_tensor_info

pytestmark = pytest.mark.unit


def _values() -> tuple:
    storage = StorageRef("root/data/weights/weight_0", 8, 64, "stored", 0xDEADBEEF)
    return ("h.0.w", "model", "weight", "float32", (2, 3), (1, 2), 2, (1, 0), True, 6, 4, 24, True,
            False, False, 6, storage, None)  # fmt: skip


def test_fast_constructors_build_the_same_frozen_objects() -> None:
    values = _values()
    fast, slow = build_tensor_info(*values), TensorInfo(*values)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert [getattr(fast, f.name) for f in dataclasses.fields(TensorInfo)] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.name = "other"  # type: ignore[misc]
    assert build_storage_ref(*dataclasses.astuple(values[16])) == values[16]
    with pytest.raises(TypeError):
        build_tensor_info(*values[:-1])  # every field, always: no defaults to hide a missing one


def test_fast_constructor_follows_the_declared_fields() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 0

    assert fast_constructor(Point)(3, 4) == Point(3, 4)


def test_to_dict_is_asdict_with_lists() -> None:
    info = build_tensor_info(*_values())
    expected = dataclasses.asdict(info)
    for key in ("sizes", "strides", "dim_order"):
        expected[key] = list(expected[key])
    assert info.to_dict() == expected
    assert info.storage.to_dict() == expected["storage"]
