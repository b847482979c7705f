"""Shared fuzz targets, input generators and oracles (used by fuzz/fuzz_reader.py and tests/test_fuzz.py).

Inputs are generated from a `Choices` stream, so the same generators run under hypothesis
(`st.data()`), atheris (`FuzzedDataProvider`) and a plain seeded `random.Random`.

The contract checked (see fuzz/README.md):
- for any bytes, opening and reading every tensor (both orders, `stream`, `read_many`,
  `read_numpy`) either succeeds or raises a `reader.ReaderError` subclass;
- the sans-IO `reader.zipfmt` functions raise only `ArchiveFormatError` / `IntegrityError`;
- a mutated archive never hands out wrong bytes for a tensor whose payload entry, config
  entries and their headers were left alone; generated tensors read back as a plain
  Python gather over their payload says they should.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import pathlib
import re
import resource
import struct
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import reader
from reader import zipfmt
from reader.sources import BytesSource
from reader.zipfmt import structs
from testing.zipbytes import build_zip

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "archives"
SMALL_FIXTURES = ("structs.pt2", "two_models.pt2", "dtypes.pt2", "pickled.pt2", "zero_payload.pt2")

TIME_BOUND = 5.0  # seconds per input for asyncio.wait_for
STREAM_CAP = 4 << 20  # stream at most this many bytes of one tensor (zero payloads may claim more)
STREAM_CHUNK = 4099  # odd on purpose: chunks straddle element and header boundaries
ORDERS = ("default", "contiguous")
BOUNDARY = (0, 1, 2, 0x7F, 0xFF, 0xFFFF, 0xFFFE, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFE,
            1 << 32, 2**63 - 1, 2**64 - 1)  # fmt: skip
# itemsize per serialized ScalarType, written out independently of reader.pt2.dtypes
ITEMSIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2,
            28: 2, 29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8}  # fmt: skip


class ContractViolation(AssertionError):
    """The reader broke the fuzzing contract in a way that is not an exception of its own."""


# --------------------------------------------------------------------------- choices


class Choices(Protocol):
    def integer(self, low: int, high: int) -> int: ...
    def raw(self, size: int) -> bytes: ...


def pick(ch: Choices, items: Sequence[Any]) -> Any:
    return items[ch.integer(0, len(items) - 1)]


def chance(ch: Choices, one_in: int) -> bool:
    return ch.integer(0, one_in - 1) == 0


class RandomChoices:
    def __init__(self, rng: Any) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def raw(self, size: int) -> bytes:
        return self.rng.randbytes(size)


class FuzzedChoices:
    """atheris.FuzzedDataProvider as Choices."""

    def __init__(self, fdp: Any) -> None:
        self.fdp = fdp

    def integer(self, low: int, high: int) -> int:
        return self.fdp.ConsumeIntInRange(low, high)

    def raw(self, size: int) -> bytes:
        return self.fdp.ConsumeBytes(size)


class HypothesisChoices:
    """hypothesis' st.data() as Choices."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(self.st.integers(low, high))

    def raw(self, size: int) -> bytes:
        return self.data.draw(self.st.binary(min_size=size, max_size=size))


# --------------------------------------------------------------------------- archives


def _symint(value: int) -> dict:
    return {"as_int": value}


def _row_major(sizes: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


def _meta(path: str, dtype: int, sizes: Sequence[int], strides: Sequence[int], offset: int = 0) -> dict:
    return {
        "path_name": path, "is_param": True, "use_pickle": False,
        "tensor_meta": {"dtype": dtype, "sizes": [_symint(s) for s in sizes], "requires_grad": False,
                        "device": {"type": "cpu", "index": None}, "strides": [_symint(s) for s in strides],
                        "storage_offset": _symint(offset), "layout": 7},
    }  # fmt: skip


def pt2_files(document: Any, payloads: dict[str, bytes], *, root: str = "r", raw_config: bytes | None = None,
              constants: Any = None) -> dict[str, bytes]:  # fmt: skip
    """The entries of a minimal PT2 archive (torch's layout minus the graph)."""
    text = raw_config if raw_config is not None else dumps(document)
    files = {
        f"{root}/archive_format": b"pt2",
        f"{root}/archive_version": b"0",
        f"{root}/byteorder": b"little",
        **{f"{root}/data/weights/{name}": data for name, data in payloads.items()},
        f"{root}/data/weights/model_weights_config.json": text,
        f"{root}/data/constants/model_constants_config.json": json.dumps(
            {"config": constants or {}}
        ).encode(),
        f"{root}/models/model.json": b"{}",
    }
    return files


def _pattern(size: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed * 13 + 1) % 251 for i in range(size))


