"""Test helpers: drive the sans-IO parser over in-memory archives, and build odd ZIPs with zipfile."""

from __future__ import annotations

import io
import zipfile

from reader import zipfmt


def directory_of(
    data: bytes, tail_size: int = 1 << 20
) -> tuple[zipfmt.DirectorySpan, tuple[zipfmt.ZipEntry, ...]]:
    """What opening does, over bytes: grow the tail while the parser asks for more."""
    start = max(0, len(data) - tail_size)
    asks = 0
    while True:
        found = zipfmt.locate_directory(data[start:], start, len(data))
        if isinstance(found, zipfmt.DirectorySpan):
            break
        assert found.start < start, "parser must ask for earlier bytes"
        start = found.start
        asks += 1
        assert asks < 4
    return found, zipfmt.parse_central_directory(data[found.offset : found.end], found)


def content_of(data: bytes, entry: zipfmt.ZipEntry) -> bytes:
    offset = zipfmt.data_offset(entry, data[entry.header_offset : entry.region_end])
    decoder = zipfmt.EntryDecoder(entry)
    out = b"".join(bytes(piece) for piece in decoder.feed(data[offset : offset + entry.compressed_size]))
    decoder.finish()
    return out


class Unseekable(io.RawIOBase):
    """A write-only stream: zipfile then sets flag bit 3 and writes data descriptors."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:
        self.buffer += data
        return len(data)


def build_zip(
    files: dict[str, bytes],
    *,
    method: int = zipfile.ZIP_STORED,
    comment: bytes = b"",
    force_zip64: bool = False,
    streamed: bool = False,
) -> bytes:
    target = Unseekable() if streamed else io.BytesIO()
    with zipfile.ZipFile(target, "w", compression=method) as archive:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = method
            with archive.open(info, "w", force_zip64=force_zip64) as handle:
                handle.write(content)
        archive.comment = comment
    return bytes(target.buffer if streamed else target.getvalue())


def write_pt2(
    path,
    tensors: dict[str, tuple[int, list[int], bytes]],
    root: str = "synthetic",
    tied: dict[str, str] | None = None,
) -> None:
    """A minimal PT2 archive (what torch writes, minus the graph) with raw float payloads.

    tensors: name → (serialized dtype, sizes, payload bytes); each gets its own payload,
    row-major strides, offset 0. tied: name → a name of `tensors` whose payload it views too (as
    torch writes a tied weight: two names, one payload).
    """
    config = {}
    payloads = {}
    for index, (name, (dtype, sizes, payload)) in enumerate(tensors.items()):
        strides, step = [], 1
        for size in reversed(sizes):
            strides.insert(0, step)
            step *= size
        config[name] = {
            "path_name": f"weight_{index}", "is_param": True, "use_pickle": False,
            "tensor_meta": {"dtype": dtype, "sizes": [{"as_int": s} for s in sizes], "requires_grad": False,
                            "device": {"type": "cpu", "index": None},
                            "strides": [{"as_int": s} for s in strides], "storage_offset": {"as_int": 0},
                            "layout": 7},
        }  # fmt: skip
        payloads[f"{root}/data/weights/weight_{index}"] = payload
    for alias, name in (tied or {}).items():
        config[alias] = config[name]
    write_pt2_config(path, root, config, payloads)


def write_pt2_config(path, root: str, config: dict, payloads: dict[str, bytes]) -> None:
    """A PT2 archive of one model `model` whose weights config is `config` (FQN -> PayloadMeta) and
    whose payload entries are `payloads` (entry name -> bytes); no constants, an empty graph."""
    import json

    files = {
        f"{root}/archive_format": b"pt2",
        f"{root}/archive_version": b"0",
        f"{root}/byteorder": b"little",
        **payloads,
        f"{root}/data/weights/model_weights_config.json": json.dumps({"config": config}).encode(),
        f"{root}/data/constants/model_constants_config.json": b'{"config": {}}',
        f"{root}/models/model.json": b"{}",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
