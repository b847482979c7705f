"""Fuzz cases: mutations of base archives and generated payload configs, each with what it must read as."""

from __future__ import annotations

import itertools
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fuzz import deepjson
from fuzz.bases import BaseMap, all_bases, base_map, pattern, pt2_files, row_major, symint
from fuzz.choices import Choices, chance, pick
from fuzz.deepjson import dumps
from testing.zipbytes import build_zip

BOUNDARY = (0, 1, 2, 0x7F, 0xFF, 0xFFFF, 0xFFFE, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFE,
            1 << 32, 2**63 - 1, 2**64 - 1)  # fmt: skip
# itemsize per serialized ScalarType, written out independently of reader.pt2.dtypes
ITEMSIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2,
            28: 2, 29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8}  # fmt: skip


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
        strides = row_major(sizes)
    elif layout_kind == 1:  # a permutation of the row-major strides (channels-last, transposes)
        order = list(range(ndim))
        for i in range(ndim - 1, 0, -1):
            j = ch.integer(0, i)
            order[i], order[j] = order[j], order[i]
        permuted = row_major([sizes[i] for i in order])
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
        meta["tensor_meta"] = pick(ch, [None, [], "tensor", 7, deepjson.nested(ch.integer(1, 40), None)])
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
        tensor_meta["sizes"] = deepjson.nested(ch.integer(1, 200), {"as_int": 1})
    elif spoil == 7:
        tensor_meta["strides"] = tensor_meta["strides"][:-1]  # ndim mismatch
    plain = (path, dtype, tuple(sizes), tuple(strides), offset)
    exact = (
        meta.get("tensor_meta") is tensor_meta
        and tensor_meta.get("dtype") is dtype
        and all(
            tensor_meta.get(key) == value
            for key, value in (
                ("sizes", [symint(s) for s in sizes]),
                ("strides", [symint(s) for s in strides]),
                ("storage_offset", symint(offset)),
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
    deepjson.forget()
    count = ch.integer(1, 3)
    sizes = [pick(ch, [0, 1, 2, 4, 8, 12, 16, 24, 48, 64, 96]) for _ in range(count)]
    payloads = {f"weight_{i}": pattern(size, i) for i, size in enumerate(sizes)}
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
        document = {"config": config, "deep": deepjson.nested(ch.integer(100, 3000), 1)}
    elif shape == 2:
        document = {"config": {"w": deepjson.nested(ch.integer(500, 2000), 0)}}
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
