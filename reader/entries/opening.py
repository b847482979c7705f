"""The open policy: how few reads it takes to get from a byte source to a full index.

1. one read of the tail (end records, and usually the whole central directory);
2. at most one more read if the central directory is larger than the tail;
3. the metadata entries (configs, archive_format, a checkpoint's data.pkl, ...), each
   read with its local header, adjacent ones coalesced, independent ones in parallel,
   and served from the bytes already held when the tail covered them;
4. for AOTInductor pickle_weights models only: the head and tail of every nested
   torch.save file, all at once, coalesced (see entries.nested).

Which PyTorch ZIP container the file is decides what step 3 fetches: a PT2 archive
(`archive_format`; exported programs and/or AOTInductor models) or a torch.save
checkpoint (`data.pkl`). A file that is not a ZIP gets its first bytes read once,
to say what it is instead (a legacy torch.save pickle, say).

Only the reads run on the event loop: what they bring is parsed on a worker thread under the
open's time budget (entries.parsing), in as few steps as the reads allow: the directory and the
plan of what to fetch, then the metadata inflated and the whole index built; one step when the
tail already holds the metadata, as a small archive's does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .. import zipfmt
from ..deadline import Deadline
from ..errors import ArchiveFormatError, NoReadableWeights, ReaderError, UnsupportedPayload
from ..pickle import load_torch_pickle
from ..pickle.torch_objects import TensorRecord
from ..pt2 import aoti, checkpoint
from ..pt2.index import ARCHIVE_FORMAT, IndexPlan, build_index, plan_index
from ..pt2.tensorinfo import TensorInfo
from ..sources import ByteSource
from ..sources.base import BytesAt
from ..zipfmt import ZipEntry
from .budget import MetadataBudget
from .nested import NestedZip, read_nested_zips
from .parsing import ParseBudget
from .ranges import coalesce

MAX_LOCAL_EXTRA = 0xFFFF


# The first bytes of a legacy (pre-1.6, non-ZIP) torch.save file: pickle protocol 2, then
# torch's magic number 0x1950a86a20f9469cfc6c as a 10-byte LONG1.
LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
SNIFF_BYTES = 16


@dataclass(frozen=True)
class OpenedIndex:
    root: str
    entries: dict[str, ZipEntry]
    index: dict[str, dict[str, TensorInfo]]
    data_offsets: dict[str, int]  # of the metadata entries read while opening
    container: str = "pt2"  # "pt2", "checkpoint", "aoti" or "pt2+aoti"
    unreadable: dict[str, str] = field(default_factory=dict)  # model → why it cannot be read
    budget: MetadataBudget = field(default_factory=MetadataBudget)  # what metadata read later may take


@dataclass(frozen=True)
class _Layout:
    """What the central directory says: the entries, which container they make, and the metadata
    entries its index needs."""

    by_name: dict[str, ZipEntry]
    needed: list[ZipEntry]
    metadata: MetadataBudget  # the archive's one cap on decompressed metadata, counted across entries
    checkpoint: checkpoint.CheckpointPlan | None = None  # a torch.save checkpoint
    pt2: IndexPlan | None = None  # else a PT2 archive,
    models: dict[str, aoti.AotiModel] = field(default_factory=dict)  # and its AOTInductor models


@dataclass(frozen=True)
class _Parsed:
    """An index built from the metadata entries (kept: AOTInductor models read on from them)."""

    opened: OpenedIndex
    contents: dict[str, bytes]


async def read_index(source: ByteSource, tail_size: int, budget: ParseBudget) -> OpenedIndex:
    try:
        held, span = await _read_directory(source, tail_size)
        layout, parsed = await budget.run(lambda deadline: _parse_held(held, span, deadline))
    except ArchiveFormatError as exc:
        raise await _what_it_is_instead(source, exc) from None
    if parsed is None:  # the metadata lies outside the tail: read it, then parse it
        runs = await _fetch_metadata(source, [held], layout.needed, layout.metadata)
        parsed = await budget.run(lambda deadline: _parse_metadata(layout, runs, deadline))
    if not layout.models:
        return parsed.opened
    return await _with_aoti(source, held, layout, parsed, budget)


def _parse_held(
    held: BytesAt, span: zipfmt.DirectorySpan, deadline: Deadline
) -> tuple[_Layout, _Parsed | None]:
    """The directory's layout, and the index too when the bytes held already cover the metadata (a
    small archive's tail holds it all: one step on the worker, not two)."""
    layout = _layout(held, span)
    if all(held.covers(*_entry_region(entry)) for entry in layout.needed):
        return layout, _parse_metadata(layout, [held], deadline)
    return layout, None


