"""What fuzzing exercises: open an archive from bytes and read every tensor every way, bounded in time."""

from __future__ import annotations

import asyncio
from typing import Any

import reader
from reader.sources import BytesSource

TIME_BOUND = 5.0  # seconds per input for asyncio.wait_for
STREAM_CAP = 4 << 20  # stream at most this many bytes of one tensor (zero payloads may claim more)
STREAM_CHUNK = 4099  # odd on purpose: chunks straddle element and header boundaries
ORDERS = ("default", "contiguous")


class ContractViolation(AssertionError):
    """The reader broke the fuzzing contract in a way that is not an exception of its own."""


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
                names = [info.name for info in ar.tensors(model=model)]
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
        tensor = ar.tensor(info.name, model=info.model, order=order)
        chunks = [bytes(c) async for c in tensor.chunks(end=end, chunk_size=STREAM_CHUNK)]
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
