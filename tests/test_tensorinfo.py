"""TensorInfo stays a frozen dataclass however the index builds it, and to_dict mirrors it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from reader.pt2.frozen import fast_constructor
from reader.pt2.tensorinfo import Geometry, StorageRef, TensorInfo, build_storage_ref, build_tensor_info

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


# -- geometry: what a readable tensor always has -------------------------------------------------


def test_geometry_is_immutable_slotted_and_every_field_required() -> None:
    assert all("None" not in str(kind) for kind in Geometry.__annotations__.values())
    assert Geometry._field_defaults == {}
    geometry = build_tensor_info(*_values()).geometry
    assert type(geometry) is Geometry and not hasattr(geometry, "__dict__")
    assert geometry == Geometry("float32", (2, 3), (1, 2), (1, 0), 2, 6, 4, 24, 8)
    with pytest.raises(AttributeError):
        geometry.numel = 1  # type: ignore[misc]


async def test_every_readable_tensor_has_a_geometry_equal_to_its_fields() -> None:
    listed = await _every_listed()
    readable = [info for info in listed if info.readable]
    assert len(readable) > 50
    for info in readable:
        geometry = info.geometry
        assert geometry == Geometry(
            info.dtype,  # type: ignore[arg-type]
            info.sizes,  # type: ignore[arg-type]
            info.strides,  # type: ignore[arg-type]
            info.dim_order,  # type: ignore[arg-type]
            info.storage_offset,  # type: ignore[arg-type]
            info.numel,  # type: ignore[arg-type]
            info.itemsize,  # type: ignore[arg-type]
            info.nbytes,  # type: ignore[arg-type]
            info.storage.offset,  # type: ignore[arg-type]
        )
        assert geometry.data_offset == geometry.storage_offset * geometry.itemsize


async def test_each_unreadable_kind_refuses_a_geometry_naming_why() -> None:
    import reader
    from reader.pt2.checkpoint import strided_info
    from reader.zipfmt import ZipEntry

    listed = await _every_listed()
    entry = ZipEntry("q", b"q", 0, 0, 0, 2, 2, 0, 64, "stored")
    quantized = strided_info("q", "checkpoint", "weight", "qint8", (2,), (1,), 0, entry, 2, False, False, "q")
    unreadable = [info for info in [*listed, quantized] if not info.readable]
    kinds = {info.unsupported[:20] for info in unreadable if info.unsupported}
    assert len(kinds) >= 4  # custom objects, symbolic sizes, pickled, no byte layout here, ...
    for info in unreadable:
        with pytest.raises(reader.UnsupportedPayload) as caught:
            _ = info.geometry
        assert str(caught.value) == f"{info.model}/{info.name}: {info.unsupported}"
    # a readable tensor that somehow lacks a field is refused too, not handed out with a None
    lacking = dataclasses.replace(build_tensor_info(*_values()), itemsize=None)
    with pytest.raises(reader.UnsupportedPayload, match=r"^model/h\.0\.w: no strided layout$"):
        _ = lacking.geometry


# Reading a TensorInfo field with a fallback (`info.sizes or ()`, `info.nbytes or 0`) or past the type
# checker (`info.sizes  # type: ignore`) is what `geometry` replaces: neither comes back.
_FIELDS = r"\b(sizes|strides|dim_order|numel|itemsize|nbytes|storage_offset|dtype)\b"
_COERCED = re.compile(_FIELDS + r"[^=]* or (\(\)|0|1|\"\")(?!\w)")
_IGNORED = re.compile(r"info\.\w+.*# type: ignore")


def test_no_reader_coerces_a_tensorinfo_field() -> None:
    from testing.paths import REPO

    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for folder in ("reader", "app")
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _COERCED.search(line) or _IGNORED.search(line)
    ]
    assert not found, "use TensorInfo.geometry:\n" + "\n".join(found)


def test_the_coercion_check_sees_what_it_forbids() -> None:
    assert _COERCED.search("        shape = list(info.sizes or ())")
    assert _COERCED.search("    length = info.nbytes or 0")
    assert _COERCED.search("    itemsize = info.itemsize or 1")
    assert _IGNORED.search("to_numpy(raw, info.sizes)  # type: ignore[arg-type]")
    assert not _COERCED.search("    sizes = info.geometry.sizes")


async def test_a_region_or_a_shard_of_an_unreadable_tensor_is_refused_by_its_geometry() -> None:
    """Regions and shards check a tensor through `geometry` like every read: an unreadable one is
    refused as UnsupportedPayload naming why, before anything is read (an empty region too)."""
    import reader
    from reader.loading.regions import Region, read_regions
    from testing.paths import ARCHIVES

    landed: list[str] = []
    async with reader.open_archive(ARCHIVES / "pickled.pt2") as ar:
        pickled = next(info for info in ar.tensors() if not info.readable)
        assert pickled.sizes is not None and pickled.unsupported is not None  # sized, yet not raw bytes
        why = re.escape(f"{pickled.model}/{pickled.name}: {pickled.unsupported}")
        empty = Region(pickled.name, (0,) * len(pickled.sizes), (0,) * len(pickled.sizes))
        with pytest.raises(reader.UnsupportedPayload, match=why):
            await read_regions(ar, [empty], lambda region, *_: landed.append(region.name))
        assert not landed and ar.stats.get("data", {}).get("requests", 0) == 0
        shard = reader.Shard(0, 2, {pickled.name: 0})
        with pytest.raises(reader.UnsupportedPayload, match=why):
            shard.cut(pickled)
