"""Which payload entries a load needs, as a few large ranges of the archive (sans-IO).

A storage (one payload entry) is read once, whole, however many names view it: its CRC-32
covers the whole entry, and tied names and views then share one buffer as torch's state
dict shares one storage. Entries lying close together are fetched as one range that runs
across the local headers between them (the demultiplexer finds each entry's data in it).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .. import zipfmt
from ..errors import UnsupportedPayload
from ..pt2 import strided
from ..pt2.tensorinfo import Geometry, TensorInfo
from ..zipfmt import ZipEntry

# Entries closer than this are one range: the bytes in between cost less than another request.
RANGE_GAP = 1 << 20
# A zero-byte payload means zeros: its views' extent is allocated, up to this much.
MAX_ZERO_STORAGE = 1 << 30
_header_offset = operator.attrgetter("header_offset")


class Storage(NamedTuple):
    """One payload entry and the bytes its buffer holds (`nbytes`; zeros when `zeros`). A
    NamedTuple: a load makes one per payload, and a frozen dataclass costs three times as much."""

    entry: ZipEntry
    nbytes: int
    zeros: bool


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Archive bytes [start, end) that hold the whole stored data of `entries`, in order."""

    start: int
    end: int
    entries: tuple[ZipEntry, ...]

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class LoadPlan:
    tensors: tuple[TensorInfo, ...]  # what the caller gets, in order
    storages: dict[str, Storage]  # by entry name
    ranges: tuple[ReadRange, ...]  # what is read, for the storages that hold bytes

    @property
    def output_bytes(self) -> int:
        return sum(storage.nbytes for storage in self.storages.values())


def plan_load(
    tensors: Iterable[TensorInfo], entries: Mapping[str, ZipEntry], gap: int = RANGE_GAP
) -> LoadPlan:
    """The storages behind `tensors` (each readable: UnsupportedPayload otherwise) and the ranges
    that read them."""
    chosen = tuple(tensors)
    storages: dict[str, Storage] = {}
    for info in chosen:
        geometry = info.geometry  # UnsupportedPayload unless readable
        name = info.storage.entry
        known = storages.get(name)
        entry = known.entry if known else entries[name]
        if known is None:
            zipfmt.check_decodable(entry)
        extent = _extent_bytes(geometry, info.dense)
        if entry.size:
            if extent > entry.size:
                raise UnsupportedPayload(
                    f"{info.model}/{info.name} reaches byte {extent} of a {entry.size}-byte payload"
                )
            if known is None:
                storages[name] = Storage(entry, entry.size, False)
        else:
            nbytes = max(extent, known.nbytes if known else 0)
            if nbytes > MAX_ZERO_STORAGE:
                raise UnsupportedPayload(
                    f"{info.model}/{info.name}: {nbytes} bytes of zeros from an empty payload "
                    f"(limit {MAX_ZERO_STORAGE})"
                )
            storages[name] = Storage(entry, nbytes, True)
    backed = [storage.entry for storage in storages.values() if not storage.zeros]
    return LoadPlan(chosen, storages, tuple(group_ranges(backed, gap)))


def group_ranges(entries: Iterable[ZipEntry], gap: int = RANGE_GAP) -> list[ReadRange]:
    """Entries as ranges [first header, last region end): each entry's whole region (local header,
    data, descriptor) lies in one range, and entries less than `gap` apart share one."""
    ranges: list[ReadRange] = []
    run: list[ZipEntry] = []
    for entry in sorted(entries, key=_header_offset):
        if run and entry.header_offset - run[-1].region_end > gap:
            ranges.append(_range(run))
            run = []
        run.append(entry)
    if run:
        ranges.append(_range(run))
    return ranges


def set_apart(rng: ReadRange, limit: int) -> list[ReadRange]:
    """`rng` split so that every entry bigger than `limit` is a range of its own."""
    ranges: list[ReadRange] = []
    run: list[ZipEntry] = []
    for entry in rng.entries:
        if entry.size > limit:
            ranges += [_range(run)] if run else []
            ranges.append(_range([entry]))
            run = []
        else:
            run.append(entry)
    return ranges + ([_range(run)] if run else [])


def split_within(rng: ReadRange, limit: int) -> list[ReadRange]:
    """`rng` cut between entries into ranges of at most `limit` bytes (an entry bigger than that is
    a range of its own): what a streaming read takes from its memory budget at once."""
    ranges: list[ReadRange] = []
    run: list[ZipEntry] = []
    for entry in rng.entries:
        if run and entry.region_end - run[0].header_offset > limit:
            ranges.append(_range(run))
            run = []
        run.append(entry)
    return ranges + ([_range(run)] if run else [])


def _range(run: list[ZipEntry]) -> ReadRange:
    return ReadRange(run[0].header_offset, max(entry.region_end for entry in run), tuple(run))


def _extent_bytes(geometry: Geometry, dense: bool) -> int:
    """Bytes of storage the view reaches (0 for an empty view). A dense view (in any dimension
    order) covers exactly its elements from its offset on: most of a model, and no arithmetic."""
    if not geometry.numel:
        return 0
    if dense:
        return (geometry.storage_offset + geometry.numel) * geometry.itemsize
    extent = strided.element_extent(geometry.sizes, geometry.strides, geometry.storage_offset)
    return extent[1] * geometry.itemsize
