"""A pickle opcode interpreter that builds plain data and never executes anything.

CPython's Unpickler resolves every GLOBAL with an import and calls whatever REDUCE
names; that is how a checkpoint runs code. This interpreter has neither: a GLOBAL
is looked up in a table the caller passes (module, name) → value, and only values
that are `Reducer`s may be called, by REDUCE, with plain data as arguments. Every
other global, and every opcode that instantiates arbitrary classes (INST, OBJ,
NEWOBJ, NEWOBJ_EX, EXT*), is refused with an error naming it.

Everything is bounded by `Limits`: input size, opcode count, stack, marks, memo,
string and integer sizes. Each opcode does O(1) work plus the items it consumes;
REDUCE, whose arguments may be shared values it does not consume, is charged their
items against a budget of the same size. So time is linear in the input, and a
`Deadline` is checked every few thousand opcodes besides.

Nothing the pickle chooses is hashed unless its hash cannot be made to collide: dict
keys, OrderedDict keys and set items are str or bytes (hashed with a per-process
secret), bool, None, or ints of magnitude below 2**61 - 1 (an int hashes to itself
below that Mersenne prime; larger ones are reduced modulo it, so k * (2**61 - 1) all
collide and would make each insertion scan every key before it). Memo indices are
bounded the same way (below 2**32, as LONG_BINPUT's are).
"""

from __future__ import annotations

import codecs
import pickletools
import struct
from collections.abc import Callable, Mapping
from typing import Any

from ..deadline import NO_DEADLINE, Deadline
from .errors import ForbiddenCall, ForbiddenGlobal, ForbiddenOpcode, MalformedPickle, PickleLimitExceeded
from .limits import DEFAULT_LIMITS, Limits

OPCODE_NAMES = {op.code.encode("latin-1"): op.name for op in pickletools.opcodes}
HIGHEST_PROTOCOL = 5
MAX_SAFE_INT_KEY = (1 << 61) - 2  # ints hash to themselves below the Mersenne modulus
MAX_MEMO_INDEX = (1 << 32) - 1  # LONG_BINPUT's largest; PUT's text index is held to it too
SAFE_KEYS = "str, bytes, bool, None, or an int below 2**61"  # what is_safe_key admits, for errors
CHECK_EVERY = 4096  # opcodes between two looks at the deadline

_DOUBLE = struct.Struct(">d")
_UINT4 = struct.Struct("<I")
_STOP = ord(".")


class Reducer:
    """A global that REDUCE may call: `build(args)` gets the argument tuple (plain data)."""

    __slots__ = ("build", "name")

    def __init__(self, name: str, build: Callable[[tuple], Any]) -> None:
        self.name = name
        self.build = build

    def __repr__(self) -> str:
        return f"<{self.name}>"


