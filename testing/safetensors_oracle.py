"""safetensors' own `safe_open` as the oracle for `reader.safe_open`: a safetensors file of the same
weights, and the checks that both handles answer alike (keys, shapes, dtype strings, tensors, slices).

The file comes from the service's bundle writer (reader.formats.safetensors: what
`GET /archives/{id}/safetensors` and `pt2serve export` write) of the checkpoint's names (an exported
program's constants left out, as `safe_open` leaves them out), or from torch's state dict with
`safetensors.torch.save_file` where torch can load the container itself.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

import reader
from reader.formats import safetensors as safetensors_format
from reader.formats.selection import select


def write_bundle(
    location: str | os.PathLike[str], out: pathlib.Path, *, model: str | None = None
) -> pathlib.Path:
    """The service's safetensors bundle of one model of `location`, its checkpoint's names only (no
    program constants: `kind` "constant"), written to `out`."""

    async def write() -> None:
        async with reader.open_archive(location) as archive:
            chosen = select(archive, safetensors_format.writable, "safetensors", model=model)
            tensors = [
                archive.tensor(t.name, model=t.model, order="contiguous") for t in chosen.chosen if _kept(t)
            ]
            skipped = [t.name for t in chosen.skipped if _kept(t)]
            body = safetensors_format.safetensors_body(tensors, {"format": "pt"}, skipped)
            with open(out, "wb") as file:
                async for chunk in body.chunks(0, body.length, 1 << 20):
                    file.write(chunk)

    asyncio.run(write())
    return out


def _kept(info: reader.TensorInfo) -> bool:
    return info.kind != "constant"


def write_state_dict(state: Mapping[str, Any], out: pathlib.Path) -> pathlib.Path:
    """torch tensors as safetensors.torch writes them (each its own contiguous copy: tied names too)."""
    from safetensors.torch import save_file

    save_file({name: tensor.detach().contiguous().clone() for name, tensor in state.items()}, str(out))
    return out


def raw(tensor: Any) -> bytes:
    """A tensor's row-major bytes (bitwise: NaNs compare equal), torch or NumPy."""
    import numpy as np

    if isinstance(tensor, np.ndarray):
        return np.ascontiguousarray(tensor).tobytes()
    import torch

    if not tensor.numel():
        return b""
    flat = torch.empty(tensor.numel(), dtype=tensor.dtype).copy_(tensor.detach().reshape(-1))  # stride 1
    return flat.view(torch.uint8).numpy().tobytes()


def assert_same(ours: Any, theirs: Any, what: str) -> None:
    assert type(ours) is type(theirs), what
    assert tuple(ours.shape) == tuple(theirs.shape), what
    assert ours.dtype == theirs.dtype, what
    assert raw(ours) == raw(theirs), what


def indices_for(shape: list[int], negative: bool = True) -> list[object]:
    """Indices safetensors' slices take (ints, slices with positive steps, `...`), for `shape`;
    `negative=False` leaves out negative positions (safetensors' NumPy slices refuse them)."""
    if not shape:
        return [..., ()]
    found: list[object] = [slice(None), (...,), slice(1, None, 2), (..., slice(None, None, 2))]
    if shape[0]:
        found += [0, (shape[0] - 1, ...)]
    if len(shape) > 1:
        found += [(slice(None), slice(0, 1)), (slice(None, None, 3), slice(1, None))]
    if negative:
        found.append(slice(-2, None))
        if shape[0]:
            found.append(-1)
        if len(shape) > 1 and shape[-1]:
            found.append((..., -1))
    return found


def assert_same_handles(
    ours: Any, theirs: Any, names: Iterable[str] | None = None, *, negative: bool = True
) -> None:
    """`ours` (reader.safe_open) answers what `theirs` (safetensors.safe_open) answers: keys,
    shapes, dtype strings, every (or each of `names`) tensor and a set of slices of it
    (`negative=False` for safetensors' NumPy framework: no negative positions, no slices of empty
    tensors, which its slicing refuses)."""
    assert ours.keys() == theirs.keys()
    assert sorted(ours.offset_keys()) == ours.keys()
    for name in ours.keys() if names is None else names:
        a, b = ours.get_slice(name), theirs.get_slice(name)
        assert a.get_shape() == b.get_shape(), name
        assert a.get_dtype() == b.get_dtype(), name
        assert_same(ours.get_tensor(name), theirs.get_tensor(name), name)
        if not negative and 0 in b.get_shape():
            continue  # safetensors' NumPy slices of an empty tensor fail ("index 0 out of bounds")
        for index in indices_for(b.get_shape(), negative):
            assert_same(a[index], b[index], f"{name}[{index!r}]")


def _entry(size: int) -> st.SearchStrategy[object]:
    bound = st.none() | st.integers(-size - 2, size + 2)
    slices = st.builds(slice, bound, bound, st.none() | st.integers(1, 3))
    return slices | st.integers(-size, size - 1) if size else slices


def indices(shape: list[int]) -> st.SearchStrategy[object]:
    """Hypothesis: basic indices of `shape` that safetensors takes: ints (negative too), slices with
    positive steps and any bounds, and an optional `...` before or after them."""

    def placed(count: int, where: str) -> st.SearchStrategy[object]:
        dims = shape[len(shape) - count :] if where == "front" else shape[:count]
        entries = st.tuples(*[_entry(size) for size in dims])
        if where == "front":
            return entries.map(lambda found: (..., *found))
        if where == "back":
            return entries.map(lambda found: (*found, ...))
        return entries

    counts = st.integers(0, len(shape))
    return counts.flatmap(
        lambda count: st.sampled_from(["none", "front", "back"]).flatmap(lambda where: placed(count, where))
    )
