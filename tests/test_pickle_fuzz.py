"""Property-based fuzzing of the pickle reader, bounded for CI (derandomized, no shrinking).

For any bytes, and for mutations of torch's own data.pkl, `load_torch_pickle` and
`build_checkpoint_index` return or raise a ReaderError, within the memory cap fuzz/ uses.
Opcode streams are generated from the whole opcode table (arguments included) so that
every handler, refusal and limit is reached, not only the ones random bytes hit.
"""

from __future__ import annotations

import contextlib
import io
import pickletools
import struct
import zipfile
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import reader
from fuzz import bases, bounds
from reader.pickle import Limits, load_torch_pickle
from reader.pt2.checkpoint import build_checkpoint_index, plan_checkpoint
from reader.zipfmt import ZipEntry
from testing.paths import CONTAINER_VERSIONS as VERSIONS
from testing.paths import CONTAINERS

pytestmark = pytest.mark.unit

BOUNDED = settings(
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=2),
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SMALL = Limits(max_opcodes=100_000, max_stack=10_000, max_memo=10_000, max_walk=100_000)
CHECKPOINT = (CONTAINERS / VERSIONS[-1] / "checkpoint.pt").read_bytes()


def _checkpoint_parts() -> tuple[dict[str, ZipEntry], str, bytes]:
    """The real checkpoint's entries (as the reader parses them) and its data.pkl."""
    _found, entries = bases.directory_of(CHECKPOINT)
    by_name = {entry.name: entry for entry in entries}
    with zipfile.ZipFile(io.BytesIO(CHECKPOINT)) as zf:
        pickle_name = next(name for name in zf.namelist() if name.endswith("/data.pkl"))
        return by_name, entries[0].name, zf.read(pickle_name)


ENTRIES, FIRST, DATA_PKL = _checkpoint_parts()
PLAN = plan_checkpoint(ENTRIES, FIRST)


def _index(pkl: bytes) -> None:
    with contextlib.suppress(reader.ReaderError):
        build_checkpoint_index(PLAN, ENTRIES, {PLAN.pickle: pkl, PLAN.byteorder: b"little"}, SMALL)


@settings(BOUNDED, max_examples=300)
@given(data=st.binary(max_size=400))
def test_any_bytes(data: bytes) -> None:
    with bounds.memory_cap(), contextlib.suppress(reader.ReaderError):
        load_torch_pickle(data, "fuzz", SMALL)


@settings(BOUNDED, max_examples=300)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, 255), st.binary(max_size=9)),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_torch_pickle(edits: list[tuple[int, int, int, bytes]]) -> None:
    data = bytearray(DATA_PKL)
    for op, at, value, blob in edits:
        at %= len(data) or 1
        if op == 0:
            data[at] = value
        elif op == 1:
            data[at:at] = blob
        elif op == 2:
            del data[at : at + 1 + value % 8]
        else:
            data[at : at + len(blob)] = blob
    with bounds.memory_cap():
        _index(bytes(data))


_ARGUMENTS = {
    "uint1": st.integers(0, 255).map(lambda v: bytes([v])),
    "uint2": st.integers(0, 0xFFFF).map(lambda v: struct.pack("<H", v)),
    "int4": st.integers(-(2**31), 2**31 - 1).map(lambda v: struct.pack("<i", v)),
    "uint4": st.integers(0, 64).map(lambda v: struct.pack("<I", v)),
    "uint8": st.integers(0, 64).map(lambda v: struct.pack("<Q", v)),
    "float8": st.floats(allow_nan=False).map(lambda v: struct.pack(">d", v)),
    "long1": st.binary(max_size=9).map(lambda b: bytes([len(b)]) + b),
    "long4": st.binary(max_size=9).map(lambda b: struct.pack("<i", len(b)) + b),
}
_TEXT = st.sampled_from([b"0\n", b"1\n", b"00\n", b"-7\n", b"1.5\n", b"x\n", b"\n"])
_NAMES = st.sampled_from(
    [b"torch._utils\n_rebuild_tensor_v2\n", b"torch._utils\n_rebuild_parameter\n", b"torch\nFloatStorage\n",
     b"torch\nUntypedStorage\n", b"collections\nOrderedDict\n", b"torch\nSize\n", b"torch\nbfloat16\n",
     b"torch._utils\n_rebuild_tensor_v3\n", b"os\nsystem\n", b"builtins\neval\n"]
)  # fmt: skip


@st.composite
def _opcode(draw: st.DrawFn) -> bytes:
    op = draw(st.sampled_from(pickletools.opcodes))
    code = op.code.encode("latin-1")
    arg = op.arg
    if arg is None:
        return code
    if arg.name in _ARGUMENTS:
        return code + draw(_ARGUMENTS[arg.name])
    if arg.name == "stringnl_noescape_pair":
        return code + draw(_NAMES)
    if arg.n == -1:  # newline-terminated text
        return code + draw(_TEXT)
    # length-prefixed strings/bytes (pickletools' n: -2 one length byte, -3/-4 four, -5 eight)
    payload = draw(st.sampled_from([b"storage", b"0", b"cpu", b"", b"\xff"]))
    return code + len(payload).to_bytes({-2: 1, -3: 4, -4: 4, -5: 8}[arg.n], "little") + payload


@settings(BOUNDED, max_examples=400)
@given(ops=st.lists(_opcode(), max_size=60), protocol=st.integers(2, 5))
def test_generated_opcode_streams(ops: list[bytes], protocol: int) -> None:
    data = bytes([0x80, protocol]) + b"".join(ops) + b"."
    with bounds.memory_cap():
        _index(data)