@functools.cache
def synthetic_bases() -> dict[str, bytes]:
    """Small PT2 archives written by Python's zipfile, in the ZIP variants other tools produce."""
    payloads = {"weight_0": _pattern(64), "weight_1": _pattern(24, 1), "weight_2": b""}
    config = {
        "w": _meta("weight_0", 7, [4, 4], [4, 1]),
        "w.t": _meta("weight_0", 7, [4, 4], [1, 4]),  # a transposed view of the same payload
        "w.row": _meta("weight_0", 7, [4], [1], 8),  # a view into the middle
        "h": _meta("weight_1", 6, [3, 2, 2], [1, 6, 3]),  # permuted (non-row-major) dense
        "z": _meta("weight_2", 5, [2, 3], [3, 1]),  # zero payload
    }
    files = pt2_files({"config": config}, payloads)
    return {
        "stored": build_zip(files),
        "deflated": build_zip(files, method=zipfile.ZIP_DEFLATED),
        "zip64": build_zip(files, force_zip64=True),
        "streamed": build_zip(files, streamed=True),
        "streamed-deflated": build_zip(files, method=zipfile.ZIP_DEFLATED, streamed=True),
        "comment": build_zip(files, comment=b"PK\x05\x06 a comment that looks like an end record"),
    }


@functools.cache
def fixture_bases() -> dict[str, bytes]:
    return {name: (FIXTURES / name).read_bytes() for name in SMALL_FIXTURES if (FIXTURES / name).exists()}


def all_bases() -> dict[str, bytes]:
    return {**fixture_bases(), **synthetic_bases()}


# --------------------------------------------------------------------------- base archive maps


@dataclass
class BaseMap:
    """Where each record of an unmodified archive lies, and what reading it gives."""

    data: bytes
    slots: list[tuple[int, int]]  # (position, width) of every integer field in every record
    starts: list[int]  # positions of records and fields: good places to cut, insert or flip
    entry_ranges: dict[str, list[tuple[int, int]]]  # entry name -> its local header+data, its central record
    good: dict  # outcome of exercise() on the unmodified archive
    depends: dict[tuple[str, str], set[str]]  # (model, tensor) -> entries its bytes depend on


def _struct_slots(fmt: struct.Struct, at: int) -> list[tuple[int, int]]:
    slots, position = [], at
    for code in fmt.format.lstrip("<"):
        width = {"H": 2, "I": 4, "Q": 8}.get(code)
        if code == "s":
            position += 4  # the signature ("4s": the 4 was already skipped)
            continue
        if width is None:
            continue
        slots.append((position, width))
        position += width
    return slots


