"""No Range answer carries a byte of the body twice, on every route that takes Range, under a real
uvicorn (the protocol `pt2serve serve` runs, sendfile included): 16 overlapping whole ranges give
the body once, overlapping and touching ranges are joined, ranges apart still get
multipart/byteranges in the order asked, and every byte is the body's."""

from __future__ import annotations

import contextlib
import os
import re
import zipfile
from collections.abc import AsyncIterator

import httpx
import pytest

from testing.service import make_app, real_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

ROWS, COLS = 256, 256  # a 256 KiB float32 tensor
WEIGHT = os.urandom(ROWS * COLS * 4)
PROGRAM = os.urandom(300_000)
ROUTES = [
    "/archives/a/tensors/w/data",  # the hot lane
    "/archives/a/tensors/w/data?format=npy&x=1",  # FastAPI's route (a parameter the hot lane leaves to it)
    "/archives/a/tensors/w/data?slice=3:200,::2",  # a slice
    "/archives/a/safetensors",
    "/archives/a/ptd",
    "/archives/a/executorch/model.pte",
]
SIXTEEN_WHOLE = "bytes=" + ",".join(["0-"] * 16)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("ranges") / "a.pt2"
    write_pt2(path, {"w": (7, [ROWS, COLS], WEIGHT), "b": (7, [COLS], os.urandom(COLS * 4))})
    with zipfile.ZipFile(path, "a") as zipped:  # an ExecuTorch program beside the weights
        zipped.writestr(
            zipfile.ZipInfo("synthetic/data/executorch/model.pte", (2020, 1, 1, 0, 0, 0)), PROGRAM
        )
    return path


@contextlib.asynccontextmanager
async def bodies(archive) -> AsyncIterator[tuple[httpx.AsyncClient, list[tuple[str, bytes]]]]:
    """A client of the app under uvicorn, and each route with its whole body (200)."""
    async with (
        real_server(make_app([f"a={archive}"])) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        yield client, [(route, await whole(client, route)) for route in ROUTES]


async def whole(client: httpx.AsyncClient, route: str) -> bytes:
    response = await client.get(route)
    assert response.status_code == 200, response.text
    assert len(response.content) > 1000
    return response.content


def parts_of(response: httpx.Response) -> list[tuple[tuple[int, int], bytes]]:
    """The parts of a multipart/byteranges body, each read by its Content-Range's length (so a body
    byte that looks like a boundary cannot cut a part short), and nothing after the closing line."""
    kind, _, boundary = response.headers["content-type"].partition("; boundary=")
    assert kind == "multipart/byteranges" and boundary
    body, at, parts = response.content, 0, []
    opening, closing = f"\r\n--{boundary}\r\n".encode(), f"\r\n--{boundary}--\r\n".encode()
    while not body.startswith(closing, at):
        assert body.startswith(opening, at), body[at : at + 100]
        head_end = body.index(b"\r\n\r\n", at) + 4
        head = body[at + len(opening) : head_end].decode("latin-1")
        found = re.search(r"content-range: bytes (\d+)-(\d+)/(\d+)", head, re.I)
        assert found is not None, head
        first, last = int(found[1]), int(found[2])
        parts.append(((first, last + 1), body[head_end : head_end + last + 1 - first]))
        at = head_end + last + 1 - first
    assert at + len(closing) == len(body)
    return parts


def single(response: httpx.Response, full: bytes, start: int, end: int) -> None:
    assert response.status_code == 206, response.text
    assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{len(full)}"
    assert response.content == full[start:end]


async def test_sixteen_whole_ranges_give_the_body_once(archive) -> None:
    async with bodies(archive) as (server, routes):
        for route, full in routes:
            response = await server.get(route, headers={"Range": SIXTEEN_WHOLE})
            single(response, full, 0, len(full))
            assert len(response.content) == len(full) == int(response.headers["content-length"])
            head = await server.head(route, headers={"Range": SIXTEEN_WHOLE})
            assert head.headers["content-length"] == str(len(full))


async def test_overlapping_and_touching_ranges_are_joined(archive) -> None:
    async with bodies(archive) as (server, routes):
        for route, full in routes:
            n = len(full)
            single(await server.get(route, headers={"Range": "bytes=500-999,0-99,50-520"}), full, 0, 1000)
            single(await server.get(route, headers={"Range": "bytes=0-99,100-199,200-299"}), full, 0, 300)
            single(await server.get(route, headers={"Range": f"bytes=-100,{n - 300}-"}), full, n - 300, n)


async def test_ranges_apart_are_multipart_in_the_order_asked(archive) -> None:
    async with bodies(archive) as (server, routes):
        for route, full in routes:
            response = await server.get(route, headers={"Range": "bytes=900-999,0-9,5-19,-10"})
            assert response.status_code == 206
            n = len(full)
            want = [((900, 1000), full[900:1000]), ((0, 20), full[0:20]), ((n - 10, n), full[n - 10 :])]
            assert parts_of(response) == want, route
            assert int(response.headers["content-length"]) == len(response.content)


async def test_no_answer_is_longer_than_the_body_and_its_part_heads(archive) -> None:
    """Whole ranges, overlapping halves and small ranges in one header: each byte at most once."""
    async with bodies(archive) as (server, routes):
        for route, full in routes:
            n = len(full)
            specs = ["0-", f"{n // 2}-", f"-{n // 2 + 1}", "0-9", "20-29", "40-49", *["0-"] * 10]
            single(await server.get(route, headers={"Range": "bytes=" + ",".join(specs)}), full, 0, n)
            # 12 ranges apart, and 4 copies of one inside the first: 12 parts, no byte twice
            apart = [f"{i * 100}-{i * 100 + 9}" for i in range(12)] + ["0-5"] * 4
            response = await server.get(route, headers={"Range": "bytes=" + ",".join(apart)})
            parts = parts_of(response)
            assert [span for span, _ in parts] == [(i * 100, i * 100 + 10) for i in range(12)]
            assert all(data == full[start:end] for (start, end), data in parts)
            heads = len(response.content) - 120
            assert sum(len(data) for _, data in parts) == 120 and heads < 12 * 200
            # more than 16 asked: the header is ignored, the body once
            seventeen = await server.get(route, headers={"Range": "bytes=" + ",".join(["0-"] * 17)})
            assert seventeen.status_code == 200 and seventeen.content == full
