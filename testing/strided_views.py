"""Tensor views of any strides and the indices taken of them: TensorInfo records built by hand, numpy's
answer for them, and a hypothesis strategy drawing both."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from reader.pt2 import strided
from reader.pt2.tensorinfo import StorageRef, TensorInfo


def tensor_info(sizes, strides, offset, storage_elements, itemsize=4, dtype="float32") -> TensorInfo:
    """The TensorInfo of a view (`sizes`, `strides`, `offset` in elements) of `storage_elements`."""
    numel = math.prod(sizes)
    dense = strided.is_dense(sizes, strides)
    order = strided.dim_order(sizes, strides) if dense else tuple(range(len(sizes)))
    storage = StorageRef(
        "root/data/weights/weight_0", offset * itemsize, storage_elements * itemsize, "stored", 0
    )
    return TensorInfo(
        "t", "model", "weight", dtype, tuple(sizes), tuple(strides), offset, order, dense, numel,
        itemsize, numel * itemsize, True, False, False, None, storage,
    )  # fmt: skip


def numpy_view(storage: np.ndarray, info: TensorInfo) -> np.ndarray:
    """NumPy's view of `storage` as `info` describes it: what a read of the view must give."""
    itemsize = storage.itemsize
    return np.lib.stride_tricks.as_strided(
        storage[info.storage_offset :], info.sizes, [s * itemsize for s in info.strides]
    )


def _index_entry(draw, size: int):
    kind = draw(st.sampled_from(["int", "slice", "slice", "none"]))
    if kind == "int":
        return draw(st.integers(-size - 1, size))
    if kind == "none":
        return None
    bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
    return slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2, 7])))


@st.composite
def views_and_indices(draw):
    """(sizes, strides, offset, index): a view, dense or with gaps, broadcasts and overlaps, and a basic
    index of it (ints, slices, None, an Ellipsis)."""
    ndim = draw(st.integers(0, 4))
    sizes = draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 8]), min_size=ndim, max_size=ndim))
    if draw(st.booleans()):  # dense, any dim order
        order = draw(st.permutations(range(ndim)))
        strides, step = [0] * ndim, 1
        for dim in reversed(order):
            strides[dim] = step
            step *= max(sizes[dim], 1)
    else:  # any view: gaps, broadcasts, overlaps, strides wide enough to leave gaps > GAP_BYTES
        strides = draw(
            st.lists(st.sampled_from([0, 1, 2, 3, 7, 40, 1100, 3000]), min_size=ndim, max_size=ndim)
        )
    offset = draw(st.integers(0, 5))
    count = draw(st.integers(0, ndim + 1))
    index = [_index_entry(draw, sizes[min(i, ndim - 1)] if ndim else 1) for i in range(count)]
    if draw(st.booleans()):
        index.insert(draw(st.integers(0, len(index))), Ellipsis)
    return sizes, strides, offset, tuple(index) if len(index) != 1 or draw(st.booleans()) else index[0]


def write_views_pt2(path, storages: dict[str, bytes], views: dict[str, tuple], *, dtype: int = 7) -> None:
    """A PT2 archive whose tensors are views of shared payloads: `storages` maps a payload name
    (`weight_N`) to its bytes; `views` maps a tensor name to (payload name, sizes, strides, offset), all
    in elements of `dtype` (serialized ScalarType; 7 is float32). The declared sizes may be anything
    the strides keep inside the payload: a stride-0 view of 64 bytes can declare a gibibyte."""
    from .zipbytes import write_pt2_config

    root = "views"

    def ints(values) -> list[dict[str, int]]:
        return [{"as_int": int(v)} for v in values]

    config = {
        name: {
            "path_name": payload,
            "is_param": True,
            "use_pickle": False,
            "tensor_meta": {
                "dtype": dtype,
                "sizes": ints(sizes),
                "requires_grad": False,
                "device": {"type": "cpu", "index": None},
                "strides": ints(strides),
                "storage_offset": {"as_int": int(offset)},
                "layout": 7,
            },
        }
        for name, (payload, sizes, strides, offset) in views.items()
    }
    payloads = {f"{root}/data/weights/{name}": data for name, data in storages.items()}
    write_pt2_config(path, root, config, payloads)
