"""Several byte ranges in one request (sans-IO): the `Range` header and the `multipart/byteranges` body.

A server that serves several ranges a request (nginx does; S3 does not) answers `Range: bytes=a-b,c-d`
with 206 and a `multipart/byteranges` body (RFC 9110 section 14.6): per part a boundary line, headers
with the part's `Content-Range`, a blank line and exactly that range's bytes. The parser takes the
body in any chunks and says where each piece of part data goes: which asked range, at which offset.

Every part must be one of the asked ranges, whole (its `Content-Range` names exactly an asked
range of the object opened), each asked range exactly once, and each part's bytes must be followed
by the boundary (a short or long part is caught there, before its range counts as in); anything else
is a `SourceError` (the object's size changed: `SourceChanged`), never bytes put in the wrong place.

Most answers need no parsing: nginx lays every part out as the first (its head differs only in the
range it names), so the first head predicts where every head and every part's bytes are (`layout`),
and comparing all the heads with the prediction at once (`Layout.check`) is as strict as parsing. An
answer that differs anywhere is parsed.

`batches` splits ranges into requests whose `Range` header stays within `MAX_RANGE_HEADER`
characters: nginx reads a request's header lines into buffers of 8 KiB by default
(`large_client_header_buffers 4 8k`) and answers 400 to a longer line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import SourceChanged, SourceError
from .contentrange import parse_content_range
from .scatter import gather

MAX_RANGE_HEADER = 6000  # characters of `bytes=a-b,...`: within nginx's default 8 KiB header line
MAX_RANGES = 1000  # ranges a request, whatever their length
MAX_PART_HEAD = 4096  # bytes of a part's boundary line and headers before its data
HEAD_WINDOW = MAX_PART_HEAD + 512  # bytes a head is looked for in (the boundary: at most 70 bytes)
_BOUNDARY = re.compile(r';\s*boundary\s*=\s*(?:"([^"]+)"|([^\s;]+))', re.IGNORECASE)
# after a part's data, CRLF and the boundary: "--" (the end), or padding, CRLF, headers, CRLF CRLF
_AFTER_BOUNDARY = re.compile(rb"(?:(--)|[ \t]*\r\n((?:[^\r\n]+\r\n)*)\r\n)")
_CONTENT_RANGE = re.compile(rb"^content-range:[ \t]*([^\r\n]*?)[ \t]*\r$", re.IGNORECASE | re.MULTILINE)

Range = tuple[int, int]  # [start, end) in the object


def range_header(ranges: Sequence[Range]) -> str:
    """`bytes=a-b,c-d,...` (inclusive ends) for [start, end) ranges."""
    return "bytes=" + ",".join(f"{start}-{end - 1}" for start, end in ranges)


def batches(ranges: Sequence[Range]) -> list[list[Range]]:
    """`ranges` in order, as requests whose `Range` header stays within MAX_RANGE_HEADER characters
    and MAX_RANGES ranges (counted as if every offset had as many digits as the largest)."""
    if not ranges:
        return []
    widest = len(f"{max(end for _, end in ranges)}")
    each = min(MAX_RANGES, (MAX_RANGE_HEADER - len("bytes=")) // (2 * widest + 2))
    return [list(ranges[at : at + each]) for at in range(0, len(ranges), each)]


def boundary_of(content_type: str | None) -> bytes | None:
    """The boundary of a `multipart/byteranges` Content-Type, or None for any other type."""
    if not content_type or not content_type.strip().lower().startswith("multipart/byteranges"):
        return None
    found = _BOUNDARY.search(content_type)
    if found is None:
        return None
    return (found.group(1) or found.group(2)).encode("latin-1")


@dataclass(frozen=True)
class Layout:
    """Where everything is in a multipart answer laid out as nginx lays one out: CRLF and the first
    boundary first, the parts in the order asked, each part's head the first one's but for its
    range, the closing boundary and CRLF last."""

    starts: np.ndarray  # where each part's bytes begin in the body
    sizes: np.ndarray  # each part's bytes (its range's length)
    heads: np.ndarray  # each part's head (the boundary line and headers right before its bytes)
    frame: bytes  # every head, then the closing, end to end
    length: int  # the body's

    def check(self, body: memoryview) -> bool:
        """Whether every head and the closing in `body`, a whole answer, are what they must be."""
        if len(body) != self.length:
            return False
        source = np.frombuffer(body, np.uint8)
        found = np.empty(len(self.frame), np.uint8)
        closing = len(self.frame) - int(self.heads.sum())
        gather(source, self.starts - self.heads, self.heads, [memoryview(found[: len(found) - closing])])
        found[len(found) - closing :] = source[len(source) - closing :]
        return found.tobytes() == self.frame


def layout(window: bytes, boundary: bytes, asked: Sequence[Range], size: int) -> Layout | None:
    """The layout of a multipart answer whose first bytes are `window` (HEAD_WINDOW of them, or the
    whole body if shorter), if its later parts follow the first as nginx lays them out. None: the
    first head is not that (parse the body with ByteRangesParser, which says what is wrong)."""
    delimiter = b"\r\n--" + boundary
    end = window.find(b"\r\n\r\n", len(delimiter))
    if not asked or not window.startswith(delimiter) or end < 0:
        return None
    head = window[len(delimiter) : end]  # CRLF and the first part's headers
    value = b"bytes %d-%d/%d" % (asked[0][0], asked[0][1] - 1, size)
    if (
        not head.startswith(b"\r\n")
        or head.count(value) != 1
        or _CONTENT_RANGE.findall(head + b"\r\n") != [value]
    ):
        return None
    before, _, after = head.partition(value)
    prefix, suffix = delimiter + before + b"bytes ", b"/%d" % size + after + b"\r\n\r\n"
    closing = delimiter + b"--\r\n"
    bounds = np.array(asked, np.int64).reshape(-1, 2)
    bounds[:, 1] -= 1  # inclusive ends, as Content-Range names them
    template = (prefix.replace(b"%", b"%%") + b"%d-%d" + suffix.replace(b"%", b"%%")) * len(asked)
    heads = len(prefix) + _digits(bounds[:, 0]) + 1 + _digits(bounds[:, 1]) + len(suffix)
    sizes = bounds[:, 1] + 1 - bounds[:, 0]
    ends = np.cumsum(heads + sizes)
    return Layout(
        starts=ends - sizes,
        sizes=sizes,
        heads=heads,
        frame=template % tuple(bounds.ravel().tolist()) + closing,
        length=int(ends[-1]) + len(closing),
    )


_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)


def _digits(values: np.ndarray) -> np.ndarray:
    """How many decimal digits each (non-negative) value is written with."""
    return 1 + np.searchsorted(_POWERS, values, side="right")


class ByteRangesParser:
    """Feed it a `multipart/byteranges` body answering `asked` (disjoint [start, end) ranges of an
    object of `size` bytes); `feed` returns (asked index, offset in that range, bytes) pieces, in
    body order. `finish` checks that every asked range came, whole."""

    def __init__(self, boundary: bytes, asked: Sequence[Range], size: int, where: str = "the server") -> None:
        self.delimiter = b"--" + boundary
        self.order = list(asked)
        self._asked: dict[Range, int] | None = None  # by range, made when a part comes out of order
        # the bytes around a part's "a-b/N" as the first part had them: a part in the order asked is
        # then recognised by comparing what comes with what it must be (parts: a few hundred bytes
        # each, tens of thousands an answer)
        self.template: tuple[bytes, bytes] | None = None  # (before "a-b", "/N" and after)
        self.size = size
        self.where = where
        self.pending = bytearray()  # a boundary line or part head cut by a chunk's end
        self.state = "preamble"  # preamble | head | data | after | done
        self.part: int | None = None  # asked index of the part being received
        self.left = 0  # data bytes of the current part still to come
        self.at = 0  # offset in the current range of the next data byte
        self.arrived: set[int] = set()  # asked ranges whose bytes all came, boundary checked

    def feed(self, data: bytes | memoryview) -> list[tuple[int, int, memoryview]]:
        """The pieces of asked ranges in `data` (views of it: no copy); boundaries and part heads are
        checked as they pass."""
        view = memoryview(data)
        if self.pending:  # a boundary line or part head cut by the chunk before
            view = memoryview(bytes(self.pending) + bytes(view))
            self.pending.clear()
        out: list[tuple[int, int, memoryview]] = []
        pos, size = 0, len(view)
        while pos < size:
            if self.state == "data":
                take = min(self.left, size - pos)
                assert self.part is not None
                out.append((self.part, self.at, view[pos : pos + take]))
                self.at += take
                self.left -= take
                pos += take
                if not self.left:
                    self.state = "after"
                continue
            if self.state == "done":
                break  # the epilogue: ignored
            window = bytes(view[pos : pos + HEAD_WINDOW])  # a head is parsed from a copy of its bytes only
            head = self._expected_next() if self.state == "after" else None
            if head is not None and window.startswith(head):
                assert self.part is not None
                self.arrived.add(self.part)
                self.part += 1
                start, end = self.order[self.part]
                self.at, self.left = 0, end - start
                self.state = "data" if self.left else "after"
                pos += len(head)
                continue
            moved = self._parse(window, 0)
            if moved is None:  # more bytes needed: keep the rest for the next chunk
                if pos + len(window) < size:
                    raise SourceError(f"{self.where}: more than {MAX_PART_HEAD} bytes of the multipart "
                                      "answer without a boundary or the end of a part's headers")  # fmt: skip
                self.pending += window
                self._limit()
                break
            pos += moved
        return out

    def _parse(self, buf: bytes, pos: int) -> int | None:
        """One step through a boundary line or a part's headers from `pos`: where it ends, or None
        when `buf` does not hold all of it yet."""
        if self.state == "preamble":
            found = buf.find(self.delimiter, pos)
            if found < 0:
                return None
            self.state = "head"
            return found + len(self.delimiter)
        if self.state == "after":  # right after a part's data: CRLF and the boundary, exactly
            delimiter = b"\r\n" + self.delimiter
            found = (
                _AFTER_BOUNDARY.match(buf, pos + len(delimiter)) if buf.startswith(delimiter, pos) else None
            )
            if found is not None:  # the boundary and the next part's head at once
                assert self.part is not None
                self.arrived.add(self.part)
                self.part = None
                if found.group(1):
                    self.state = "done"
                    return len(buf)
                self._start_part(b"\r\n" + found.group(2)[:-2])  # as the slow path has it: no last CRLF
                return found.end()
            expected = b"\r\n" + self.delimiter
            if len(buf) - pos < len(expected):
                return None
            if buf[pos : pos + len(expected)] != expected:
                raise SourceError(f"{self.where}: a part of the multipart answer is not the length "
                                  "its Content-Range says (no boundary after it)")  # fmt: skip
            assert self.part is not None
            self.arrived.add(self.part)
            self.part = None
            self.state = "head"
            return pos + len(expected)
        # "head", after a boundary: "--" (the end), or CRLF, the part's headers and CRLF CRLF
        if len(buf) - pos < 2:
            return None
        if buf[pos : pos + 2] == b"--":
            self.state = "done"
            return len(buf)
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return None
        self._start_part(buf[pos:end])
        return end + 4

    def _expected_next(self) -> bytes | None:
        """What comes between the current part's data and the next asked range's, if the server
        answers in the order asked with the first part's headers."""
        if self.template is None or self.part is None or self.part + 1 >= len(self.order):
            return None
        if self.part + 1 in self.arrived:
            return None
        start, end = self.order[self.part + 1]
        return self.template[0] + b"%d-%d" % (start, end - 1) + self.template[1]

    def _limit(self) -> None:
        if len(self.pending) > MAX_PART_HEAD:
            raise SourceError(f"{self.where}: more than {MAX_PART_HEAD} bytes of the multipart answer "
                              "without a boundary or the end of a part's headers")  # fmt: skip

    def _start_part(self, head: bytes) -> None:
        padding, _, fields = head.partition(b"\r\n")
        if padding.strip():  # transport padding after the boundary is whitespace only
            raise SourceError(f"{self.where}: a multipart boundary line carries {padding[:40]!r}")
        ranges = _CONTENT_RANGE.findall(fields + b"\r\n")
        if len(ranges) != 1:
            raise SourceError(
                f"{self.where}: a part of the multipart answer has {len(ranges)} Content-Range headers"
            )
        found = parse_content_range(ranges[0])
        if found is None or found.first is None or found.last is None or found.total is None:
            raise SourceError(f"{self.where}: a part's Content-Range {ranges[0][:60]!r} is not bytes a-b/N")
        first, last, total = found.first, found.last, found.total
        if total != self.size:
            raise SourceChanged(f"{self.where} changed: {self.size} bytes are now {total}")
        index: int | None = len(self.arrived)  # in the order asked, as nginx answers
        if index >= len(self.order) or self.order[index] != (first, last + 1):
            if self._asked is None:
                self._asked = {(start, end): number for number, (start, end) in enumerate(self.order)}
            index = self._asked.get((first, last + 1))
        if index is None:
            raise SourceError(f"{self.where}: a part holds bytes {first}-{last}, which were not asked for")
        if index in self.arrived or index == self.part:
            raise SourceError(f"{self.where}: bytes {first}-{last} came twice in one multipart answer")
        self.part, self.at, self.left = index, 0, last + 1 - first
        self.state = "data" if self.left else "after"
        if self.template is None:
            before, _, after = head.partition(ranges[0])
            self.template = (
                b"\r\n" + self.delimiter + before + b"bytes ",
                b"/%d" % self.size + after + b"\r\n\r\n",
            )

    def finish(self) -> None:
        """The body ended: every asked range must have come, whole, and the closing boundary too."""
        if self.state != "done" or len(self.arrived) != len(self.order):
            missing = len(self.order) - len(self.arrived)
            raise SourceError(f"{self.where}: the multipart answer ended with {missing} of "
                              f"{len(self.order)} asked ranges missing or cut")  # fmt: skip
