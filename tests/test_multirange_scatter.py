"""Multi-range answers received straight into the caller's memory (`read_ranges_into`).

Long ranges (multirange.SCATTER_MIN on average) from a server that answers several ranges a request
land where they go: each part's bytes in its view, each part's head in a frame compared afterwards
with the heads the first one predicts. Against nginx the bytes are exact and no body buffer is made;
against a server whose later parts are not laid out as the first one says (another order, another
range named, a short part) the body is parsed instead: the right bytes, or the parser's error, never
bytes put in the wrong place. `Scatter` (sans-IO) on its own: test_scatter_layout.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import numpy as np
import pytest

from reader.errors import SourceError
from reader.sources import http
from reader.sources.http import HttpSource
from reader.sources.transport.http1.stream import BodyStream
from testing.multipart_server import MultipartServer

pytestmark = pytest.mark.emulator

SIZE = 4 << 20
DATA = np.random.default_rng(34).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
# long ranges, gaps between them, one at the very end of the object
RANGES = [(0, 300_000), (400_001, 700_000), (1_000_000, 1_000_000 + (256 << 10)), (SIZE - 200_000, SIZE)]


# -- Scatter, sans-IO ------------------------------------------------------------------------------


# -- over servers ----------------------------------------------------------------------------------


def _views(ranges) -> list[memoryview]:
    return [memoryview(np.full(end - start, 0xEE, np.uint8)) for start, end in ranges]


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    from testing.servers import NginxProcess, ensure_nginx

    ensure_nginx()  # installed when missing, not skipped
    root = tmp_path_factory.mktemp("scatter")
    (root / "blob").write_bytes(DATA)
    with NginxProcess(root) as server:
        yield server


def _scattered(monkeypatch) -> list[int]:
    """How many buffers each body received into memory went into (1: one buffer; more: its
    parts' heads and views, one after another)."""
    seen: list[int] = []
    receive = BodyStream.receive_into

    def counted(self, view):
        seen.append(1 if isinstance(view, memoryview) else len(view))
        return receive(self, view)

    monkeypatch.setattr(BodyStream, "receive_into", counted)
    return seen


async def test_over_nginx_long_ranges_land_in_their_views(nginx, monkeypatch) -> None:
    seen = _scattered(monkeypatch)
    made = []
    fresh = http.fresh_buffer
    monkeypatch.setattr(http, "fresh_buffer", lambda size: made.append(size) or fresh(size))
    source = await HttpSource.open(nginx.url("blob"), tail_size=1024)
    try:
        views = _views(RANGES)
        await source.read_ranges_into(RANGES, views)
        assert [bytes(view) for view in views] == [DATA[start:end] for start, end in RANGES]
        assert seen == [2 * len(RANGES) + 1] and source.multirange is True
        assert not [size for size in made if size > 1 << 20]  # no buffer for the body
        framing = source.stats.by_purpose["data"].bytes - sum(end - start for start, end in RANGES)
        assert 0 < framing < 200 * (len(RANGES) + 1), framing  # the parts' heads and the closing
        short = [(10, 20), (30, 40)]  # short ranges: the whole answer in one buffer, copied out
        views = _views(short)
        await source.read_ranges_into(short, views)
        assert [bytes(view) for view in views] == [DATA[start:end] for start, end in short]
        assert seen == [2 * len(RANGES) + 1, 1]
    finally:
        await source.close()


@contextlib.asynccontextmanager
async def _source(fault: str) -> AsyncIterator[tuple[MultipartServer, HttpSource]]:
    """A source opened on MultipartServer serving DATA with `fault`."""
    async with MultipartServer(DATA, fault) as server:
        source = await HttpSource.open(server.url, tail_size=1024)
        try:
            yield server, source
        finally:
            await source.close()


async def _read(source: HttpSource, ranges) -> list[bytes]:
    views = _views(ranges)
    await source.read_ranges_into(ranges, views)
    return [bytes(view) for view in views]


async def test_parts_in_another_order_are_parsed_into_their_views(monkeypatch) -> None:
    """Equal lengths and digits: the body is as long as predicted, its heads are not those foreseen."""
    ranges = [(100_000, 300_000), (500_000, 700_000), (900_000, 1_100_000)]
    seen = _scattered(monkeypatch)
    async with _source("reordered") as (_, source):
        assert await _read(source, ranges) == [DATA[start:end] for start, end in ranges]
    assert seen == [2 * len(ranges) + 1]  # the first head predicted the rest, wrongly


@pytest.mark.parametrize(("fault", "message"), [("wrong-range", "not asked"), ("short", "not the length")])
async def test_a_wrong_part_in_a_long_answer_is_an_error(fault: str, message: str) -> None:
    async with _source(fault) as (_, source):
        with pytest.raises(SourceError, match=message):
            await _read(source, RANGES)


async def test_a_long_answer_cut_half_way_is_asked_again_and_lands_whole() -> None:
    async with _source("cut-once") as (server, source):
        assert await _read(source, RANGES) == [DATA[start:end] for start, end in RANGES]
        assert server.fault == "none"  # the cut happened
