"""PT2 archives laid out as torch's writer aligns them (64-byte data), with chosen entries shifted, and
the block of an array a rank of a row-sharded load gets."""

from __future__ import annotations

import json
import pathlib
import zipfile

import numpy as np

ROOT = "aligned"


FB = 0x4246  # the extra field id torch's writer pads with ("FB")


def rank_block(array: np.ndarray, rank: int, world: int, dim: int) -> np.ndarray:
    """The block of `array` along `dim` that rank `rank` of `world` gets: blocks of ceil(n / world)
    elements, as torch.chunk cuts."""
    step = -(-array.shape[dim] // world)
    index = [slice(None)] * array.ndim
    index[dim] = slice(min(rank * step, array.shape[dim]), min((rank + 1) * step, array.shape[dim]))
    return array[tuple(index)]


def write_aligned_pt2(
    path: pathlib.Path, arrays: dict[str, np.ndarray], shifted: set[int] = frozenset(), shift: int = 64
) -> None:
    """A float32 PT2 archive laid out as torch writes it: every entry's local extra field pads its data
    to a multiple of 64; payload `weight_N` for N in `shifted` gets `shift` bytes more padding (its
    data starts `shift` bytes after where the writer's rule puts it)."""
    config, payloads = {}, {}
    for index, (name, array) in enumerate(arrays.items()):
        strides = [int(stride // 4) for stride in array.strides]
        config[name] = {
            "path_name": f"weight_{index}", "is_param": True, "use_pickle": False,
            "tensor_meta": {"dtype": 7, "sizes": [{"as_int": s} for s in array.shape], "requires_grad": False,
                            "device": {"type": "cpu", "index": None},
                            "strides": [{"as_int": s} for s in strides], "storage_offset": {"as_int": 0},
                            "layout": 7},
        }  # fmt: skip
        payloads[f"{ROOT}/data/weights/weight_{index}"] = (array.tobytes(), index in shifted)
    files = {
        f"{ROOT}/archive_format": (b"pt2", False),
        f"{ROOT}/archive_version": (b"0", False),
        f"{ROOT}/byteorder": (b"little", False),
        f"{ROOT}/data/weights/model_weights_config.json": (json.dumps({"config": config}).encode(), False),
        f"{ROOT}/data/constants/model_constants_config.json": (b'{"config": {}}', False),
        **payloads,
        f"{ROOT}/models/model.json": (b"{}", False),
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, (data, moved) in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            least = archive.fp.tell() + 30 + len(name.encode()) + 4
            padding = (-least) % 64 + (shift if moved else 0)
            info.extra = FB.to_bytes(2, "little") + padding.to_bytes(2, "little") + bytes(padding)
            archive.writestr(info, data)
