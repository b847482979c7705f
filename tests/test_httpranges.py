"""httpranges is pure: Range, If-Range and If-None-Match decisions and the body plan, without a server."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.httpranges import MAX_RANGES, UNSATISFIABLE, Decision, decide, parse_ranges, plan_body

pytestmark = pytest.mark.unit

ETAG = '"abc"'


def _decide(length: int = 100, **headers: str | None) -> Decision:
    fields = {"range_header": None, "if_none_match": None, "if_range": None, **headers}
    return decide(length, ETAG, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "ranges"),
    [
        ("bytes=0-9", [(0, 10)]),
        ("bytes=90-", [(90, 100)]),
        ("bytes=-10", [(90, 100)]),
        ("bytes=-1000", [(0, 100)]),
        ("bytes=95-1000", [(95, 100)]),
        ("bytes=0-0, 99-99", [(0, 1), (99, 100)]),
        ("BYTES = 1-2", [(1, 3)]),
        ("bytes=100-", []),  # nothing satisfiable: 416
        ("bytes=-0", []),
    ],
)
def test_parse_ranges(header: str, ranges: list[tuple[int, int]]) -> None:
    assert parse_ranges(header, 100) == ranges


NON_ASCII_DIGITS = "bytes=\u0661-\u0662"  # int() would take these; a range header must not


@pytest.mark.parametrize(
    "header",
    ["items=0-1", "bytes=", "bytes=5-1", "bytes=a-b", "bytes=1", "bytes=--1", NON_ASCII_DIGITS, "bytes=-"],
)
def test_invalid_range_headers_are_ignored(header: str) -> None:
    assert parse_ranges(header, 100) is None
    assert _decide(range_header=header) == Decision(200)


def test_conditional_decisions() -> None:
    assert _decide(if_none_match=ETAG) == Decision(304)
    assert _decide(if_none_match=f'W/{ETAG}, "other"') == Decision(304)  # weak comparison
    assert _decide(if_none_match="*") == Decision(304)
    assert _decide(if_none_match='"other"', range_header="bytes=0-1") == Decision(206, ((0, 2),))
    assert _decide(if_range=ETAG, range_header="bytes=0-1") == Decision(206, ((0, 2),))
    assert _decide(if_range=f"W/{ETAG}", range_header="bytes=0-1") == Decision(200)  # strong only
    assert _decide(if_range="Wed, 21 Oct 2015 07:28:00 GMT", range_header="bytes=0-1") == Decision(200)
    assert _decide(range_header="bytes=200-") == Decision(416)
    many = "bytes=" + ",".join(f"{i}-{i}" for i in range(MAX_RANGES + 1))  # 17 asked: ignored
    assert _decide(range_header=many) == Decision(200)


@pytest.mark.parametrize(
    ("header", "ranges"),
    [
        ("bytes=" + ",".join(["0-"] * 16), ((0, 100),)),  # 16 whole bodies: one, once
        ("bytes=0-9,10-19", ((0, 20),)),  # touching
        ("bytes=5-20,0-9", ((0, 21),)),  # overlapping, in any order
        ("bytes=50-59,0-9", ((50, 60), (0, 10))),  # apart: as asked, in the order asked
        ("bytes=50-59,0-9,55-70,20-29,-5", ((50, 71), (0, 10), (20, 30), (95, 100))),
        ("bytes=0-0,-100", ((0, 100),)),  # a suffix covering everything
        ("bytes=" + ",".join(f"{i}-{i}" for i in range(16)), ((0, 16),)),  # 16 in a row: one
        (
            "bytes=" + ",".join(f"{2 * i}-{2 * i}" for i in range(16)),
            tuple((2 * i, 2 * i + 1) for i in range(16)),
        ),
    ],
)
def test_overlapping_and_touching_ranges_are_coalesced(header: str, ranges: tuple) -> None:
    assert _decide(range_header=header) == Decision(206, ranges)


_spec = st.one_of(
    st.builds(lambda a, n: f"{a}-{a + n}", st.integers(0, 120), st.integers(0, 40)),
    st.builds(lambda a: f"{a}-", st.integers(0, 120)),
    st.builds(lambda n: f"-{n}", st.integers(1, 120)),
)


@given(st.lists(_spec, min_size=1, max_size=40), st.integers(0, 100))
def test_no_answer_carries_a_byte_twice(specs: list[str], length: int) -> None:
    """Whatever ranges are asked: the parts are disjoint and apart, cover exactly the bytes asked
    for, keep the order asked, and the body is at most the length plus the multipart heads."""
    header = "bytes=" + ",".join(specs)
    asked = parse_ranges(header, length)
    decision = _decide(length, range_header=header)
    if not asked:
        assert decision == Decision(416)
        return
    if decision.status == 200:
        assert len(asked) > MAX_RANGES
        return
    assert decision.status == 206
    covered = sorted(decision.ranges)
    assert all(end < start for (_, end), (start, _) in itertools.pairwise(covered))
    assert {i for s, e in decision.ranges for i in range(s, e)} == {i for s, e in asked for i in range(s, e)}
    first_asked = [
        min(i for i, (s, e) in enumerate(asked) if start <= s and e <= end) for start, end in decision.ranges
    ]
    assert first_asked == sorted(first_asked)
    plan = plan_body(decision, length, "application/octet-stream", "B" * 24)
    heads = sum(len(part.head) for part in plan.parts) + len(plan.closing)
    assert plan.length - heads == sum(end - start for start, end in decision.ranges) <= length


def test_plans_say_what_goes_on_the_wire() -> None:
    whole = plan_body(Decision(200), 100, "application/octet-stream", "b")
    assert (whole.status, whole.length, dict(whole.headers)[b"content-type"]) == (
        200,
        100,
        b"application/octet-stream",
    )
    assert [(p.start, p.end) for p in whole.parts] == [(0, 100)]
    one = plan_body(Decision(206, ((10, 20),)), 100, "x/y", "b")
    assert dict(one.headers)[b"content-range"] == b"bytes 10-19/100" and one.length == 10
    unsatisfiable = plan_body(Decision(416), 100, "x/y", "b")
    assert dict(unsatisfiable.headers)[b"content-range"] == b"bytes */100"
    assert unsatisfiable.length == len(UNSATISFIABLE) and not unsatisfiable.parts
    assert plan_body(Decision(304), 100, "x/y", "b").parts == ()


def test_multipart_plan_length_equals_its_bytes() -> None:
    plan = plan_body(Decision(206, ((0, 2), (50, 60))), 100, "application/octet-stream", "BOUNDARY")
    assert dict(plan.headers)[b"content-type"] == b"multipart/byteranges; boundary=BOUNDARY"
    body = b"".join(part.head + bytes(part.end - part.start) for part in plan.parts) + plan.closing
    assert len(body) == plan.length
    assert plan.parts[1].head.endswith(b"content-range: bytes 50-59/100\r\n\r\n")
    assert plan.closing == b"\r\n--BOUNDARY--\r\n"


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_one_range_means_the_same_on_the_fast_path_and_the_general_one(
    first: int, last: int, length: int
) -> None:
    """`bytes=a-b` takes a fast path; with a space after `=` the general parser answers."""
    expected = None if last < first else ([(first, min(last + 1, length))] if first < length else [])
    assert parse_ranges(f"bytes={first}-{last}", length) == expected
    assert parse_ranges(f"bytes= {first}-{last}", length) == expected
