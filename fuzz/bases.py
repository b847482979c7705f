"""Base archives to mutate (small fixtures and synthetic PT2 archives) and maps of their fields."""

from __future__ import annotations

import functools
import json
import pathlib
import struct
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fuzz.deepjson import dumps
from fuzz.targets import exercise, run_bounded
from reader import zipfmt
from reader.zipfmt import structs
from testing.zipbytes import build_zip

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "archives"
SMALL_FIXTURES = ("layouts.pt2", "two_models.pt2", "dtypes.pt2", "pickled.pt2", "zero_payload.pt2")
CONTAINERS = ROOT / "tests" / "fixtures" / "containers" / "torch-2.13"
CONTAINER_FIXTURES = ("checkpoint.pt", "aoti_pickle.pt2")


def symint(value: int) -> dict:
    return {"as_int": value}


def row_major(sizes: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


def _meta(path: str, dtype: int, sizes: Sequence[int], strides: Sequence[int], offset: int = 0) -> dict:
    return {
        "path_name": path, "is_param": True, "use_pickle": False,
        "tensor_meta": {"dtype": dtype, "sizes": [symint(s) for s in sizes], "requires_grad": False,
                        "device": {"type": "cpu", "index": None}, "strides": [symint(s) for s in strides],
                        "storage_offset": symint(offset), "layout": 7},
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


def pattern(size: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed * 13 + 1) % 251 for i in range(size))


@functools.cache
def synthetic_bases() -> dict[str, bytes]:
    """Small PT2 archives written by Python's zipfile, in the ZIP variants other tools produce."""
    payloads = {"weight_0": pattern(64), "weight_1": pattern(24, 1), "weight_2": b""}
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
    bases = {name: (FIXTURES / name).read_bytes() for name in SMALL_FIXTURES if (FIXTURES / name).exists()}
    for name in CONTAINER_FIXTURES:  # a torch.save checkpoint, an AOTInductor pickle_weights package
        path = CONTAINERS / name
        if path.exists():
            bases[path.name] = path.read_bytes()
    return bases


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
        # checkpoints: data.pkl says every tensor's layout; AOTI: weights_config.json does, and a
        # nested storage ("outer!/inner") lies inside its outer entry
        configs |= {
            entry.name for entry in entries if entry.name.endswith(("/data.pkl", "/weights_config.json"))
        }
        if payload:
            configs.add(payload.split("!/", 1)[0])
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