def _layout(held: BytesAt, span: zipfmt.DirectorySpan) -> _Layout:
    directory = memoryview(held.data)[span.offset - held.start : span.end - held.start]
    entries = zipfmt.parse_central_directory(directory, span)
    if not entries:
        raise ArchiveFormatError("not a PT2 archive or torch.save checkpoint: the ZIP archive is empty")
    by_name = {entry.name: entry for entry in entries}
    first = entries[0].name
    root = first.partition("/")[0]
    saved = checkpoint.plan_checkpoint(by_name, first)
    if saved is not None and f"{root}/{ARCHIVE_FORMAT}" not in by_name:
        return _Layout(by_name, [by_name[name] for name in saved.needed], MetadataBudget(), checkpoint=saved)
    if f"{root}/{ARCHIVE_FORMAT}" not in by_name:
        raise ArchiveFormatError(
            f"not a PT2 archive or torch.save checkpoint: no {root + '/' + ARCHIVE_FORMAT!r} "
            f"or {root + '/' + checkpoint.PICKLE!r} entry"
        )
    plan = plan_index(by_name, first)
    models = aoti.plan_aoti(by_name, plan.root)
    configs = [model.config for model in models.values() if model.config]
    needed = [by_name[name] for name in (*plan.needed, *configs)]
    return _Layout(by_name, needed, MetadataBudget(), pt2=plan, models=models)


def _parse_metadata(layout: _Layout, runs: list[BytesAt], deadline: Deadline) -> _Parsed:
    """The metadata entries inflated, and the index built from them."""
    contents, offsets = _decode_metadata(runs, layout.needed, layout.metadata)
    by_name, saved, plan = layout.by_name, layout.checkpoint, layout.pt2
    if saved is not None:
        tensors = checkpoint.build_checkpoint_index(saved, by_name, contents, deadline=deadline)
        index = {checkpoint.CHECKPOINT_MODEL: tensors}
        opened = OpenedIndex(saved.root, by_name, index, offsets, "checkpoint", budget=layout.metadata)
        return _Parsed(opened, contents)
    assert plan is not None  # a layout is a checkpoint's or a PT2 archive's
    index = build_index(plan, by_name, contents)
    return _Parsed(OpenedIndex(plan.root, by_name, index, offsets, budget=layout.metadata), contents)


async def _with_aoti(
    source: ByteSource, held: BytesAt, layout: _Layout, parsed: _Parsed, budget: ParseBudget
) -> OpenedIndex:
    """The index with the archive's AOTInductor models: those with pickle_weights read, the others
    listed as unreadable."""
    opened, models = parsed.opened, layout.models
    index, offsets = dict(opened.index), dict(opened.data_offsets)
    unreadable = {
        model.listed_name: aoti.describe_unreadable(model) for model in models.values() if not model.config
    }
    readable = [model for model in models.values() if model.config]
    if readable:
        aoti_index, nested_offsets = await _read_aoti(
            source, held, layout, opened.root, readable, parsed.contents, budget
        )
        index.update(aoti_index)
        offsets.update(nested_offsets)
    container = "pt2+aoti" if layout.pt2 and layout.pt2.models else "aoti"
    if not any(index.values()) and unreadable:
        kind = "an AOTInductor package" if container == "aoti" else "a PT2 archive with AOTInductor models"
        raise NoReadableWeights(
            f"{source.location} is {kind} with no readable weights: " + "; ".join(unreadable.values())
        )
    return OpenedIndex(opened.root, layout.by_name, index, offsets, container, unreadable, layout.metadata)


async def _read_aoti(
    source: ByteSource, held: BytesAt, layout: _Layout, root: str,
    models: list[aoti.AotiModel], contents: dict[str, bytes], budget: ParseBudget,
) -> tuple[dict[str, dict[str, TensorInfo]], dict[str, int]]:  # fmt: skip
    """pickle_weights models: each FQN's dtype from its nested data.pkl, bytes in its nested storage.

    Adds each nested storage entry to the layout's `by_name`, so reads find it like any other entry."""
    by_name = layout.by_name

    def parse_configs(_deadline: Deadline) -> dict[str, dict[str, aoti.AotiWeight]]:
        return {model.name: aoti.parse_weights_config(contents[model.config or ""], model.config or "")
                for model in models}  # fmt: skip

    configs = await budget.run(parse_configs)
    files = sorted({aoti.weight_file_entry(root, w) for config in configs.values() for w in config.values()})
    missing = [name for name in files if name not in by_name]
    if missing:
        raise ArchiveFormatError(
            f"an AOTInductor weights config names {missing[0]!r}, which is not in the archive"
        )
    nested, runs = await read_nested_zips(source, [held], [by_name[name] for name in files], budget)
    pickles = {
        archive.outer.name: aoti.nested_pickle(archive.outer.name, archive.entries) for archive in nested
    }
    needed = list(pickles.values())
    pickle_runs = await _fetch_metadata(source, runs, needed, layout.metadata)

    def parse(deadline: Deadline) -> tuple[dict[str, dict[str, TensorInfo]], dict[str, int]]:
        pickle_contents, offsets = _decode_metadata(pickle_runs, needed, layout.metadata)
        index = _aoti_index(by_name, root, models, configs, nested, pickles, pickle_contents, deadline)
        return index, offsets

    return await budget.run(parse)


