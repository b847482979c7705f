"""Multi-range answers parsed and placed without a server: any split of a body, nginx's layout, other
orders and headers, bad or cut parts, the Range header kept short (against servers:
test_shard_multirange.py)."""

from __future__ import annotations

import pytest

from reader.errors import SourceChanged, SourceError
from reader.sources.transport.multirange import (
    HEAD_WINDOW,
    MAX_RANGE_HEADER,
    ByteRangesParser,
    batches,
    boundary_of,
    layout,
    range_header,
)

pytestmark = pytest.mark.unit


DATA = bytes(range(256)) * 40  # 10240 bytes


ASKED = [(0, 10), (100, 164), (1000, 1001), (5000, 6000)]


def _part(
    start: int, end: int, size: int = len(DATA), boundary: bytes = b"XyZ", body: bytes | None = None
) -> bytes:
    head = b"\r\n--" + boundary + b"\r\nContent-Type: application/octet-stream\r\n"
    head += b"Content-Range: bytes %d-%d/%d\r\n\r\n" % (start, end - 1, size)
    return head + (DATA[start:end] if body is None else body)


def _body(parts: list[bytes], boundary: bytes = b"XyZ") -> bytes:
    return b"".join(parts) + b"\r\n--" + boundary + b"--\r\n"


def _parse(body: bytes, asked=ASKED, chunk: int | None = None) -> dict[int, bytes]:
    parser = ByteRangesParser(b"XyZ", asked, len(DATA))
    got: dict[int, bytearray] = {index: bytearray(end - start) for index, (start, end) in enumerate(asked)}
    step = chunk or len(body)
    for at in range(0, len(body), step):
        for index, offset, piece in parser.feed(body[at : at + step]):
            got[index][offset : offset + len(piece)] = piece
    parser.finish()
    return {index: bytes(value) for index, value in got.items()}


def test_every_split_of_a_body_gives_the_asked_bytes() -> None:
    body = _body([_part(start, end) for start, end in ASKED])
    want = {index: DATA[start:end] for index, (start, end) in enumerate(ASKED)}
    for chunk in [1, 2, 3, 7, 64, 100, 1000, len(body)]:
        assert _parse(body, chunk=chunk) == want, chunk


def _laid(body: bytes) -> bool:
    """Whether `body` is laid out as its first head predicts (what is then placed unparsed)."""
    found = layout(body[:HEAD_WINDOW], b"XyZ", ASKED, len(DATA))
    return found is not None and found.check(memoryview(body))


def test_an_answer_laid_out_as_nginx_lays_it_out_is_placed_by_its_layout() -> None:
    body = _body([_part(start, end) for start, end in ASKED])
    found = layout(body[:HEAD_WINDOW], b"XyZ", ASKED, len(DATA))
    assert found is not None and found.check(memoryview(body)) and found.length == len(body)
    placed = [body[at : at + size] for at, size in zip(found.starts.tolist(), found.sizes.tolist())]
    assert placed == [DATA[start:end] for start, end in ASKED]
    reordered = _body([_part(start, end) for start, end in reversed(ASKED)])
    assert not _laid(reordered)  # left to the parser
    assert not _laid(_body([_part(start, end) for start, end in ASKED[:1]] + [b"x" * 300]))


def test_parts_in_another_order_with_other_headers_are_fine() -> None:
    parts = [_part(start, end) for start, end in reversed(ASKED)]
    parts[1] = parts[1].replace(b"Content-Type: application/octet-stream", b"X-Extra: 1\r\ncontent-type: a/b")
    body = b"a preamble" + _body(parts) + b"an epilogue"
    assert _parse(body, chunk=5) == {index: DATA[start:end] for index, (start, end) in enumerate(ASKED)}


@pytest.mark.parametrize(
    ("parts", "error", "message"),
    [
        ([_part(0, 10), _part(100, 164), _part(1000, 1001), _part(5001, 6001)], SourceError, "not asked"),
        ([_part(0, 10), _part(100, 164, body=DATA[100:160]), _part(1000, 1001), _part(5000, 6000)],
         SourceError, "not the length"),
        ([_part(0, 10), _part(100, 164, body=DATA[100:170]), _part(1000, 1001), _part(5000, 6000)],
         SourceError, "not the length"),
        ([_part(0, 10), _part(100, 164), _part(1000, 1001)], SourceError, "1 of 4 asked ranges missing"),
        ([_part(0, 10), _part(0, 10), _part(100, 164), _part(1000, 1001), _part(5000, 6000)],
         SourceError, "came twice"),
        ([_part(0, 10, size=99), _part(100, 164), _part(1000, 1001), _part(5000, 6000)],
         SourceChanged, "changed"),
    ],
    ids=["wrong-content-range", "short-part", "long-part", "missing-part", "twice", "other-size"],
)  # fmt: skip
def test_a_bad_part_is_an_error(parts: list[bytes], error: type, message: str) -> None:
    assert not _laid(_body(parts))
    for chunk in (3, None):
        with pytest.raises(error, match=message):
            _parse(_body(parts), chunk=chunk)


def test_a_cut_body_is_an_error() -> None:
    body = _body([_part(start, end) for start, end in ASKED])
    assert not _laid(body[:-20])
    with pytest.raises(SourceError, match="missing or cut"):
        _parse(body[:-20])


def test_the_range_header_stays_short_and_the_boundary_is_found() -> None:
    ranges = [(start, start + 5) for start in range(10**9, 10**9 + 10**6, 100)]
    split = batches(ranges)
    assert [r for batch in split for r in batch] == ranges
    assert all(len(range_header(batch)) <= MAX_RANGE_HEADER for batch in split)
    assert boundary_of('multipart/byteranges; boundary="a b"') == b"a b"
    assert boundary_of("multipart/byteranges; boundary=00000000000000000001") == b"00000000000000000001"
    assert boundary_of("application/octet-stream") is None
