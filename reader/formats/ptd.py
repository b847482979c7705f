"""ExecuTorch `.ptd` (FlatTensor) data files planned from tensor layouts, sans-IO.

A `.ptd` is a FlatBuffer (file identifier `FT01`) with a 40-byte header (`FH01`)
spliced in after its first 8 bytes, then the tensors' bytes as aligned segments.
Everything before the first segment depends on layouts only, so `plan_ptd` builds
it once and the rest of the file is the tensors' bytes in order with zero padding:
the whole file streams without buffering a tensor, and any byte range of it maps
onto a few tensors (see `PtdPlan.pieces`).

The FlatBuffer is built with Google's `flatbuffers` runtime (four small tables, no
generated code, no `flatc`). Layouts follow ExecuTorch's own emitter, so a `.pte`
exported with external constants finds what it expects under each key:
- keys are the fully qualified names of the model's weights and constants;
- row-major tensors are written as they are, with the dim order ExecuTorch derives
  from their strides; channels_last 4-d tensors keep their memory order and dim order
  `[0, 2, 3, 1]`; every other layout (transposed, strided views) is written row-major
  with the identity dim order;
- names that view the same bytes (tied weights) share one segment.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import flatbuffers

from ..errors import UnsupportedPayload
from ..pt2.strided import is_channels_last_2d, is_row_major
from ..pt2.tensorinfo import TensorInfo
from .body import Body, BytesBody
from .planned import PlannedBody

DEFAULT_ALIGNMENT = 128  # ExecuTorch's FlatTensorConfig.segment_alignment
MAX_ALIGNMENT = 1 << 20
FILE_IDENTIFIER = b"FT01"
HEADER_MAGIC = b"FH01"
# magic, header length, flatbuffer offset, flatbuffer size, segment base offset, segment data size
HEADER = struct.Struct("<4sIQQQQ")
# The header is padded to the FlatBuffer's own alignment before the FlatBuffer resumes.
FLATBUFFER_ALIGNMENT = 16
PADDED_HEADER_LENGTH = -(-HEADER.size // FLATBUFFER_ALIGNMENT) * FLATBUFFER_ALIGNMENT
FLAT_TENSOR_VERSION = 0  # runtimes refuse anything newer
# executorch_flatbuffer.ScalarType (scalar_type.fbs): c10 numbering without the complex
# types and float8_e8m0fnu, which the schema does not define.
EXECUTORCH_SCALAR_TYPES = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 11, 15, 23, 24, 25, 26, 27, 28, 29})
INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class PtdSegment:
    """One stored byte run: read `source` in `order`; it starts `offset` bytes into the file."""

    offset: int
    size: int
    source: TensorInfo
    order: str  # the reader's order that yields these bytes: "default" or "contiguous"


@dataclass(frozen=True, slots=True)
class PtdEntry:
    """One key of the file and the layout ExecuTorch is told for it."""

    info: TensorInfo
    scalar_type: int
    dim_order: tuple[int, ...]
    segment: int  # index into PtdPlan.segments


@dataclass(frozen=True, slots=True)
class PtdPlan:
    head: bytes  # header, FlatBuffer and padding: everything before the first segment
    segments: tuple[PtdSegment, ...]
    entries: tuple[PtdEntry, ...]
    alignment: int
    length: int  # the file's size in bytes

    def pieces(self) -> Iterator[bytes | PtdSegment]:
        """The file front to back: bytes to send as they are, and segments to read."""
        yield self.head
        at = len(self.head)
        for segment in self.segments:
            if segment.offset > at:
                yield bytes(segment.offset - at)
            yield segment
            at = segment.offset + segment.size


def ptd_refusal(info: TensorInfo) -> str | None:
    """Why `info` cannot be a key of a .ptd file, or None when it can."""
    if info.unsupported is not None:
        return info.unsupported
    geometry = info.geometry
    if info.executorch_scalar_type not in EXECUTORCH_SCALAR_TYPES:
        return f"dtype {geometry.dtype} has no ExecuTorch scalar type"
    sizes = geometry.sizes
    if any(size > INT32_MAX for size in sizes):
        return f"sizes {list(sizes)} do not fit ExecuTorch's int32 sizes"
    if len(sizes) > 255:
        return f"{len(sizes)} dims do not fit ExecuTorch's uint8 dim order"
    return None


def writable(info: TensorInfo) -> bool:
    return ptd_refusal(info) is None


def ptd_body(plan: PtdPlan, tensor: Callable[[TensorInfo, str], Body]) -> PlannedBody:
    """The whole file as one body; `tensor(info, order)` gives a segment's bytes
    (`lambda info, order: archive.tensor(info.name, model=info.model, order=order)`)."""
    parts: list[Body] = []
    for piece in plan.pieces():
        if isinstance(piece, PtdSegment):
            body = tensor(piece.source, piece.order)
            if body.length != piece.size:
                raise ValueError(f"{piece.source.name}: {body.length} bytes, the plan says {piece.size}")
            parts.append(body)
        else:
            parts.append(BytesBody(piece))
    return PlannedBody(parts)


def executorch_layout(info: TensorInfo) -> tuple[str, tuple[int, ...]]:
    """The reader order whose bytes ExecuTorch stores for `info`, and the dim order it records.

    ExecuTorch's emitter keeps a tensor's memory layout only when it is row-major or
    channels_last; anything else goes through `Tensor.contiguous()`.
    """
    geometry = info.geometry
    sizes, strides = geometry.sizes, geometry.strides
    identity = tuple(range(len(sizes)))
    if is_row_major(sizes, strides):
        return "contiguous", _dim_order_from_strides(strides)
    if info.dense and is_channels_last_2d(sizes, strides):
        return "default", _dim_order_from_strides(strides)
    return "contiguous", identity


def _dim_order_from_strides(strides: tuple[int, ...]) -> tuple[int, ...]:
    """exir.tensor.dim_order_from_stride: dims by decreasing stride, ties in dim order.

    A zero stride (possible only on a size-1 dim here) makes ExecuTorch refuse the
    tensor; the bytes are row-major then, so the identity order describes them.
    """
    if 0 in strides:
        return tuple(range(len(strides)))
    return tuple(sorted(range(len(strides)), key=lambda dim: -strides[dim]))


def plan_ptd(tensors: Iterable[TensorInfo], alignment: int = DEFAULT_ALIGNMENT) -> PtdPlan:
    """Lay out `tensors` (one model's, keys unique) as a .ptd file.

    Raises UnsupportedPayload naming every tensor that cannot be written (filter
    with `ptd_refusal` first to skip them instead) and ValueError for a bad
    alignment or a repeated key.
    """
    if not (alignment & (alignment - 1) == 0 and 8 <= alignment <= MAX_ALIGNMENT):
        raise ValueError(f"alignment must be a power of two from 8 to {MAX_ALIGNMENT}, not {alignment}")
    tensors = list(tensors)
    refused = [f"{t.name} ({reason})" for t in tensors if (reason := ptd_refusal(t))]
    if refused:
        raise UnsupportedPayload(f"cannot be written to a .ptd file: {', '.join(refused)}")
    seen: set[str] = set()
    for info in tensors:
        if info.name in seen:
            raise ValueError(f"key {info.name!r} appears twice (tensors of several models?)")
        seen.add(info.name)

    # Segments relative to the segment base, as the FlatBuffer records them.
    relative: list[tuple[int, int, TensorInfo, str]] = []
    by_bytes: dict[tuple, int] = {}
    entries: list[PtdEntry] = []
    end = 0
    for info in tensors:
        order, dim_order = executorch_layout(info)
        geometry = info.geometry
        same_bytes = (info.storage.entry, geometry, order)  # where, and how they are viewed
        index = by_bytes.get(same_bytes)
        if index is None:
            index = by_bytes[same_bytes] = len(relative)
            start = _aligned(end, alignment)
            relative.append((start, geometry.nbytes, info, order))
            end = start + geometry.nbytes
        entries.append(PtdEntry(info, info.executorch_scalar_type, dim_order, index))

    flatbuffer = _flat_tensor(entries, [(offset, size) for offset, size, _, _ in relative])
    segment_base = _aligned(PADDED_HEADER_LENGTH + len(flatbuffer), alignment)
    header = HEADER.pack(HEADER_MAGIC, HEADER.size, PADDED_HEADER_LENGTH, len(flatbuffer), segment_base, end)
    root_offset = int.from_bytes(flatbuffer[:4], "little") + PADDED_HEADER_LENGTH
    head = b"".join(
        (
            root_offset.to_bytes(4, "little"),
            flatbuffer[4:8],
            header.ljust(PADDED_HEADER_LENGTH, b"\0"),
            flatbuffer[8:],
        )
    ).ljust(segment_base, b"\0")
    segments = tuple(PtdSegment(segment_base + off, size, info, order) for off, size, info, order in relative)
    return PtdPlan(head, segments, tuple(entries), alignment, segment_base + end)


@functools.lru_cache(maxsize=64)
def cached_plan(tensors: tuple[TensorInfo, ...], alignment: int = DEFAULT_ALIGNMENT) -> PtdPlan:
    """`plan_ptd`, remembered: building the FlatBuffer costs Python work for every tensor (the
    flatbuffers runtime is pure Python), and a download's ranges and resumes ask for the
    same file again. TensorInfo is frozen, so equal selections of equal layouts share a plan."""
    return plan_ptd(tensors, alignment)


def _aligned(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _flat_tensor(entries: list[PtdEntry], segments: list[tuple[int, int]]) -> bytes:
    """The FlatTensor table (flat_tensor.fbs) as a finished FlatBuffer with identifier FT01."""
    builder = flatbuffers.Builder(256 + 96 * len(entries))
    segment_tables = []
    for offset, size in segments:  # DataSegment {offset: uint64, size: uint64}
        builder.StartObject(2)
        builder.PrependUint64Slot(0, offset, 0)
        builder.PrependUint64Slot(1, size, 0)
        segment_tables.append(builder.EndObject())
    named_tables = []
    for entry in entries:
        key = builder.CreateString(entry.info.name)
        sizes = entry.info.geometry.sizes
        builder.StartVector(4, len(sizes), 4)
        for size in reversed(sizes):
            builder.PrependInt32(size)
        size_vector = builder.EndVector()
        dim_order_vector = builder.CreateByteVector(bytes(entry.dim_order))
        # TensorLayout {scalar_type: ScalarType (byte), sizes: [int32], dim_order: [uint8]}
        builder.StartObject(3)
        builder.PrependInt8Slot(0, entry.scalar_type, 0)
        builder.PrependUOffsetTRelativeSlot(1, size_vector, 0)
        builder.PrependUOffsetTRelativeSlot(2, dim_order_vector, 0)
        layout = builder.EndObject()
        # NamedData {key: string, segment_index: uint32, tensor_layout: TensorLayout}
        builder.StartObject(3)
        builder.PrependUOffsetTRelativeSlot(0, key, 0)
        builder.PrependUint32Slot(1, entry.segment, 0)
        builder.PrependUOffsetTRelativeSlot(2, layout, 0)
        named_tables.append(builder.EndObject())
    segment_vector = _table_vector(builder, segment_tables)
    named_vector = _table_vector(builder, named_tables)
    # FlatTensor {version: uint32, segments: [DataSegment], named_data: [NamedData]}
    builder.StartObject(3)
    builder.PrependUint32Slot(0, FLAT_TENSOR_VERSION, 0)
    builder.PrependUOffsetTRelativeSlot(1, segment_vector, 0)
    builder.PrependUOffsetTRelativeSlot(2, named_vector, 0)
    builder.Finish(builder.EndObject(), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def _table_vector(builder: flatbuffers.Builder, tables: list[int]) -> int:
    builder.StartVector(4, len(tables), 4)
    for table in reversed(tables):
        builder.PrependUOffsetTRelative(table)
    return builder.EndVector()


__all__ = [
    "DEFAULT_ALIGNMENT",
    "MAX_ALIGNMENT",
    "PtdPlan",
    "cached_plan",
    "plan_ptd",
    "ptd_body",
    "writable",
]
