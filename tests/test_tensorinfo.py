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


# -- what each container fixes -------------------------------------------------------------------

OPTIONAL = [
    f.name for f in dataclasses.fields(TensorInfo) if "None" in str(f.type) and f.name != "unsupported"
]


async def _every_listed() -> list[TensorInfo]:
    import reader
    from testing.paths import ARCHIVES, CONTAINERS

    listed: list[TensorInfo] = []
    for path in sorted(ARCHIVES.glob("*.pt2")) + sorted(CONTAINERS.glob("*/*.pt*")):
        try:
            async with reader.open_archive(path) as ar:
                listed += ar.tensors()
        except reader.ReaderError:
            continue  # a container the reader refuses whole (legacy, AOTInductor blobs)
    return listed


async def test_a_readable_tensor_has_every_field() -> None:
    """What readers rely on when they use a readable tensor's fields as they are."""
    listed = await _every_listed()
    readable = [info for info in listed if info.readable]
    assert readable and all(getattr(info, name) is not None for info in readable for name in OPTIONAL)
    assert all(type(info.sizes) is tuple and type(info.strides) is tuple for info in readable)


async def test_each_optional_field_is_one_a_container_can_lack() -> None:
    from reader.pt2.checkpoint import strided_info
    from reader.zipfmt import ZipEntry

    listed = await _every_listed()
    entry = ZipEntry("q", b"q", 0, 0, 0, 2, 2, 0, 64, "stored")
    quantized = strided_info("q", "checkpoint", "weight", "qint8", (2,), (1,), 0, entry, 2, False, False, "q")
    shapes = {
        info.unsupported and info.unsupported[:20]: info for info in [*listed, quantized] if not info.readable
    }
    lacked = {name for info in shapes.values() for name in OPTIONAL if getattr(info, name) is None}
    assert lacked == set(OPTIONAL)
    assert quantized.sizes == (2,) and quantized.itemsize is None and quantized.nbytes is None


def test_check_readable_names_the_tensor_and_why() -> None:
    import reader

    info = build_tensor_info(*_values())
    info.check_readable()
    unreadable = dataclasses.replace(info, unsupported="pickled")
    with pytest.raises(reader.UnsupportedPayload, match=r"^model/h\.0\.w: pickled$"):
        unreadable.check_readable()