class OrderedDictValue(dict):
    """collections.OrderedDict as a plain dict (dicts keep order); `state` holds what
    BUILD set on it (torch's state dicts carry `_metadata` there)."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        super().__init__()
        self.state: dict | None = None


PersistentLoad = Callable[[Any], Any]


def is_safe_key(key: Any) -> bool:
    """May `key` be hashed into a dict or set: a type whose hashes a pickle cannot make collide."""
    kind = type(key)
    if kind is str or kind is bytes or kind is bool or key is None:
        return True
    return kind is int and -MAX_SAFE_INT_KEY <= key <= MAX_SAFE_INT_KEY


def _no_persistent_ids(pid: Any) -> Any:
    raise ForbiddenOpcode("the pickle uses a persistent id, but none are expected here")


def load(
    data: bytes | memoryview,
    globals_table: Mapping[tuple[str, str], Any],
    persistent_load: PersistentLoad = _no_persistent_ids,
    limits: Limits = DEFAULT_LIMITS,
    where: str = "pickle",
    deadline: Deadline = NO_DEADLINE,
) -> Any:
    """Interpret one pickle (up to STOP) into plain data; `where` names it in errors. Past
    `deadline` it stops with ParseTimeout (an ArchiveFormatError)."""
    if len(data) > limits.max_input_bytes:
        raise PickleLimitExceeded(
            f"{where}: {len(data)} bytes exceeds the {limits.max_input_bytes}-byte limit"
        )
    machine = _Machine(bytes(data), globals_table, persistent_load, limits, where, deadline)
    try:
        return machine.run()
    except (MalformedPickle, ForbiddenGlobal, ForbiddenOpcode, ForbiddenCall):
        raise
    except RecursionError as exc:  # hashing or comparing a deeply nested tuple
        raise PickleLimitExceeded(f"{where}: values nested too deeply at byte {machine.at}") from exc
    except (TypeError, ValueError, OverflowError, UnicodeError, struct.error, IndexError) as exc:
        raise MalformedPickle(f"{where}: bad pickle at byte {machine.at}: {exc}") from exc


class _Machine:
    """One pickle's interpreter: the stack, the marks, the memo, and one `op_*` method per opcode.

    Why one class of this size: a pickle is one state machine over one shared state (the input position,
    the stack, the metastack, the memo, the opcode and REDUCE budgets), and each allowed opcode is a few
    lines over that state. `run` dispatches a byte to its method through `_DISPATCH`, a table built from
    the `op_*` names, in one tight loop; splitting the opcodes by kind into classes would pass that state
    between objects on every opcode, or spread one invariant (every item the stack holds counted against
    `max_stack`; every key checked by `is_safe_key`) across them. The helpers each opcode uses (`take`,
    `push`, `pop_mark`, `memo_*`, `_key`) sit beside them so the bounds are checked in one place.
    """

    def __init__(
        self,
        data: bytes,
        globals_table: Mapping[tuple[str, str], Any],
        persistent_load: PersistentLoad,
        limits: Limits,
        where: str,
        deadline: Deadline,
    ) -> None:
        self.data = data
        self.deadline = deadline
        self.charged = 0  # items REDUCE's arguments held: at most the opcode budget, as opcodes are
        self.at = 0
        self.globals_table = globals_table
        self.persistent_load = persistent_load
        self.limits = limits
        self.where = where
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.depth = 0  # values held in metastack lists
        self.memo: dict[int, Any] = {}
        self.max_stack = limits.max_stack
        self.budget = 0  # opcodes this pickle may run (set by run)

    # -- errors and input ------------------------------------------------------------

    def fail(self, message: str) -> MalformedPickle:
        return MalformedPickle(f"{self.where}: {message} (byte {self.at})")

    def take(self, count: int) -> bytes:
        end = self.at + count
        if count < 0 or end > len(self.data):
            raise self.fail(f"needs {count} bytes but the pickle ends first")
        chunk = self.data[self.at : end]
        self.at = end
        return chunk

    def take_uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "little")

    def line(self) -> bytes:
        end = self.data.find(b"\n", self.at, self.at + self.limits.max_line_bytes + 1)
        if end < 0:
            raise self.fail(f"text argument longer than {self.limits.max_line_bytes} bytes or unterminated")
        text = self.data[self.at : end]
        self.at = end + 1
        return text

    def sized(self, size: int) -> bytes:
        if size > self.limits.max_string_bytes:
            raise PickleLimitExceeded(
                f"{self.where}: a {size}-byte string exceeds the {self.limits.max_string_bytes}-byte limit"
            )
        return self.take(size)

    # -- stack ---------------------------------------------------------------------

    def push(self, value: Any) -> None:
        stack = self.stack
        if len(stack) + self.depth >= self.max_stack:
            raise PickleLimitExceeded(f"{self.where}: more than {self.max_stack} values on the stack")
        stack.append(value)

    def pop(self) -> Any:
        if not self.stack:
            raise self.fail("stack underflow")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise self.fail("stack underflow")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise self.fail("no MARK to pop to")
        items = self.stack
        self.stack = self.metastack.pop()
        self.depth -= len(self.stack)
        return items

    def memo_index(self, text: bytes) -> int:
        index = int(self._digits(text))
        if not 0 <= index <= MAX_MEMO_INDEX:
            raise self.fail(f"memo index {index} is out of range")
        return index

    def memo_put(self, index: int, value: Any) -> None:
        if index not in self.memo and len(self.memo) >= self.limits.max_memo:
            raise PickleLimitExceeded(f"{self.where}: more than {self.limits.max_memo} memo entries")
        self.memo[index] = value

    def memo_get(self, index: int) -> Any:
        try:
            return self.memo[index]
        except KeyError:
            raise self.fail(f"memo key {index} was never stored") from None

    # -- the loop --------------------------------------------------------------------

    def run(self) -> Any:
        dispatch = _DISPATCH
        data = self.data
        size = len(data)
        budget = self.budget = min(self.limits.max_opcodes, size)  # every opcode takes at least one byte
        check = self.deadline.check
        for done in range(0, budget, CHECK_EVERY):
            check()
            for _ in range(min(CHECK_EVERY, budget - done)):
                at = self.at
                if at >= size:
                    raise self.fail("pickle ends without STOP")
                code = data[at]
                self.at = at + 1
                if code == _STOP:
                    value = self.pop()
                    if self.stack or self.metastack:
                        raise self.fail("STOP with values left on the stack")
                    return value
                handler = dispatch[code]
                if handler is None:
                    name = OPCODE_NAMES.get(bytes([code]))
                    if name is None:
                        raise self.fail(f"unknown opcode {bytes([code])!r}")
                    raise ForbiddenOpcode(f"{self.where}: opcode {name} at byte {at} is not allowed")
                handler(self)
        if self.at >= size:
            raise self.fail("pickle ends without STOP")
        raise PickleLimitExceeded(f"{self.where}: more than {self.limits.max_opcodes} opcodes")

    # -- opcodes -------------------------------------------------------------------

    def op_proto(self) -> None:
        version = self.take_uint(1)
        if version > HIGHEST_PROTOCOL:
            raise self.fail(f"unsupported pickle protocol {version}")

    def op_frame(self) -> None:
        self.take_uint(8)  # the whole pickle is in hand; frames are only a hint

    def op_mark(self) -> None:
        if len(self.metastack) >= self.limits.max_marks:
            raise PickleLimitExceeded(f"{self.where}: more than {self.limits.max_marks} nested MARKs")
        self.metastack.append(self.stack)
        self.depth += len(self.stack)
        self.stack = []

    def op_pop(self) -> None:
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def op_pop_mark(self) -> None:
        self.pop_mark()

    def op_dup(self) -> None:
        self.push(self.top())

    # numbers

    def op_none(self) -> None:
        self.push(None)

    def op_newtrue(self) -> None:
        self.push(True)

    def op_newfalse(self) -> None:
        self.push(False)

    def op_binint(self) -> None:
        self.push(int.from_bytes(self.take(4), "little", signed=True))

    def op_binint1(self) -> None:
        at = self.at
        self.push(self.data[at])  # IndexError past the end: malformed
        self.at = at + 1

    def op_binint2(self) -> None:
        self.push(self.take_uint(2))

    def op_long1(self) -> None:
        self.push(self._long(self.take_uint(1)))

    def op_long4(self) -> None:
        self.push(self._long(int.from_bytes(self.take(4), "little", signed=True)))

    def _long(self, size: int) -> int:
        if size < 0:
            raise self.fail("negative LONG4 size")
        if size > self.limits.max_int_bytes:
            raise PickleLimitExceeded(f"{self.where}: a {size}-byte integer exceeds the limit")
        return int.from_bytes(self.take(size), "little", signed=True)

    def op_int(self) -> None:
        text = self._digits(self.line())
        if text == b"00":
            self.push(False)
        elif text == b"01":
            self.push(True)
        else:
            self.push(int(text))

    def op_long(self) -> None:
        self.push(int(self._digits(self.line().removesuffix(b"L"))))

    def _digits(self, text: bytes) -> bytes:
        if len(text) > 2 * self.limits.max_int_bytes + 1:
            raise PickleLimitExceeded(f"{self.where}: a {len(text)}-digit integer exceeds the limit")
        return text

    def op_float(self) -> None:
        self.push(float(self.line()))

    def op_binfloat(self) -> None:
        self.push(_DOUBLE.unpack(self.take(8))[0])

    # strings and bytes

    def op_binunicode(self) -> None:
        at = self.at
        size = _UINT4.unpack_from(self.data, at)[0]  # struct.error past the end: malformed
        self.at = at + 4
        self.push(self._text(size))

    def op_short_binunicode(self) -> None:
        self.push(self._text(self.take_uint(1)))

    def op_binunicode8(self) -> None:
        self.push(self._text(self.take_uint(8)))

    def _text(self, size: int) -> str:
        return self.sized(size).decode("utf-8", "surrogatepass")

    def op_unicode(self) -> None:
        raw = self.line()
        self.push(codecs.decode(raw, "raw-unicode-escape"))

    def op_binbytes(self) -> None:
        self.push(self.sized(self.take_uint(4)))

    def op_short_binbytes(self) -> None:
        self.push(self.sized(self.take_uint(1)))

    def op_binbytes8(self) -> None:
        self.push(self.sized(self.take_uint(8)))

    def op_bytearray8(self) -> None:
        self.push(bytearray(self.sized(self.take_uint(8))))

    # containers

    def op_empty_tuple(self) -> None:
        self.push(())

    def op_tuple(self) -> None:
        self.push(tuple(self.pop_mark()))

    def op_tuple1(self) -> None:
        self.push((self.pop(),))

    def op_tuple2(self) -> None:
        second = self.pop()
        self.push((self.pop(), second))

    def op_tuple3(self) -> None:
        third = self.pop()
        second = self.pop()
        self.push((self.pop(), second, third))

    def op_empty_list(self) -> None:
        self.push([])

    def op_list(self) -> None:
        self.push(self.pop_mark())

    def op_append(self) -> None:
        value = self.pop()
        self._list_target().append(value)

    def op_appends(self) -> None:
        items = self.pop_mark()
        self._list_target().extend(items)

    def _list_target(self) -> list:
        target = self.top()
        if type(target) is not list:
            raise ForbiddenCall(f"{self.where}: APPEND to a {type(target).__name__}, not a list")
        return target

    def op_empty_dict(self) -> None:
        self.push({})

    def op_dict(self) -> None:
        items = self.pop_mark()
        self.push(self._filled({}, items))

    def op_setitem(self) -> None:
        value = self.pop()
        key = self.pop()
        self._dict_target()[self._key(key)] = value

    def op_setitems(self) -> None:
        items = self.pop_mark()
        self._filled(self._dict_target(), items)

    def _filled(self, target: dict, items: list) -> dict:
        if len(items) % 2:
            raise self.fail("odd number of items for a dict")
        for position in range(0, len(items), 2):
            target[self._key(items[position])] = items[position + 1]
        return target

    def _dict_target(self) -> dict:
        target = self.top()
        if not isinstance(target, dict):
            raise ForbiddenCall(f"{self.where}: SETITEM on a {type(target).__name__}, not a dict")
        return target

    def _key(self, key: Any) -> Any:
        if is_safe_key(key):
            return key
        raise self.fail(f"a {type(key).__name__} as a dict key or set item (only {SAFE_KEYS})")

    def op_empty_set(self) -> None:
        self.push(set())

    def op_additems(self) -> None:
        items = self.pop_mark()
        target = self.top()
        if type(target) is not set:
            raise ForbiddenCall(f"{self.where}: ADDITEMS on a {type(target).__name__}, not a set")
        target.update(self._key(item) for item in items)

    def op_frozenset(self) -> None:
        self.push(frozenset(self._key(item) for item in self.pop_mark()))

    # memo

    def op_put(self) -> None:
        self.memo_put(self.memo_index(self.line()), self.top())

    def op_binput(self) -> None:
        at = self.at
        self.memo_put(self.data[at], self.top())
        self.at = at + 1

    def op_long_binput(self) -> None:
        at = self.at
        self.memo_put(_UINT4.unpack_from(self.data, at)[0], self.top())
        self.at = at + 4

    def op_memoize(self) -> None:
        self.memo_put(len(self.memo), self.top())

    def op_get(self) -> None:
        self.push(self.memo_get(self.memo_index(self.line())))

    def op_binget(self) -> None:
        at = self.at
        self.push(self.memo_get(self.data[at]))
        self.at = at + 1

    def op_long_binget(self) -> None:
        at = self.at
        self.push(self.memo_get(_UINT4.unpack_from(self.data, at)[0]))
        self.at = at + 4

    # globals, calls, persistent ids

    def op_global(self) -> None:
        module = self.line().decode("utf-8")
        name = self.line().decode("utf-8")
        self.push(self._global(module, name))

    def op_stack_global(self) -> None:
        name = self.pop()
        module = self.pop()
        if type(module) is not str or type(name) is not str:
            raise self.fail("STACK_GLOBAL needs two strings")
        self.push(self._global(module, name))

    def _global(self, module: str, name: str) -> Any:
        try:
            return self.globals_table[module, name]
        except KeyError:
            shown = f"{module}.{name}"
            if len(shown) > 200:
                shown = shown[:200] + "..."
            raise ForbiddenGlobal(
                f"{self.where}: global {shown!r} at byte {self.at} is not on the allowlist "
                "(nothing was imported or called)"
            ) from None

    def op_reduce(self) -> None:
        args = self.pop()
        func = self.pop()
        if not isinstance(func, Reducer):
            raise ForbiddenCall(
                f"{self.where}: REDUCE on a {type(func).__name__} value, which is not callable here"
            )
        if type(args) is not tuple:
            raise self.fail(f"REDUCE arguments for {func.name} are a {type(args).__name__}, not a tuple")
        self._charge(args)
        self.push(func.build(args))

    def _charge(self, args: tuple) -> None:
        """A Reducer may look at every item of its arguments, which the memo can share among any
        number of calls: those items are charged like opcodes, at most the pickle's length in all
        (arguments a pickle builds for each call take at least a byte an item)."""
        self.charged += len(args) + sum(len(arg) for arg in args if type(arg) in (tuple, list, dict))
        if self.charged > self.budget:
            raise PickleLimitExceeded(
                f"{self.where}: REDUCE arguments hold more than {self.budget} items in all (shared arguments)"
            )

    def op_build(self) -> None:
        state = self.pop()
        target = self.top()
        if type(target) is not OrderedDictValue:
            raise ForbiddenCall(f"{self.where}: BUILD on a {type(target).__name__} (only OrderedDict state)")
        if type(state) is tuple and len(state) == 2 and state[1] is None:
            state = state[0]
        if type(state) is not dict:
            raise self.fail(f"BUILD state for an OrderedDict is a {type(state).__name__}, not a dict")
        target.state = state

    def op_binpersid(self) -> None:
        self.push(self.persistent_load(self.pop()))


# handler by opcode byte; None: unknown or refused
_DISPATCH: list[Callable[[_Machine], None] | None] = [
    getattr(_Machine, f"op_{OPCODE_NAMES[bytes([code])].lower()}", None)
    if bytes([code]) in OPCODE_NAMES
    else None
    for code in range(256)
]
