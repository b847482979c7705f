"""The `slice` grammar: the OpenAPI `pattern` accepts exactly the texts the parser accepts.

Texts are drawn three ways: from the pattern itself, from the parser's own grammar (NumPy basic
indexes written out, spaces and leading zeros included), and as arbitrary text over the grammar's
alphabet and beyond. For each, Python's reading of the pattern, an ECMA-262 reading (jsonschema_rs,
as JSON Schema validators and schemathesis read a `pattern`) and `parse_index` agree; a parsed
index is what NumPy reads, and against a concrete shape it is either NumPy's selection or an
IndexError (the service's 404 `slice_out_of_range`), never another error.
"""

from __future__ import annotations

import re

import jsonschema_rs  # schemathesis' validator (a test dependency through it)
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reader.pt2.index_syntax import DIGITS, INDEX_SYNTAX, parse_index
from reader.pt2.slicing import normalize_index

pytestmark = pytest.mark.unit

GRAMMAR = re.compile(INDEX_SYNTAX)
ECMA = jsonschema_rs.Draft202012Validator({"type": "string", "pattern": INDEX_SYNTAX})
SHAPES = [(), (5,), (3, 4), (2, 1, 6), (0, 3)]
EXAMPLES = settings(max_examples=400, deadline=None)


def pattern_accepts(text: str) -> bool:
    python = GRAMMAR.fullmatch(text) is not None
    assert ECMA.is_valid(text) == python, f"Python and ECMA-262 read the pattern differently on {text!r}"
    return python


def parser_accepts(text: str) -> bool:
    try:
        parse_index(text)
    except ValueError:
        return False
    return True


def check_against_numpy(index: tuple) -> None:
    """Against each shape: the selection NumPy makes, or an IndexError where NumPy raises one."""
    for shape in SHAPES:
        full = np.empty(shape)
        try:
            normalized = normalize_index(index, shape)
        except IndexError:
            with pytest.raises((IndexError, OverflowError)):  # NumPy's for an int past int64
                full[index]
            continue
        want = full[index].shape
        got = tuple(1 if entry is None else len(entry) for entry in normalized if not isinstance(entry, int))
        assert got == want, (index, shape)


# --- the parser's own grammar: NumPy basic indexes, written as a query would write them ----------

_int = st.one_of(st.integers(-12, 12), st.integers(-(10**40), 10**40))
_step = _int.filter(lambda n: n != 0)
_slice = st.builds(slice, st.none() | _int, st.none() | _int, st.none() | _step)
_entry = st.one_of(_int, _slice)


@st.composite
def indexes(draw) -> tuple:
    entries = draw(st.lists(_entry, max_size=5))
    if draw(st.booleans()):
        entries.insert(draw(st.integers(0, len(entries))), Ellipsis)
    return tuple(entries)


@st.composite
def written(draw, index: tuple) -> str:
    """`index` as text, with spaces around entries and commas, leading zeros, and `a:b:` (a slice
    whose step is left out after its colon) as a user may write them."""
    spaces = st.text(alphabet=" ", max_size=2)

    def number(value: int) -> str:
        zeros = "0" * draw(st.integers(0, 2))
        return f"-{zeros}{-value}" if value < 0 else f"{zeros}{value}"

    def part(entry) -> str:
        if entry is Ellipsis:
            return "..."
        if isinstance(entry, slice):
            start, stop = ("" if b is None else number(b) for b in (entry.start, entry.stop))
            if entry.step is None:
                return f"{start}:{stop}" + draw(st.sampled_from(["", ":"]))
            return f"{start}:{stop}:{number(entry.step)}"
        return number(entry)

    return draw(spaces) + ",".join(part(e) + draw(spaces) for e in index) if index else draw(spaces)


def _clamped(entry):
    """What the parser reads an integer of more than DIGITS digits as (past every dim's end)."""
    limit = 10**DIGITS

    def clamp(value):
        return value if value is None or abs(value) <= limit else (limit if value > 0 else -limit)

    if isinstance(entry, slice):
        return slice(clamp(entry.start), clamp(entry.stop), clamp(entry.step))
    return entry if entry is Ellipsis else clamp(entry)


@given(data=st.data(), index=indexes())
@EXAMPLES
def test_every_index_the_parser_reads_the_pattern_accepts(data, index) -> None:
    text = data.draw(written(index))
    assert pattern_accepts(text), text
    parsed = parse_index(text)
    assert parsed == tuple(_clamped(entry) for entry in index)
    check_against_numpy(parsed)


# --- the pattern's own texts ---------------------------------------------------------------------


@given(text=st.from_regex(INDEX_SYNTAX, fullmatch=True))
@EXAMPLES
def test_every_text_the_pattern_accepts_parses(text) -> None:
    assert ECMA.is_valid(text), text
    index = parse_index(text)
    assert sum(entry is Ellipsis for entry in index) <= 1
    for entry in index:
        assert not (isinstance(entry, slice) and entry.step == 0), text
    check_against_numpy(index)  # in range or an IndexError: never a TypeError or ValueError


# --- arbitrary text: both say yes or both say no -------------------------------------------------

_near = st.text(alphabet="0123456789-:., ", max_size=24)  # the grammar's own characters
_anything = st.text(max_size=24)


@given(text=st.one_of(_near, _anything))
@EXAMPLES
def test_pattern_and_parser_agree_on_any_text(text) -> None:
    assert pattern_accepts(text) == parser_accepts(text), text


@pytest.mark.parametrize(
    "text",
    [
        "-",
        "-:",
        ":-",
        "...,-:,...,5",
        "...,...",
        "..., 0, ...",
        "::0",
        "1:2:-0",
        "1:2:000",
        "0,",
        ",0",
        "0,,1",
        "1:2:3:4",
        "1.5",
        "+1",
        "0x10",
        "1_000",
        " 1 : 2 ",
        "0\n",
        "\u0661",
        "....",
    ],
)
def test_texts_both_refuse(text) -> None:
    assert not pattern_accepts(text)
    with pytest.raises(ValueError):
        parse_index(text)


@pytest.mark.parametrize(
    ("text", "index"),
    [
        ("", ()),
        ("  ", ()),
        ("...", (Ellipsis,)),
        ("-1", (-1,)),
        ("-0", (0,)),
        ("0:128, :, 4:8", np.s_[0:128, :, 4:8]),
        ("::2,...,0", np.s_[::2, ..., 0]),
        ("1:", np.s_[1:,]),
        ("1::", np.s_[1:,]),
        ("::-3", np.s_[::-3,]),
        ("0 , ... ", (0, Ellipsis)),
        ("9" * 5000, (10**DIGITS,)),
        ("-" + "0" * 5000 + "7", (-7,)),
    ],
)
def test_texts_both_accept(text, index) -> None:
    assert pattern_accepts(text)
    assert parse_index(text) == index


def test_the_openapi_document_states_the_grammar() -> None:
    """Every route taking `slice` documents INDEX_SYNTAX as its pattern, and 404 slice_out_of_range."""
    from app.main import create_app
    from app.settings import Settings

    document = create_app(Settings(archives=[])).openapi()
    found = 0
    for operations in document["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "slice":
                    found += 1
                    assert parameter["schema"]["pattern"] == INDEX_SYNTAX
                    assert "slice_out_of_range" in operation["responses"]["404"]["x-error-codes"]
                    assert "bad_slice" in operation["responses"]["400"]["x-error-codes"]
    assert found == 4  # GET and HEAD of /tensors/{name}/data and /archives/{archive_id}/tensors/{name}/data