def _aoti_index(
    by_name: dict[str, ZipEntry], root: str, models: list[aoti.AotiModel],
    configs: dict[str, dict[str, aoti.AotiWeight]], nested: list[NestedZip], pickles: dict[str, ZipEntry],
    pickle_contents: dict[str, bytes], deadline: Deadline,
) -> dict[str, dict[str, TensorInfo]]:  # fmt: skip
    tensors_of: dict[str, tuple[TensorRecord, ZipEntry]] = {}
    for archive in nested:
        pickle_entry = pickles[archive.outer.name]
        record = load_torch_pickle(pickle_contents[pickle_entry.name], pickle_entry.name, deadline=deadline)
        storage = aoti.nested_storage(archive.outer.name, archive.entries, record)
        by_name[storage.name] = storage
        tensors_of[archive.outer.name] = (record, storage)
    index = {}
    for model in models:
        tensors = {}
        for fqn, weight in configs[model.name].items():
            record, storage = tensors_of[aoti.weight_file_entry(root, weight)]
            tensors[fqn] = aoti.aoti_tensor_info(fqn, model, weight, record, storage, model.config or "")
        index[model.listed_name] = tensors
    return index


async def _what_it_is_instead(source: ByteSource, error: ArchiveFormatError) -> ReaderError:
    """A file that is not a ZIP: say what it is when it is recognisably something else."""
    head = await source.read(0, min(SNIFF_BYTES, source.size), purpose="open")
    if head.startswith(LEGACY_TORCH_MAGIC):
        return UnsupportedPayload(
            f"{source.location} is a legacy torch.save file (the pre-1.6 format: pickles, not a ZIP), "
            "which cannot be read without executing it; re-save it with torch.save from torch >= 1.6"
        )
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return UnsupportedPayload(f"{source.location} is a bare pickle, not a PT2 archive or torch.save ZIP")
    return error


async def _read_directory(source: ByteSource, tail_size: int) -> tuple[BytesAt, zipfmt.DirectorySpan]:
    """The bytes that hold the central directory, and where it lies (its parse is a step of its own)."""
    size = source.size
    start = max(0, size - max(tail_size, zipfmt.structs.END_RECORD.size))
    held = BytesAt(start, await source.read(start, size, purpose="open"))
    while True:
        found = zipfmt.locate_directory(held.data, held.start, size)
        if isinstance(found, zipfmt.DirectorySpan):
            break
        held = await _extend(source, held, found.start)
    if found.offset < held.start:
        held = await _extend(source, held, found.offset)
    return held, found


async def _extend(source: ByteSource, held: BytesAt, start: int) -> BytesAt:
    if start >= held.start:
        raise ArchiveFormatError(f"ZIP end records point back into themselves (at {start})")
    return BytesAt(start, await source.read(start, held.start, purpose="open") + held.data)


def _entry_region(entry: ZipEntry) -> tuple[int, int]:
    """The bytes that surely hold an entry's local header and data."""
    longest = zipfmt.local_header_guess(entry) + MAX_LOCAL_EXTRA + entry.compressed_size
    return entry.header_offset, min(entry.region_end, entry.header_offset + longest)


def _check_metadata(entries: list[ZipEntry], metadata: MetadataBudget) -> None:
    """Metadata entries this reader will read and inflate: each counted against the archive's one
    budget (by its declared size, before a byte of it is inflated) and decodable."""
    for entry in entries:
        metadata.take(entry)
        zipfmt.check_decodable(entry)


async def _fetch_metadata(
    source: ByteSource, held: list[BytesAt], entries: list[ZipEntry], metadata: MetadataBudget
) -> list[BytesAt]:
    """Runs of bytes that hold each entry's local header and data; `held` are the runs already read."""
    _check_metadata(entries, metadata)
    regions = {entry.name: _entry_region(entry) for entry in entries}
    missing = coalesce(
        [region for region in regions.values() if not any(run.covers(*region) for run in held)]
    )
    fetched = await _read_all(source, missing)
    return [*held, *(BytesAt(start, data) for (start, _), data in zip(missing, fetched))]


def _decode_metadata(
    runs: list[BytesAt], entries: list[ZipEntry], metadata: MetadataBudget
) -> tuple[dict[str, bytes], dict[str, int]]:
    """Each entry's content (inflated and CRC-checked), and where its data starts."""
    _check_metadata(entries, metadata)
    contents, offsets = {}, {}
    for entry in entries:
        region = _entry_region(entry)
        run = next(run for run in runs if run.covers(*region))
        offset = zipfmt.locate_data(entry, run.slice(*region), entry.compressed_size)
        if isinstance(offset, zipfmt.NeedUntil):  # the region holds the longest possible header
            raise ArchiveFormatError(f"local header of {entry.name!r} runs past its data")
        stored = run.slice(offset, offset + entry.compressed_size)
        decoder = zipfmt.EntryDecoder(entry)
        contents[entry.name] = b"".join(decoder.feed(stored))
        decoder.finish()
        offsets[entry.name] = offset
    return contents, offsets


async def _read_all(source: ByteSource, regions: list[tuple[int, int]]) -> list[bytes]:
    """Each region's bytes, read in parallel; one region is awaited as it is (a task costs a turn
    of the event loop, a tenth of opening a local archive's index)."""
    if len(regions) == 1:
        return [await source.read(*regions[0], purpose="open")]
    return await asyncio.gather(*(source.read(start, end, purpose="open") for start, end in regions))