def _extra_slots(data: bytes, at: int, length: int) -> list[tuple[int, int]]:
    slots, end = [], at + length
    while at + 4 <= end:
        header_id, size = struct.unpack_from("<HH", data, at)
        slots += [(at, 2), (at + 2, 2)]
        if header_id == structs.ZIP64_EXTRA_ID:
            slots += [(at + 4 + 8 * i, 8) for i in range(size // 8) if at + 12 + 8 * i <= end]
        at += 4 + size
    return slots


def map_archive(data: bytes) -> BaseMap:
    span, entries = directory_of(data)
    slots: list[tuple[int, int]] = []
    starts: list[int] = [span.offset, span.end]
    ranges: dict[str, list[tuple[int, int]]] = {}
    at = span.offset
    for entry in entries:
        fields = structs.CENTRAL_HEADER.unpack_from(data, at)
        name_length, extra_length, comment_length = fields[10:13]
        record_end = at + structs.CENTRAL_HEADER.size + name_length + extra_length + comment_length
        slots += _struct_slots(structs.CENTRAL_HEADER, at)
        slots += _extra_slots(data, at + structs.CENTRAL_HEADER.size + name_length, extra_length)
        local = entry.header_offset
        local_fields = structs.LOCAL_HEADER.unpack_from(data, local)
        slots += _struct_slots(structs.LOCAL_HEADER, local)
        slots += _extra_slots(data, local + 30 + local_fields[9], local_fields[10])
        data_start = local + 30 + local_fields[9] + local_fields[10]
        starts += [at, local, data_start, data_start + entry.compressed_size]
        ranges[entry.name] = [(local, entry.region_end), (at, record_end)]
        at = record_end
    end_record = data.rindex(structs.END_RECORD_SIGNATURE)
    slots += _struct_slots(structs.END_RECORD, end_record)
    starts.append(end_record)
    locator = end_record - structs.ZIP64_LOCATOR.size
    if locator >= 0 and data[locator : locator + 4] == structs.ZIP64_LOCATOR_SIGNATURE:
        slots += _struct_slots(structs.ZIP64_LOCATOR, locator)
        record = structs.ZIP64_LOCATOR.unpack_from(data, locator)[2]
        slots += _struct_slots(structs.ZIP64_END_RECORD, record)
        starts += [locator, record]
    good = run_bounded(exercise(data))
    depends: dict[tuple[str, str], set[str]] = {}
    root = entries[0].name.split("/")[0]
    for model, name, _ in (key for key in good if isinstance(key, tuple)):
        payload = good.get(("entry", model, name))
        configs = {f"{root}/data/weights/{model}_weights_config.json",
                   f"{root}/data/constants/{model}_constants_config.json"}  # fmt: skip
        depends[(model, name)] = {payload, *configs} if payload else set(configs)
    return BaseMap(data, slots, sorted(set(starts)), ranges, good, depends)


@functools.cache
def base_map(name: str) -> BaseMap:
    return map_archive(all_bases()[name])


def directory_of(data: bytes) -> tuple[zipfmt.DirectorySpan, tuple[zipfmt.ZipEntry, ...]]:
    start = max(0, len(data) - (1 << 20))
    while True:
        found = zipfmt.locate_directory(data[start:], start, len(data))
        if isinstance(found, zipfmt.DirectorySpan):
            return found, zipfmt.parse_central_directory(data[found.offset : found.end], found)
        start = found.start


# --------------------------------------------------------------------------- cases


@dataclass
class Case:
    data: bytes
    what: str
    base: str | None = None  # the unmodified archive, for the wrong-bytes oracle
    touched: set[int] | None = None  # positions changed in place; None: shifted, no oracle
    expected: dict = field(default_factory=dict)  # (name, order) -> acceptable byte strings


def _position(ch: Choices, base: BaseMap | None, size: int) -> int:
    if size == 0:
        return 0
    if base is not None and chance(ch, 2):
        anchor = pick(ch, base.starts)
        return max(0, min(size - 1, anchor + ch.integer(-4, 48)))
    return ch.integer(0, size - 1)


def _value(ch: Choices, width: int, old: int, size: int) -> int:
    kind = ch.integer(0, 5)
    if kind <= 1:
        value = pick(ch, BOUNDARY)
    elif kind == 2:
        value = size + ch.integer(-64, 64)
    elif kind == 3:
        value = old + ch.integer(-70, 70)
    elif kind == 4:
        value = old ^ (1 << ch.integer(0, 8 * width - 1))
    else:
        value = int.from_bytes(ch.raw(width).ljust(width, b"\0"), "little")
    return value % (1 << (8 * width))


def mutate(ch: Choices, base_name: str) -> Case:
    """One to three mutations of a base archive: flips, field overwrites, inserts, deletes, cuts, splices."""
    base = base_map(base_name)
    data = bytearray(base.data)
    touched: set[int] | None = set()
    names = []
    for _ in range(1 if ch.integer(0, 2) else ch.integer(2, 3)):
        op = ch.integer(0, 9)
        if op <= 1 and data:  # flip bits or overwrite a byte
            at = _position(ch, base, len(data))
            data[at] = data[at] ^ (1 << ch.integer(0, 7)) if op == 0 else ch.integer(0, 255)
            names.append(f"flip@{at}")
            if touched is not None:
                touched.add(at)
        elif op <= 4 and base.slots:  # an integer field gets a boundary value
            at, width = pick(ch, base.slots)
            if at + width > len(data):
                continue
            old = int.from_bytes(data[at : at + width], "little")
            value = _value(ch, width, old, len(data))
            data[at : at + width] = value.to_bytes(width, "little")
            names.append(f"field@{at}/{width}={value:#x}")
            if touched is not None:
                touched.update(range(at, at + width))
        elif op == 5:  # insert bytes (random, or a copy of an interesting record)
            at = _position(ch, base, len(data) + 1)
            if chance(ch, 2):
                blob = ch.raw(ch.integer(1, 64))
            else:
                start = pick(ch, base.starts)
                blob = bytes(base.data[start : start + ch.integer(4, 80)])
            data[at:at] = blob
            names.append(f"insert@{at}+{len(blob)}")
            touched = None
        elif op == 6 and data:  # delete a range
            at = _position(ch, base, len(data))
            length = ch.integer(1, 80)
            del data[at : at + length]
            names.append(f"delete@{at}+{length}")
            touched = None
        elif op == 7:  # truncate the end, or cut the start off
            at = _position(ch, base, len(data) + 1)
            data = bytearray(data[:at] if ch.integer(0, 3) else data[at:])
            names.append(f"cut@{at}")
            touched = None
        elif op == 8:  # splice: the start of this archive, the end of another
            other = base_map(pick(ch, sorted(all_bases())))
            at = _position(ch, base, len(data) + 1)
            at_other = _position(ch, other, len(other.data) + 1)
            data = bytearray(data[:at] + other.data[at_other:])
            names.append(f"splice@{at}+other@{at_other}")
            touched = None
        else:  # prepend or append junk (self-extracting style prefixes, trailing garbage)
            junk = ch.raw(ch.integer(1, 300))
            data = bytearray(junk + data if chance(ch, 2) else data + junk)
            names.append(f"junk+{len(junk)}")
            touched = None
    return Case(bytes(data), f"{base_name}: {', '.join(names)}", base_name, touched)


WEIRD = (None, True, False, -1, 0, 1.5, "7", "", [], [7], {}, {"as_int": 3}, 2**63, 2**64, -(2**63), 1e300)


def _weird(ch: Choices) -> Any:
    return pick(ch, WEIRD)


def _symint_json(ch: Choices, value: int, noisy: bool) -> Any:
    kind = ch.integer(0, 24) if noisy else 3
    if kind > 2:
        return {"as_int": value}
    if kind == 0:
        return {"as_expr": {"expr_str": "s0", "hint": value}}
    if kind == 1:
        return {"as_int": _weird(ch)}
    return _weird(ch)


def _int_value(ch: Choices, small: int, noisy: bool = True) -> int:
    kind = ch.integer(0, 19) if noisy else 2
    if kind == 0:
        return pick(ch, BOUNDARY)
    if kind == 1:
        return -ch.integer(1, 3)
    return ch.integer(0, small)


_LEAVES: list[str] = []


def _nested(depth: int, leaf: Any) -> str:
    """A placeholder that `dumps` expands to JSON nested `depth` deep (json.dumps would recurse)."""
    _LEAVES.append(json.dumps(leaf))
    return f"@@deep:{depth}:{len(_LEAVES) - 1}@@"


def dumps(document: Any) -> bytes:
    def expand(match: re.Match) -> str:
        depth, leaf = int(match.group(1)), _LEAVES[int(match.group(2))]
        opening = "".join('{"k": ' if i % 2 else "[" for i in range(depth))
        closing = "".join("}" if i % 2 else "]" for i in reversed(range(depth)))
        return opening + leaf + closing

    text = re.sub(r'"@@deep:(\d+):(\d+)@@"', expand, json.dumps(document))
    return text.encode()


def _gen_meta(
    ch: Choices, payload_names: Sequence[str], payload_sizes: dict[str, int], noisy: bool
) -> tuple[dict, Any]:
    """A PayloadMeta, mostly sane; returns it and (path, dtype, sizes, strides, offset) if all-int."""
    path = pick(ch, payload_names)
    if noisy and chance(ch, 12):
        path = pick(ch, ["weight_99", "custom_obj_0", "opaque_obj_1", "", "../weights/weight_0", 5, None])
    dtype: Any = pick(ch, sorted(ITEMSIZE))
    if noisy and chance(ch, 10):
        dtype = pick(ch, [0, 14, 27, 36, 99, -1, *WEIRD])
    ndim = ch.integer(0, 4)
    many = noisy and chance(ch, 25)
    if many:
        ndim = pick(ch, [8, 33, 64, 65, 70, 200])
    sizes = [_int_value(ch, 5, noisy) if not many else pick(ch, [1, 1, 1, 2]) for _ in range(ndim)]
    itemsize = ITEMSIZE.get(dtype, 1) if type(dtype) is int else 1
    payload_elements = payload_sizes.get(path, 0) // itemsize if isinstance(path, str) else 0
    layout_kind = ch.integer(0, 3)
    if layout_kind == 0:
        strides = _row_major(sizes)
    elif layout_kind == 1:  # a permutation of the row-major strides (channels-last, transposes)
        order = list(range(ndim))
        for i in range(ndim - 1, 0, -1):
            j = ch.integer(0, i)
            order[i], order[j] = order[j], order[i]
        permuted = _row_major([sizes[i] for i in order])
        strides = [0] * ndim
        for position, dim in enumerate(order):
            strides[dim] = permuted[position]
    else:
        strides = [_int_value(ch, 6, noisy) for _ in range(ndim)]
    offset = _int_value(ch, max(payload_elements, 1), noisy) if chance(ch, 3) else 0
    meta: dict[str, Any] = {
        "path_name": path, "is_param": True, "use_pickle": chance(ch, 15),
        "tensor_meta": {"dtype": dtype, "sizes": [_symint_json(ch, s, noisy) for s in sizes],
                        "requires_grad": False, "device": {"type": "cpu", "index": None},
                        "strides": [_symint_json(ch, s, noisy) for s in strides],
                        "storage_offset": _symint_json(ch, offset, noisy), "layout": 7},
    }  # fmt: skip
    tensor_meta = meta["tensor_meta"]
    spoil = ch.integer(0, 30) if noisy else -1
    if spoil == 0:
        meta["tensor_meta"] = pick(ch, [None, [], "tensor", 7, _nested(ch.integer(1, 40), None)])
    elif spoil == 1:
        meta[pick(ch, ["path_name", "is_param", "use_pickle"])] = _weird(ch)
    elif spoil == 2:
        tensor_meta[pick(ch, ["requires_grad", "layout", "sizes", "strides", "storage_offset"])] = _weird(ch)
    elif spoil == 3:
        del tensor_meta[pick(ch, sorted(tensor_meta))]
    elif spoil == 4:
        del meta[pick(ch, sorted(meta))]
    elif spoil == 5:
        tensor_meta["layout"] = ch.integer(0, 9)
    elif spoil == 6:
        tensor_meta["sizes"] = _nested(ch.integer(1, 200), {"as_int": 1})
    elif spoil == 7:
        tensor_meta["strides"] = tensor_meta["strides"][:-1]  # ndim mismatch
    plain = (path, dtype, tuple(sizes), tuple(strides), offset)
    exact = (
        meta.get("tensor_meta") is tensor_meta
        and tensor_meta.get("dtype") is dtype
        and all(
            tensor_meta.get(key) == value
            for key, value in (
                ("sizes", [_symint(s) for s in sizes]),
                ("strides", [_symint(s) for s in strides]),
                ("storage_offset", _symint(offset)),
            )
        )
    )
    return meta, plain if exact and meta.get("path_name") == path else None


def _expected(payload: bytes, dtype: int, sizes: Sequence[int], strides: Sequence[int], offset: int) -> dict:
    """What the reader may return for a view, by a plain Python gather: {order: {acceptable bytes}}."""
    itemsize = ITEMSIZE[dtype]
    numel = 1
    for size in sizes:
        numel *= size
    if numel > 4096:
        return {}
    if numel == 0:
        return {"default": {b""}, "contiguous": {b""}}
    if not payload:  # a zero-byte payload means zeros
        zeros = bytes(numel * itemsize)
        return {"default": {zeros}, "contiguous": {zeros}}
    out = bytearray()
    for index in itertools.product(*(range(size) for size in sizes)):
        element = offset + sum(i * s for i, s in zip(index, strides))
        out += payload[element * itemsize : (element + 1) * itemsize]
    contiguous = bytes(out)
    reach = sum((size - 1) * stride for size, stride in zip(sizes, strides))
    span = payload[offset * itemsize : (offset + reach + 1) * itemsize]
    # memory order: the storage span for a dense view, the row-major gather otherwise
    default = {contiguous, span} if len(span) == len(contiguous) else {contiguous}
    return {"default": default, "contiguous": {contiguous}}


def generate_config_archive(ch: Choices) -> Case:
    """A well-formed ZIP whose PT2 configs are generated: odd types, huge or negative sizes,
    as_expr, unknown dtypes, deep nesting, many dims, views that overrun their payloads."""
    del _LEAVES[:]
    count = ch.integer(1, 3)
    sizes = [pick(ch, [0, 1, 2, 4, 8, 12, 16, 24, 48, 64, 96]) for _ in range(count)]
    payloads = {f"weight_{i}": _pattern(size, i) for i, size in enumerate(sizes)}
    if chance(ch, 8):
        payloads["custom_obj_0"] = b"\x80\x04N."
    payload_sizes = {name: len(data) for name, data in payloads.items()}
    config: dict[str, Any] = {}
    plain = {}
    noisy = chance(ch, 2)
    for i in range(ch.integer(0, 4)):
        name = pick(ch, ["w", "a.b", "x/y", "", "\u00e9", f"t{i}", "w "])
        meta, plain[name] = _gen_meta(ch, list(payloads), payload_sizes, noisy)
        config[name] = meta
    document: Any = {"config": config}
    raw_config = None
    shape = ch.integer(0, 40) if noisy else -1
    if shape == 0:
        document = pick(ch, [[], "config", None, {"config": []}, {"config": None}, {"other": config}])
    elif shape == 1:
        document = {"config": config, "deep": _nested(ch.integer(100, 3000), 1)}
    elif shape == 2:
        document = {"config": {"w": _nested(ch.integer(500, 2000), 0)}}
    elif shape == 3:
        raw_config = dumps(document)
        at = ch.integer(0, len(raw_config))
        raw_config = raw_config[:at] + ch.raw(ch.integer(0, 8)) + raw_config[at + ch.integer(0, 3) :]
    elif shape == 4:
        raw_config = b'{"config": {"w": {"path_name": "weight_0", "is_param": true, "use_pickle": false, ' + (
            b'"tensor_meta": {"dtype": 7, "sizes": [{"as_int": 1e400}], "strides": [{"as_int": 1}], '
            b'"storage_offset": {"as_int": 0}, "requires_grad": false}}}}'
        )
    elif shape == 5:
        raw_config = b'{"config": {"w": 1, "w": 2}}'
    files = pt2_files(document, payloads, raw_config=raw_config)
    if chance(ch, 10):  # a second model sharing the payloads
        files["r/models/second.json"] = b"{}"
        files["r/data/weights/second_weights_config.json"] = dumps({"config": config})
    variant = ch.integer(0, 5)
    data = build_zip(
        files,
        method=zipfile.ZIP_DEFLATED if variant in (1, 4) else zipfile.ZIP_STORED,
        force_zip64=variant == 2,
        streamed=variant in (3, 4),
    )
    expected = {}
    if raw_config is None and shape != 0:
        for name, recipe in plain.items():
            if recipe is None:  # a field was spoiled: no gather to compare with
                continue
            path, dtype, dims, strides, offset = recipe
            usable = type(dtype) is int and dtype in ITEMSIZE and isinstance(path, str)
            if usable and path.startswith("weight_"):
                payload = payloads.get(path)
                if payload is not None and all(v >= 0 for v in (*dims, *strides, offset)):
                    for order, options in _expected(payload, dtype, dims, strides, offset).items():
                        expected[(name, order)] = options
    return Case(data, f"config {json.dumps(document, default=str)[:300]!s}", None, None, expected)


def generate_case(ch: Choices) -> Case:
    kind = ch.integer(0, 3)
    if kind == 0:
        return generate_config_archive(ch)
    return mutate(ch, pick(ch, sorted(all_bases())))


# --------------------------------------------------------------------------- the targets


async def exercise(data: bytes) -> dict:
    """Open and read every tensor every way; map each read to its bytes or its ReaderError's name.

    Any exception that is not a ReaderError escapes (that is the bug being looked for);
    inconsistent answers between read, stream and read_many raise ContractViolation.
    """
    results: dict[Any, Any] = {}
    try:
        async with reader.open_archive(BytesSource(data)) as ar:
            infos = ar.tensors()
            for info in infos:
                info.to_dict()
                results[("entry", info.model, info.name)] = info.storage.entry
                for order in ORDERS:
                    key = (info.model, info.name, order)
                    try:
                        results[key] = await ar.read(info.name, model=info.model, order=order)
                    except reader.ReaderError as exc:
                        results[key] = type(exc).__name__
                    await _check_stream(ar, info, order, results[key])
                try:
                    array = await ar.read_numpy(info.name, model=info.model)
                except reader.ReaderError:
                    pass
                else:
                    contiguous = results[(info.model, info.name, "contiguous")]
                    if isinstance(contiguous, bytes) and array.shape != tuple(info.sizes or ()):
                        raise ContractViolation(f"read_numpy({info.name!r}) has shape {array.shape}")
            for model in ar.models:
                names = [info.name for info in ar.tensors(model)]
                for order in ORDERS:
                    try:
                        many = await ar.read_many(names, model=model, order=order)
                    except reader.ReaderError:
                        continue
                    for name, value in many.items():
                        single = results.get((model, name, order))
                        if isinstance(single, bytes) and value != single:
                            raise ContractViolation(f"read_many({name!r}, {order}) differs from read")
    except reader.ReaderError as exc:
        return {"open": type(exc).__name__}
    return results


async def _check_stream(ar: reader.Archive, info: reader.TensorInfo, order: str, read: Any) -> None:
    end = min(info.nbytes or 0, STREAM_CAP)
    try:
        chunks = [bytes(c) async for c in ar.stream(info.name, model=info.model, order=order, end=end,
                                                   chunk_size=STREAM_CHUNK)]  # fmt: skip
    except reader.ReaderError:
        return
    streamed = b"".join(chunks)
    if len(streamed) != end:
        raise ContractViolation(f"stream({info.name!r}, {order}) gave {len(streamed)} of {end} bytes")
    if isinstance(read, bytes) and streamed != read[:end]:
        raise ContractViolation(f"stream({info.name!r}, {order}) differs from read")
    if any(len(c) > STREAM_CHUNK for c in chunks):
        raise ContractViolation(f"stream({info.name!r}) gave a chunk larger than chunk_size")


def run_bounded(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIME_BOUND))


def check_case(case: Case) -> dict:
    """Run a case through the reader and every oracle; return the outcome."""
    outcome = run_bounded(exercise(case.data))
    if case.base is not None and case.touched is not None:
        base = base_map(case.base)
        touched_entries = {
            name for name, ranges in base.entry_ranges.items()
            if any(start <= at < end for start, end in ranges for at in case.touched)
        }  # fmt: skip
        for key, value in outcome.items():
            if not (isinstance(key, tuple) and len(key) == 3 and key[0] != "entry"):
                continue
            model, name, _ = key
            good = base.good.get(key)
            if not isinstance(value, bytes) or not isinstance(good, bytes):
                continue
            if base.depends.get((model, name), set()) & touched_entries:
                continue
            if value != good:
                raise ContractViolation(
                    f"{case.what}: {key} read {len(value)} bytes that differ from the original's "
                    f"{len(good)}, but its payload, configs and headers are untouched"
                )
    for (name, order), options in case.expected.items():
        value = outcome.get(("model", name, order))
        if isinstance(value, bytes) and value not in options:
            raise ContractViolation(f"{case.what}: {name!r} ({order}) read wrong bytes: {value.hex()[:80]}")
    return outcome


def exercise_zipfmt(data: bytes, ch: Choices | None = None) -> None:
    """The sans-IO parser directly, called as documented; only its own two errors may escape."""
    size = len(data)
    span = None
    for tail in (22, 300, 4096, 1 << 20):
        start = max(0, size - tail)
        try:
            for _ in range(6):
                found = zipfmt.locate_directory(data[start:], start, size)
                if isinstance(found, zipfmt.DirectorySpan):
                    span = found
                    break
                if not 0 <= found.start < start:
                    raise ContractViolation(f"locate_directory asked for {found.start} holding [{start}, ..)")
                start = found.start
            else:
                raise ContractViolation("locate_directory kept asking for more bytes")
        except reader.ArchiveFormatError:
            span = None
    if span is None:
        return
    if not 0 <= span.offset <= span.end <= size:
        raise ContractViolation(f"directory span {span} lies outside the {size}-byte archive")
    try:
        entries = zipfmt.parse_central_directory(memoryview(data)[span.offset : span.end], span)
    except reader.ArchiveFormatError:
        return
    for entry in entries:
        if not entry.header_offset + 30 + len(entry.raw_name) + entry.compressed_size <= entry.region_end:
            raise ContractViolation(f"entry {entry} overruns its region")
        if entry.region_end > span.offset:
            raise ContractViolation(f"entry {entry} reaches into the central directory")
        header = data[entry.header_offset : entry.region_end]
        try:
            zipfmt.local_header_size(entry, header[: ch.integer(0, 40)] if ch else header)
            offset = zipfmt.data_offset(entry, header)
        except reader.ArchiveFormatError:
            continue
        if offset + entry.compressed_size > entry.region_end:
            raise ContractViolation(f"data of {entry.name!r} overruns its region")
        try:
            decoder = zipfmt.EntryDecoder(entry, verify=ch is None or chance(ch, 2))
            stored = memoryview(data)[offset : offset + entry.compressed_size]
            position = 0
            while position < len(stored):
                step = ch.integer(1, 4096) if ch else 1 << 16
                for _ in decoder.feed(stored[position : position + step]):
                    pass
                position += step
            decoder.finish()
        except (reader.ArchiveFormatError, reader.IntegrityError):
            continue


# --------------------------------------------------------------------------- resource bounds


@contextlib.contextmanager
def memory_cap(extra: int = 2 << 30) -> Iterator[None]:
    """Cap the address space at what is in use now plus `extra`, so an allocation sized by a
    claimed field fails with MemoryError instead of succeeding lazily (Linux only)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        in_use = _vm_size()
    except (OSError, ValueError, AttributeError):
        yield
        return
    limit = in_use + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _vm_size() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise OSError("no VmSize")
