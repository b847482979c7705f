"""Hostile torch.save checkpoints, written opcode by opcode, and benign ones of the same size.

Each hostile pickle makes a parser that hashes, rescans or recurses over what the pickle chooses do
work that grows faster than the pickle: int keys that all hash alike (Python reduces an int's hash
modulo the Mersenne prime 2**61 - 1, so k * (2**61 - 1) all collide), memo indices that collide,
a long list shared by many REDUCE calls, a long string (or device name) shared by many list items,
nesting a million deep. Its benign twin has the same length and the same opcodes where it can,
without the trick, so a test can compare their parse times (a ratio, never a wall-clock bound).
"""

from __future__ import annotations

import pathlib
import zipfile

from testing.zipbytes import build_zip

MERSENNE = (1 << 61) - 1  # CPython's int hash modulus
PROTO = b"\x80\x02"
ORDERED_DICT = b"ccollections\nOrderedDict\n"


def checkpoint(pickle: bytes, root: str = "archive") -> bytes:
    """A torch.save ZIP (as `pytorch_model.bin` is) holding `pickle` as its data.pkl."""
    return build_zip({f"{root}/data.pkl": pickle, f"{root}/byteorder": b"little", f"{root}/version": b"3\n"})


def _long1(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _short_text(text: str) -> bytes:
    raw = text.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def ordered_dict_of_keys(keys: list[bytes]) -> bytes:
    """collections.OrderedDict([(key, None), ...]): torch.save's own spelling of a state dict."""
    pairs = b"".join(key + b"N\x86" for key in keys)  # key, None, TUPLE2
    return PROTO + ORDERED_DICT + b"](" + pairs + b"e\x85R."  # list, MARK, pairs, APPENDS, TUPLE1, REDUCE


def colliding_int_keys(count: int) -> tuple[bytes, bytes]:
    """(hostile, benign): an OrderedDict whose int keys all hash alike, and one with str keys of the
    same encoded lengths. count=39,000 gives the 547 KB `pytorch_model.bin` of issue 53."""
    hostile = [_long1(index * MERSENNE) for index in range(1, count + 1)]
    benign = [_short_text(f"{index:0{len(key) - 2}d}") for index, key in enumerate(hostile, 1)]
    return ordered_dict_of_keys(hostile), ordered_dict_of_keys(benign)


def colliding_memo_indices(count: int) -> tuple[bytes, bytes]:
    """(hostile, benign): one value PUT under `count` memo indices that all hash alike, and under
    as many small indices spelled with as many digits."""
    hostile = [str(index * MERSENNE).encode() for index in range(1, count + 1)]
    benign = [str(index).zfill(len(text)).encode() for index, text in enumerate(hostile, 1)]

    def puts(indices: list[bytes]) -> bytes:
        return PROTO + b"N" + b"".join(b"p" + text + b"\n" for text in indices) + b"."  # None, PUT ...

    return puts(hostile), puts(benign)


def shared_reduce_arguments(pairs: int, calls: int) -> tuple[bytes, bytes]:
    """(hostile, benign): one list of `pairs` pairs in the memo, then `calls` OrderedDicts built from
    it (each REDUCE looks at every pair again), and the same list wrapped in as many tuples."""
    items = b"".join(_short_text(f"k{index}") + b"N\x86" for index in range(pairs))
    head = PROTO + ORDERED_DICT + b"q\x01" + b"]q\x00(" + items + b"e" + b"00"  # both memoized, popped
    hostile = head + b"h\x01h\x00\x85R0" * calls + b"N."  # GET, GET, TUPLE1, REDUCE, POP
    benign = head + b"h\x01h\x00\x8500" * calls + b"N."  # GET, GET, TUPLE1, POP, POP
    return hostile, benign


def shared_long_string(length: int, copies: int) -> tuple[bytes, bytes]:
    """(hostile, benign): a list of `copies` references to one `length`-character string, and to a
    one-character string (the long one still in the pickle, unreferenced)."""
    text = b"X" + len(b"x" * length).to_bytes(4, "little") + b"x" * length  # BINUNICODE
    refs = b"](" + b"h\x00" * copies + b"e"  # list, MARK, GET 0 ..., APPENDS
    hostile = PROTO + text + b"q\x00" + refs + b"\x86."  # (string, list)
    benign = PROTO + text + b"0" + _short_text("x") + b"q\x00" + refs + b"\x86."
    return hostile, benign


def shared_long_device(length: int, copies: int) -> tuple[bytes, bytes]:
    """(hostile, benign): a list of `copies` references to one torch.device named by a `length`-character
    string, and to one named "cpu" (the long string still in the pickle, unreferenced)."""
    text = b"X" + length.to_bytes(4, "little") + b"x" * length  # BINUNICODE
    device = b"ctorch\ndevice\n"
    refs = b"](" + b"h\x00" * copies + b"e"
    hostile = PROTO + device + text + b"\x85Rq\x00" + refs + b"\x86."  # (device, [device, ...])
    benign = PROTO + text + b"0" + device + _short_text("cpu") + b"\x85Rq\x00" + refs + b"\x86."
    return hostile, benign


def nested_tuples(depth: int) -> bytes:
    """None inside `depth` one-item tuples: one byte a level."""
    return PROTO + b"N" + b"\x85" * depth + b"."


def nested_dicts(depth: int) -> bytes:
    """{"a": {"a": ... {"a": None}}}, `depth` dicts deep, built inside out (SETITEM on a fresh dict)."""
    body = b"N"
    for _ in range(depth):
        body = b"}" + _short_text("a") + body + b"s"
    return PROTO + body + b"."


def many_items(thousands: int) -> bytes:
    """A legitimately slow checkpoint: a list of `thousands` * 1000 small ints (each listed, then
    taken back), appended a thousand at a time."""
    return PROTO + b"]" + (b"(" + b"K\x01" * 1000 + b"e") * thousands + b"."


def with_entry_replaced(archive: pathlib.Path, suffix: str, content: bytes) -> bytes:
    """The ZIP `archive` rewritten with the entry whose name ends in `suffix` holding `content`
    (every entry stored)."""
    with zipfile.ZipFile(archive) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    (name,) = [name for name in files if name.endswith(suffix)]
    files[name] = content
    return build_zip(files)
