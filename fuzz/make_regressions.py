"""Write the minimized regression inputs in fuzz/regressions/ (each is a whole .pt2 archive).

    python3 fuzz/make_regressions.py

Every file reproduces one finding of the fuzzers, in the smallest form found; REGRESSIONS
below says what each one breaks. tests/test_fuzz_regressions.py replays them all.
"""

from __future__ import annotations

import pathlib
import sys
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fuzz import bases  # noqa: E402
from testing.zipbytes import build_zip  # noqa: E402

OUT = HERE / "regressions"


def _archive(meta: dict, payload: bytes = bytes(16), *, deflate: bool = False) -> bytes:
    files = bases.pt2_files({"config": {"w": meta}}, {"weight_0": payload})
    return build_zip(files, method=zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)


def _meta(sizes: list[int], strides: list[int], dtype: object = 7, offset: int = 0) -> dict:
    meta = bases._meta("weight_0", 7, sizes, strides, offset)
    meta["tensor_meta"]["dtype"] = dtype
    return meta


REGRESSIONS = {
    # TypeError at open: BY_SERIALIZED.get([]) hashes the dtype before checking its type
    "dtype_unhashable.pt2": lambda: _archive(_meta([4], [1], dtype=[])),
    # MemoryError in read: a zero-byte payload (means zeros) claiming 2**47 float32s, bytes(nbytes)
    "zero_payload_huge.pt2": lambda: _archive(_meta([1 << 47], [1]), payload=b""),
    # MemoryError in read: a stride-0 (broadcast) view of one 4-byte element claiming 2**47 elements
    "broadcast_huge.pt2": lambda: _archive(_meta([1 << 47], [0])),
    # ValueError in read(order="contiguous"): numpy cannot gather a view with more than 64 dims
    "ndim_over_64.pt2": lambda: _archive(_meta([1] * 70 + [2, 2], [1] * 70 + [1, 2])),
    # ValueError at open: formatting the "absurd nbytes" message hits int->str's 4300-digit limit
    "absurd_nbytes_message.pt2": lambda: _archive(_meta([2**63 - 1] * 300, [0] * 300), deflate=True),
    # hang at open: strided.dim_order is quadratic in the number of dims (20k dims: minutes of CPU)
    "many_dims_dim_order.pt2": lambda: _archive(
        _meta([1] * 20_000 + [2, 2], [1] * 20_000 + [1, 2]), deflate=True
    ),
    # ValueError in read_numpy: an empty tensor whose other dims overflow numpy's size arithmetic
    "read_numpy_empty_huge_dims.pt2": lambda: _archive(_meta([5, 2**63 - 1, 0], [1, 1, 1])),
}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, make in REGRESSIONS.items():
        data = make()
        (OUT / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
