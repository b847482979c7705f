"""The .ptd writer against ExecuTorch: its reader, the .ptd it writes itself, and torch's bytes (ExecuTorch
runs in a subprocess). The checks of our own .ptd alone are in test_ptd_format_rules.py."""

from __future__ import annotations

import math
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reader
from reader.formats.body import BytesBody, read_body
from reader.formats.ptd import HEADER, plan_ptd, ptd_body
from reader.pt2.dtypes import BY_NAME
from reader.pt2.tensorinfo import StorageRef, TensorInfo
from testing.checks import run
from testing.executorch_oracle import executorch_ptd, needs_executorch, read_ptd, torch_bytes
from testing.paths import ARCHIVES, SHARED_LINEAR
from testing.ptd_files import ptd_bytes

pytestmark = pytest.mark.emulator


ARCHIVE_PATHS = sorted(ARCHIVES.glob("*.pt2"))


def models_of(path: pathlib.Path) -> list[str]:
    async def models() -> list[str]:
        async with reader.open_archive(path) as ar:
            return ar.models

    return run(models())


def oracle_cases() -> list:
    cases = [pytest.param(p, id=p.stem) for p in ARCHIVE_PATHS]
    cases.append(pytest.param(SHARED_LINEAR, id="shared-linear"))
    return cases


@needs_executorch
@pytest.mark.parametrize("path", oracle_cases())
def test_ptd_matches_executorch_and_torch(path: pathlib.Path) -> None:
    if not path.exists():
        pytest.skip(f"../shared is absent ({path} not found)")
    if path.stem == "legacy":
        with pytest.raises(reader.UnsupportedPayload, match="legacy"):
            models_of(path)  # a legacy archive is refused as a whole, never half-written
        return
    from testing.fixtures.oracle import load_with_torch

    models = models_of(path)
    torch_values, _ = load_with_torch(path, sorted(models))
    for model in models:
        blob, skipped = run(ptd_bytes(path, model))
        ours = read_ptd(blob)
        values = {**torch_values[model]["weight"], **torch_values[model]["constant"]}
        # every tensor torch loads is a key with torch's bytes, or was refused with a reason
        written = {name for name, value in values.items() if hasattr(value, "untyped_storage")}
        assert set(ours) == written - {t.name for t in skipped}
        for key, entry in ours.items():
            assert entry.data == torch_bytes(values[key]), key
            assert entry.sizes == tuple(values[key].shape), key
        for info in skipped:  # only what ExecuTorch cannot hold is left out
            assert info.unsupported or info.dtype in {
                "complex32",
                "complex64",
                "complex128",
                "float8_e8m0fnu",
            }

        try:
            their_file = executorch_ptd(path, model)
            theirs = read_ptd(their_file) if their_file is not None else {}
        except Exception as exc:  # ExecuTorch cannot export every archive (exotic dtypes)
            if path.stem in {"dtypes", "pickled"}:
                continue
            raise AssertionError(f"ExecuTorch failed on {path.name}: {exc}") from exc
        # ExecuTorch writes the names its program uses; we write every name (tied ones too)
        assert set(theirs) <= set(ours)
        for key, expected in theirs.items():
            assert ours[key] == expected, key


@needs_executorch
def test_ptd_dtypes_scalar_types() -> None:
    """Every ExecuTorch dtype gets ExecuTorch's scalar type (the dtypes archive: ExecuTorch exports none)."""
    import torch
    from executorch.exir.scalar_type import ScalarType

    blob, skipped = run(ptd_bytes(ARCHIVES / "dtypes.pt2", "model"))
    ours = read_ptd(blob)
    assert {t.name for t in skipped} == {"t_complex32", "t_complex64", "t_complex128", "t_float8_e8m0fnu"}
    for key, entry in ours.items():
        name = "float32" if key == "weight" else key.removeprefix("t_")
        torch_dtype = getattr(torch, name)
        assert ScalarType(entry.scalar_type).name.lower().replace("_", "") in _scalar_names(torch_dtype), key


def _scalar_names(torch_dtype) -> set[str]:
    import torch

    table = {
        torch.uint8: "byte", torch.int8: "char", torch.int16: "short", torch.int32: "int",
        torch.int64: "long", torch.float16: "half", torch.float32: "float", torch.float64: "double",
        torch.bool: "bool", torch.bfloat16: "bfloat16", torch.uint16: "uint16", torch.uint32: "uint32",
        torch.uint64: "uint64", torch.float8_e4m3fn: "float8e4m3fn", torch.float8_e5m2: "float8e5m2",
        torch.float8_e4m3fnuz: "float8e4m3fnuz", torch.float8_e5m2fnuz: "float8e5m2fnuz",
    }  # fmt: skip
    return {table[torch_dtype]}


@needs_executorch
@pytest.mark.parametrize("alignment", [8, 64, 4096])
def test_ptd_alignment(alignment: int) -> None:
    blob, _ = run(ptd_bytes(ARCHIVES / "layouts.pt2", "model", alignment))
    header = HEADER.unpack_from(blob, 8)
    segment_base = header[4]
    assert segment_base % alignment == 0
    assert len(blob) == segment_base + header[5]
    reference, _ = run(ptd_bytes(ARCHIVES / "layouts.pt2", "model"))
    assert read_ptd(blob) == read_ptd(reference)


def synthetic(index: int, name: str, dtype: str, sizes: tuple[int, ...]) -> TensorInfo:
    """A row-major tensor of its own payload, as the index would describe it."""
    kind = BY_NAME[dtype]
    strides = tuple(math.prod(sizes[i + 1 :]) for i in range(len(sizes)))
    numel = math.prod(sizes)
    storage = StorageRef(f"archive/data/weights/weight_{index}", 0, numel * kind.itemsize, "stored", 0)
    return TensorInfo(name, "model", "weight", dtype, sizes, strides, 0, tuple(range(len(sizes))), True,
                      numel, kind.itemsize, numel * kind.itemsize, True, False, False,
                      kind.executorch_scalar_type, storage)  # fmt: skip


@needs_executorch
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=40),
            st.sampled_from(["float32", "bfloat16", "int8", "bool", "int64", "float8_e5m2", "uint16"]),
            st.lists(st.integers(0, 5), max_size=5).map(tuple),
        ),
        max_size=12,
        unique_by=lambda t: t[0],
    ),
    st.sampled_from([8, 16, 128, 1024]),
)
def test_ptd_round_trips_through_executorch_for_any_keys(tensors, alignment) -> None:
    """Any names (unicode included), dtypes, ranks and alignments read back through ExecuTorch as written."""
    infos = [synthetic(i, name, dtype, sizes) for i, (name, dtype, sizes) in enumerate(tensors)]
    payloads = {
        info.name: bytes((i * 7 + j) % 251 for j in range(info.nbytes or 0)) for i, info in enumerate(infos)
    }
    plan = plan_ptd(infos, alignment)
    body = ptd_body(plan, lambda info, order: BytesBody(payloads[info.name]))
    blob = run(read_body(body, 0, body.length, 1000))
    assert len(blob) == plan.length
    back = read_ptd(blob)
    assert list(back) == [info.name for info in infos]
    for info in infos:
        entry = back[info.name]
        assert entry.scalar_type == info.executorch_scalar_type
        assert entry.sizes == info.sizes and entry.dim_order == tuple(range(len(info.sizes or ())))
        assert entry.data == payloads[info.name]
