"""Archive: look tensors up by name and read their bytes in either order."""

from __future__ import annotations

import difflib
import os
from collections.abc import AsyncIterator, Generator, Iterable
from contextlib import aclosing
from typing import Any

import numpy as np

from . import layout
from .dtypes import BY_NAME, to_numpy
from .entries import EntryReader
from .errors import ModelNotFound, TensorNotFound, UnsupportedPayload
from .opening import OpenedIndex, read_index
from .sources import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TAIL_SIZE,
    LOCAL_TAIL_SIZE,
    ByteSource,
    HttpOptions,
    LocalFileSource,
    S3Settings,
    open_source,
)
from .tensorinfo import TensorInfo
from .zipfmt import ZipEntry

ORDERS = ("default", "contiguous")
DEFAULT_MODEL = "model"
# read() and gathered streams build the whole output in memory. When that output is
# larger than the payload bytes behind it (a zero-byte payload, a stride-0 view), its
# size is only a claim, so it is capped; zero payloads can still be streamed.
MAX_UNBACKED_OUTPUT = 1 << 30


class Archive:
    """An opened .pt2 archive. Get one from `open_archive`."""

    def __init__(self, source: ByteSource, opened: OpenedIndex, reader: EntryReader) -> None:
        self.source = source
        self.root = opened.root
        self._entries = opened.entries
        self._index = opened.index
        self._reader = reader

    @property
    def location(self) -> str:
        return self.source.location

    @property
    def identity(self) -> str:
        """Changes whenever the archive's bytes may have changed (for ETags)."""
        return self.source.identity

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """Requests made and bytes read so far, by purpose ("open", "data")."""
        return self.source.stats.to_dict()

    @property
    def models(self) -> list[str]:
        return list(self._index)

    def tensors(self, model: str | None = None) -> list[TensorInfo]:
        """Every tensor of one model, or of every model when model is None."""
        models = self.models if model is None else [self.resolve_model(model)]
        return [info for name in models for info in self._index[name].values()]

    def layout(self, name: str, model: str | None = None) -> TensorInfo:
        tensors = self._index[self.resolve_model(model)]
        info = tensors.get(name)
        if info is None:
            close = difflib.get_close_matches(name, list(tensors), n=5, cutoff=0.6)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise TensorNotFound(f"no tensor {name!r} in model {self.resolve_model(model)!r}{hint}")
        return info

    async def read(self, name: str, model: str | None = None, order: str = "default") -> bytes:
        """The tensor's bytes: memory order ("default") or row-major ("contiguous")."""
        _, plan = self._plan(name, model, order)
        return await plan.read()

    async def read_many(
        self, names: Iterable[str], model: str | None = None, order: str = "default"
    ) -> dict[str, bytes]:
        """Several tensors' bytes, as `read` gives them; payloads that lie close together in the
        archive are fetched in one request (remotely: one round trip for a whole block)."""
        plans = {name: self._plan(name, model, order)[1] for name in names}
        for plan in plans.values():
            plan.check_materializable()
        fetching = [plan for plan in plans.values() if plan.needs_payload]
        spans = await self._reader.read_many([(plan.entry, *plan.span) for plan in fetching])
        found = dict(zip([id(plan) for plan in fetching], spans))
        return {name: plan.finish(found.get(id(plan), b"")) for name, plan in plans.items()}

    async def stream(
        self,
        name: str,
        model: str | None = None,
        order: str = "default",
        start: int = 0,
        end: int | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[bytes | memoryview]:
        """Bytes [start, end) of what `read` returns, in chunks, without holding the whole tensor
        when it is stored in the requested order."""
        info, plan = self._plan(name, model, order)
        total = info.nbytes or 0
        end = total if end is None else end
        if not 0 <= start <= end <= total:
            raise ValueError(f"range [{start}, {end}) is outside {name!r} ({total} bytes)")
        async with aclosing(plan.stream(start, end, chunk_size or self._reader.chunk_size)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def read_numpy(self, name: str, model: str | None = None) -> np.ndarray:
        """An ndarray with the logical shape (bfloat16/float8 via ml_dtypes; complex32 widened)."""
        info, plan = self._plan(name, model, "contiguous")
        return to_numpy(await plan.read(), BY_NAME[info.dtype], info.sizes)  # type: ignore[index,arg-type]

    async def revalidate(self) -> bool:
        """True if the archive is still the one indexed (a cheap conditional request remotely)."""
        return await self.source.revalidate()

    async def close(self) -> None:
        await self.source.close()

    async def __aenter__(self) -> Archive:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def resolve_model(self, model: str | None) -> str:
        """The model a call means: the named one, else the only one, else "model"."""
        if model is None:
            if len(self._index) == 1:
                return next(iter(self._index))
            if DEFAULT_MODEL in self._index:
                return DEFAULT_MODEL
            raise ModelNotFound(f"archive has models {self.models or '(none)'}; name one with model=...")
        if model not in self._index:
            close = difflib.get_close_matches(model, self.models, n=5, cutoff=0.5)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            raise ModelNotFound(f"no model {model!r} (models: {', '.join(self.models) or 'none'}){hint}")
        return model

    def _plan(self, name: str, model: str | None, order: str) -> tuple[TensorInfo, _ReadPlan]:
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
        info = self.layout(name, model)
        if info.unsupported:
            raise UnsupportedPayload(f"{info.model}/{info.name}: {info.unsupported}")
        return info, _ReadPlan(info, self._entries[info.storage.entry], self._reader, order)


class _ReadPlan:
    """How one tensor's output bytes come from its payload entry.

    direct: the output is exactly the view's storage span (dense in memory order,
    or row-major already) and can be streamed range by range; otherwise the span
    is read and gathered.
    """

    def __init__(self, info: TensorInfo, entry: ZipEntry, reader: EntryReader, order: str) -> None:
        sizes, strides = info.sizes, info.strides
        assert sizes is not None and strides is not None and info.storage_offset is not None
        self.info = info
        self.entry = entry
        self.reader = reader
        itemsize = info.itemsize or 0
        first, end = layout.element_extent(sizes, strides, info.storage_offset)
        self.span = (first * itemsize, end * itemsize)
        self.zeros = entry.size == 0
        self.direct = info.dense and (order == "default" or layout.is_row_major(sizes, strides))

    @property
    def needs_payload(self) -> bool:
        return bool(self.info.nbytes) and not self.zeros

    async def read(self) -> bytes:
        self.check_materializable()
        span = await self.reader.read(self.entry, *self.span) if self.needs_payload else b""
        return self.finish(span)

    def check_materializable(self) -> None:
        nbytes = self.info.nbytes or 0
        backed = 0 if self.zeros else self.span[1] - self.span[0]
        if nbytes > backed and nbytes > MAX_UNBACKED_OUTPUT:
            raise UnsupportedPayload(
                f"{self.info.model}/{self.info.name}: {nbytes} bytes from a {backed}-byte payload "
                f"would have to be built in memory (limit {MAX_UNBACKED_OUTPUT}); stream it instead"
            )

    def finish(self, span: bytes) -> bytes:
        """The output bytes from the bytes of the view's storage span."""
        if not self.needs_payload:
            return bytes(self.info.nbytes or 0)
        if self.direct:
            return span
        return layout.gather_row_major(
            span, self.info.itemsize or 1, self.info.sizes or (), self.info.strides or ()
        )

    async def stream(self, start: int, end: int, chunk_size: int) -> AsyncIterator[bytes | memoryview]:
        if start == end:
            return
        if self.zeros:
            for piece in _pieces(end - start, chunk_size):
                yield bytes(piece)
            return
        if self.direct:
            first = self.span[0]
            async with aclosing(
                self.reader.chunks(self.entry, first + start, first + end, chunk_size)
            ) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        data = memoryview(await self.read())
        position = start
        for piece in _pieces(end - start, chunk_size):
            yield data[position : position + piece]
            position += piece


def _pieces(total: int, chunk_size: int) -> Generator[int, None, None]:
    while total > 0:
        piece = min(total, chunk_size)
        yield piece
        total -= piece


class open_archive:  # noqa: N801 - used like a function: `async with open_archive(...)`
    """Open a .pt2 archive: `async with open_archive(path) as ar` or `ar = await open_archive(path)`.

    `location` is a path, an http(s):// URL, an s3://bucket/key URI or an open
    ByteSource. `tail_size` is how much of the end the first read takes (enough for
    typical central directories; by default 256 KiB remotely, 64 KiB for local
    files, where one more read is cheap); `chunk_size` is the default stream chunk;
    `http_options` tune remote reads (timeouts, retries, budgets); `s3_settings`
    override the AWS_* environment.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | ByteSource,
        *,
        tail_size: int | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        http_options: HttpOptions | None = None,
        s3_settings: S3Settings | None = None,
    ) -> None:
        self._location = location
        self._tail_size = tail_size
        self._chunk_size = chunk_size
        self._http_options = http_options
        self._s3_settings = s3_settings
        self._archive: Archive | None = None

    async def _open(self) -> Archive:
        location = self._location
        if isinstance(location, (str, os.PathLike)):
            source = await open_source(
                location,
                tail_size=DEFAULT_TAIL_SIZE if self._tail_size is None else self._tail_size,
                http_options=self._http_options,
                s3_settings=self._s3_settings,
            )
        else:
            source = location
        reader = EntryReader(source, self._chunk_size)
        tail_size = self._tail_size
        if tail_size is None:
            tail_size = LOCAL_TAIL_SIZE if isinstance(source, LocalFileSource) else DEFAULT_TAIL_SIZE
        try:
            opened = await read_index(source, reader, tail_size)
        except BaseException:
            await source.close()
            raise
        return Archive(source, opened, reader)

    def __await__(self) -> Generator[Any, None, Archive]:
        return self._open().__await__()

    async def __aenter__(self) -> Archive:
        self._archive = await self._open()
        return self._archive

    async def __aexit__(self, *exc_info: object) -> None:
        if self._archive is not None:
            await self._archive.close()
