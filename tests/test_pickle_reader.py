"""The non-executing pickle reader: plain data round trips, torch's globals, refusals, limits.

Malicious payloads are real pickles of the kinds fickling/picklescan flag (os.system through
REDUCE, builtins.eval/exec, INST/OBJ/NEWOBJ, globals nested in torch-looking arguments); each
would create a marker file if anything ran, and each test asserts the file never appears.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader import ArchiveFormatError, ReaderError, UnsupportedPayload
from reader.pickle import (
    TORCH_GLOBALS,
    ForbiddenCall,
    ForbiddenGlobal,
    ForbiddenOpcode,
    Limits,
    MalformedPickle,
    PickleLimitExceeded,
    TensorRecord,
    load,
    load_torch_pickle,
)

pytestmark = pytest.mark.unit

# -- plain data ----------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20)
scalars |= st.floats(allow_nan=False)
keys = st.text(max_size=8) | st.integers(-(2**40), 2**40)
plain = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, derandomize=True, database=None)
@given(value=plain, protocol=st.integers(0, 5))
def test_plain_data_round_trips(value: object, protocol: int) -> None:
    assert load(pickle.dumps(value, protocol=protocol), {}) == value


@pytest.mark.parametrize("protocol", [4, 5])
def test_bytes_and_sets_round_trip(protocol: int) -> None:
    value: dict = {"b": b"\x00\xff", "s": {1, "a"}, "f": frozenset({2})}
    if protocol == 5:
        value["ba"] = bytearray(b"xy")  # BYTEARRAY8 (protocol 4 pickles it with a global)
    assert load(pickle.dumps(value, protocol=protocol), {}) == value


def test_memo_keeps_shared_references() -> None:
    inner = [1, 2]
    value = load(pickle.dumps({"a": inner, "b": inner}, protocol=2), {})
    assert value["a"] is value["b"]


# -- malicious payloads: refused by name, and nothing runs ---------------------------


class _Reduce:
    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _marker_payloads(marker: str) -> dict[str, tuple[bytes, type, str]]:
    """name → (pickle, expected error, text the message must contain)."""
    touch = f"touch {marker}"
    code = f"open({marker!r}, 'w').close()"
    quoted = touch.encode()
    return {
        "os.system via REDUCE": (
            pickle.dumps(_Reduce(os.system, touch), protocol=2), ForbiddenGlobal, "system"
        ),
        "builtins.eval": (pickle.dumps(_Reduce(eval, code), protocol=2), ForbiddenGlobal, "eval"),
        "builtins.exec via STACK_GLOBAL": (
            pickle.dumps(_Reduce(exec, code), protocol=4), ForbiddenGlobal, "builtins.exec"
        ),
        "os.system inside a tensor's arguments": (
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(cos\nsystem\n(V" + quoted + b"\ntRtR.",
            ForbiddenGlobal, "os.system",
        ),
        "INST": (b"(V" + quoted + b"\nios\nsystem\n.", ForbiddenOpcode, "INST"),
        "OBJ on an allowed class": (b"(ccollections\nOrderedDict\no.", ForbiddenOpcode, "OBJ"),
        "NEWOBJ": (b"\x80\x02ccollections\nOrderedDict\n)\x81.", ForbiddenOpcode, "NEWOBJ"),
        "NEWOBJ_EX": (b"\x80\x04ccollections\nOrderedDict\n)}\x92.", ForbiddenOpcode, "NEWOBJ_EX"),
        "EXT1": (b"\x80\x02\x82\x01.", ForbiddenOpcode, "EXT1"),
        "REDUCE on a storage class": (b"\x80\x02ctorch\nFloatStorage\n)R.", ForbiddenCall, "StorageType"),
        "REDUCE on a string": (b"\x80\x02V" + quoted + b"\n)R.", ForbiddenCall, "str"),
        "BUILD on a list": (b"\x80\x02]}b.", ForbiddenCall, "BUILD"),
        "torch.load by name": (b"\x80\x02ctorch\nload\n.", ForbiddenGlobal, "torch.load"),
        "getattr chain": (b"\x80\x02cbuiltins\ngetattr\n.", ForbiddenGlobal, "builtins.getattr"),
        "subprocess.Popen": (
            pickle.dumps(_Reduce(__import__("subprocess").Popen, ["touch", marker]), protocol=2),
            ForbiddenGlobal, "Popen",
        ),
        "python 2 STRING opcode": (b"S'x'\n.", ForbiddenOpcode, "STRING"),
    }  # fmt: skip


@pytest.mark.parametrize("case", sorted(_marker_payloads("m")))
def test_malicious_payloads_are_refused_and_nothing_runs(case: str, tmp_path) -> None:
    marker = tmp_path / "pwned"
    data, error, text = _marker_payloads(str(marker))[case]
    with pytest.raises(error) as caught:
        load_torch_pickle(data, "evil.pkl")
    assert text in str(caught.value)
    assert isinstance(caught.value, ReaderError)
    assert not marker.exists()
    # the same bytes, handed to the real unpickler, would have run (for the REDUCE cases)
    if case in ("os.system via REDUCE", "builtins.eval"):
        pickle.loads(data)
        assert marker.exists()


def test_refusals_are_typed_reader_errors() -> None:
    assert issubclass(ForbiddenGlobal, UnsupportedPayload)
    assert issubclass(ForbiddenOpcode, UnsupportedPayload)
    assert issubclass(MalformedPickle, ArchiveFormatError)
    assert issubclass(PickleLimitExceeded, ArchiveFormatError)


# -- torch's globals -----------------------------------------------------------------


def test_rebuild_tensor_and_parameter() -> None:
    data = (
        b"\x80\x02ctorch._utils\n_rebuild_parameter\nctorch._utils\n_rebuild_tensor_v2\n"
        b"((X\x07\x00\x00\x00storagectorch\nHalfStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x0ctQ"
        b"K\x02K\x02K\x03\x86K\x03K\x01\x86\x89ccollections\nOrderedDict\n)RtR\x88ccollections\nOrderedDict\n)R\x87R."
    )
    record = load_torch_pickle(data, "t")
    assert type(record) is TensorRecord
    assert (record.dtype, record.storage.key, record.storage.numel) == ("float16", "0", 12)
    assert (record.storage_offset, record.sizes, record.strides) == (2, (2, 3), (3, 1))
    assert record.is_param and record.requires_grad


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(K\x01K\x00))\x89NtR.", "storage"),
        (b"\x80\x02(Vnot-storage\nctorch\nFloatStorage\nV0\nVcpu\nK\x01tQ.", "persistent id"),
        (b"\x80\x02(Vstorage\nctorch\nFloatStorage\nV0\nVcpu\nJ\xff\xff\xff\xfftQ.", "storage size"),
        (b"\x80\x02ctorch\nSize\nV1\n\x85\x85R.", "tuple of ints"),
    ],
)
def test_malformed_torch_arguments(data: bytes, text: str) -> None:
    with pytest.raises(MalformedPickle, match=text):
        load_torch_pickle(data, "t")


def test_persistent_ids_are_refused_without_a_loader() -> None:
    with pytest.raises(ForbiddenOpcode, match="persistent id"):
        load(b"\x80\x02K\x01Q.", {})


# -- limits and malformed input ------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "limits", "error"),
    [
        (b"\x80\x02X\xff\xff\xff\x7f", Limits(), MalformedPickle),  # 2 GiB string claim, 6 bytes in hand
        (b"\x80\x02\x8d" + struct.pack("<Q", 1 << 62), Limits(), PickleLimitExceeded),
        (b"\x80\x02" + b"(" * 2000 + b".", Limits(), PickleLimitExceeded),
        (b"\x80\x02" + b"N" * 100 + b".", Limits(max_stack=50), PickleLimitExceeded),
        (b"\x80\x02" + b"N0" * 100 + b"N.", Limits(max_opcodes=50), PickleLimitExceeded),
        (b"\x80\x02N" + b"\x94" * 100 + b".", Limits(max_memo=10), PickleLimitExceeded),
        (b"\x80\x02\x8b\x00\x00\x00\x10" + b"\x01" * 64, Limits(), PickleLimitExceeded),
        (b"\x80\x02I" + b"9" * 5000 + b"\n.", Limits(), MalformedPickle),
        (b"\x80\x02h\x05.", Limits(), MalformedPickle),  # memo key never stored
        (b"\x80\x02]K\x01K\x02s.", Limits(), ForbiddenCall),  # SETITEM on a list
        (b"\x80\x02}]]s.", Limits(), MalformedPickle),  # a list as a dict key
        (b"\x80\x02}G\x3f\xf0\x00\x00\x00\x00\x00\x00Ns.", Limits(), MalformedPickle),  # float key
        (b"\x80\x02N", Limits(), MalformedPickle),  # no STOP
        (b"\x80\x02NN.", Limits(), MalformedPickle),  # values left over
        (b"\x80\x09N.", Limits(), MalformedPickle),  # protocol 9
        (b"\xffN.", Limits(), MalformedPickle),  # unknown opcode
        (b".", Limits(), MalformedPickle),  # empty stack
        (b"\x80\x02N.", Limits(max_input_bytes=3), PickleLimitExceeded),
    ],
)
def test_hostile_input_is_bounded(data: bytes, limits: Limits, error: type) -> None:
    with pytest.raises(error):
        load(data, TORCH_GLOBALS, limits=limits)


def test_colliding_int_keys_are_refused() -> None:
    """ints at multiples of 2**61-1 all hash to 0: refused as keys, so dicts stay linear."""
    colliding = (1 << 61) - 1
    with pytest.raises(MalformedPickle, match="dict key"):
        load(pickle.dumps({colliding * k: 0 for k in range(1, 4)}, protocol=2), {})


def test_deeply_nested_tuples_as_keys_are_refused() -> None:
    data = b"\x80\x02}N" + b"\x85" * 50_000 + b"Ns."
    with pytest.raises(MalformedPickle):
        load(data, {})


def test_opcode_names_come_from_pickletools() -> None:
    """Refusals name opcodes by pickletools' names; every name the tests use exists there."""
    names = {op.name for op in pickletools.opcodes}
    assert {"INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "STRING"} <= names
