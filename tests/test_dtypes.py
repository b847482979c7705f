"""The dtype table against torch 2.13 itself: every ScalarType, its name, size and c10 number."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from reader import ArchiveFormatError, UnsupportedPayload
from reader.pt2.dtypes import BY_SERIALIZED, dtype_from_serialized, dtype_of, to_numpy
from testing.torch_oracle import needs_torch

pytestmark = pytest.mark.unit


@needs_torch
def test_table_covers_every_scalar_type_torch_serializes() -> None:
    import torch
    from torch._export.serde.schema import ScalarType
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    header = pathlib.Path(torch.__file__).parent / "include/torch/headeronly/core/ScalarType.h"
    c10_numbers = {
        name: int(number)
        for name, number in re.findall(r"_\([^,]+, (\w+)\) /\* (\d+) \*/", header.read_text())
    }
    serialized = {member.value for member in ScalarType if member != ScalarType.UNKNOWN}
    assert set(BY_SERIALIZED) == serialized
    for value, dtype in BY_SERIALIZED.items():
        torch_dtype = _SERIALIZE_TO_TORCH_DTYPE[ScalarType(value)]
        assert dtype.name == str(torch_dtype).removeprefix("torch.")
        assert dtype.itemsize == torch.empty(0, dtype=torch_dtype).element_size()
        c10_name = torch._export.serde.schema.SCALAR_TYPE_TO_C10[ScalarType(value)]
        assert dtype.executorch_scalar_type == c10_numbers[c10_name], dtype.name


@pytest.mark.parametrize("value", [0, 14, 36, -1, True, "7", None, 7.0])
def test_unknown_values_are_format_errors(value) -> None:
    with pytest.raises(ArchiveFormatError, match="unknown dtype"):
        dtype_from_serialized(value, "somewhere")


def test_complex32_widens_exactly() -> None:
    halves = np.array([1.5, -2.0, 0.25, 65504.0], dtype=np.float16)
    array = to_numpy(halves.tobytes(), BY_SERIALIZED[9], (2,))
    assert array.dtype == np.complex64
    assert list(array) == [1.5 - 2.0j, 0.25 + 65504.0j]


@needs_torch
def test_each_row_names_torchs_dtype_and_its_size() -> None:
    import torch
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    for serialized, dtype in BY_SERIALIZED.items():
        assert dtype.torch is _SERIALIZE_TO_TORCH_DTYPE[serialized]
        assert dtype_of(dtype.name) is dtype and dtype.torch.itemsize == dtype.itemsize
    assert dtype_of("float32").torch is torch.float32


@pytest.mark.parametrize("name", [None, "qint8", ""])
def test_a_dtype_with_no_byte_layout_is_unsupported(name) -> None:
    with pytest.raises(UnsupportedPayload, match="no raw byte layout"):
        dtype_of(name)


def test_the_table_is_the_only_dtype_lookup() -> None:
    """dtype name -> torch or numpy dtype goes through reader.pt2.dtypes, nowhere else."""
    root = pathlib.Path(__file__).resolve().parent.parent
    lookups = re.compile(r"getattr\(torch, |BY_NAME\[")
    found = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("reader", "app")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "dtypes.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if lookups.search(line)
    ]
    assert found == []
