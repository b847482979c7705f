"""The .ptd route and the ExecuTorch program routes through the app in process (no socket): HTTP
semantics (length before the first byte, ranges across segment boundaries and the header, HEAD, strong
ETag, conditionals), skipped tensors and errors. s3:// archives and the CLI are in test_ptd_service.py."""

from __future__ import annotations

import pathlib
from urllib.parse import unquote

import pytest

import reader
from reader.formats import ptd
from testing import ptd_files
from testing.paths import ARCHIVES
from testing.ptd_files import PROGRAM, library_ptd
from testing.service import in_process, make_app, run
from testing.torch_oracle import needs_torch

carrying = ptd_files.carrying  # the fixture: an archive carrying ExecuTorch program files

pytestmark = pytest.mark.unit


def boundaries(plan: ptd.PtdPlan) -> list[int]:
    """Offsets where the file changes from one piece to the next: header, FlatBuffer, padding, segments."""
    edges = {8, 8 + 40, 48 + 8, len(plan.head)}
    for segment in plan.segments:
        edges |= {segment.offset, segment.offset + segment.size}
    return sorted(edge for edge in edges if 0 < edge < plan.length)


def test_ptd_route_bytes_and_ranges_across_every_boundary() -> None:
    plan, expected = run(library_ptd(ARCHIVES / "layouts.pt2"))

    async def check() -> None:
        async with in_process(make_app()) as client:
            whole = await client.get("/archives/layouts/ptd")
            assert whole.status_code == 200 and whole.content == expected
            assert int(whole.headers["content-length"]) == plan.length
            etag = whole.headers["etag"]
            assert etag.startswith('"') and whole.headers["accept-ranges"] == "bytes"
            for edge in boundaries(plan):
                low, high = max(edge - 3, 0), min(edge + 2, plan.length - 1)
                part = await client.get("/archives/layouts/ptd", headers={"range": f"bytes={low}-{high}"})
                assert part.status_code == 206, edge
                assert part.headers["content-range"] == f"bytes {low}-{high}/{plan.length}"
                assert part.content == expected[low : high + 1], edge
            # one range over the header, the FlatBuffer and the first two segments
            span = plan.segments[1].offset + 7
            part = await client.get("/archives/layouts/ptd", headers={"range": f"bytes=0-{span}"})
            assert part.content == expected[: span + 1]
            suffix = await client.get("/archives/layouts/ptd", headers={"range": "bytes=-100"})
            assert suffix.content == expected[-100:]
            beyond = await client.get("/archives/layouts/ptd", headers={"range": f"bytes={plan.length}-"})
            assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{plan.length}"

            head = await client.head("/archives/layouts/ptd")
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-length"] == str(plan.length) and head.headers["etag"] == etag
            assert (
                await client.get("/archives/layouts/ptd", headers={"if-none-match": etag})
            ).status_code == 304
            stale = await client.get(
                "/archives/layouts/ptd", headers={"range": "bytes=0-9", "if-range": '"x"'}
            )
            assert stale.status_code == 200 and stale.content == expected
            # another selection or alignment is another file, with another ETag
            aligned = await client.get("/archives/layouts/ptd", params={"alignment": 64})
            assert aligned.status_code == 200 and aligned.headers["etag"] != etag
            assert aligned.content == run_in_thread(library_ptd, ARCHIVES / "layouts.pt2", None, 64)

    run(check())


def run_in_thread(function, *args):
    """A coroutine's result from a fresh loop (the caller's loop is busy serving)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run, function(*args)).result()[1]


def test_ptd_route_selection_skips_and_errors() -> None:
    async def check() -> None:
        async with in_process(make_app()) as client:
            listed = await client.get("/archives/dtypes/ptd")
            skipped = [unquote(n) for n in listed.headers["x-pt2serve-skipped"].split(",")]
            assert skipped == ["t_complex32", "t_complex64", "t_complex128", "t_float8_e8m0fnu"]
            named = await client.get("/archives/dtypes/ptd", params=[("name", "t_int8"), ("name", "weight")])
            assert named.status_code == 200 and "x-pt2serve-skipped" not in named.headers
            plan = ptd.plan_ptd(
                [await_layout(ARCHIVES / "dtypes.pt2", n) for n in ("t_int8", "weight")],
            )
            assert len(named.content) == plan.length and named.content.startswith(plan.head)
            refused = await client.get("/archives/dtypes/ptd", params={"name": "t_complex64"})
            assert refused.status_code == 422 and "t_complex64" in refused.json()["error"]["message"]
            bad = await client.get("/archives/dtypes/ptd", params={"alignment": 48})
            assert bad.status_code == 422 and "alignment" in bad.json()["error"]["message"]
            two = await client.get("/archives/two/ptd", params={"model": "decoder", "prefix": "proj."})
            assert two.status_code == 200
            assert (await client.get("/archives/two/ptd", params={"model": "nope"})).status_code == 404
            assert (await client.get("/archives/nope/ptd")).status_code == 404
            pickled = await client.get("/archives/pickled/ptd")  # custom objects, subclasses, symbolic sizes
            names = {unquote(n) for n in pickled.headers["x-pt2serve-skipped"].split(",")}
            assert names == {"sub", "custom", "symbolic"}

    run(check())


def await_layout(path: pathlib.Path, name: str) -> reader.TensorInfo:
    async def layout():
        async with reader.open_archive(path) as ar:
            return ar.layout(name)

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run, layout()).result()


@needs_torch
def test_executorch_files_listed_and_served_by_range(carrying: pathlib.Path) -> None:
    async def check() -> None:
        async with reader.open_archive(carrying) as ar:
            assert [(f.name, f.size) for f in ar.executorch_files] == [
                ("extra/notes.bin", 5),
                ("model.pte", len(PROGRAM)),
            ]
            assert await ar.executorch_file("model.pte").read() == PROGRAM
            with pytest.raises(reader.FileNotFound, match=r"other\.pte"):
                ar.executorch_file("other.pte")
        async with in_process(make_app([f"carry={carrying}", f"plain={ARCHIVES / 'layouts.pt2'}"])) as client:
            archives = {a["id"]: a for a in (await client.get("/archives")).json()["archives"]}
            assert archives["carry"]["executorch"] == ["extra/notes.bin", "model.pte"]
            assert archives["plain"]["executorch"] == []
            listing = (await client.get("/archives/carry/executorch")).json()
            url = {f["name"]: f["url"] for f in listing["files"]}["model.pte"]
            assert url == f"/archives/carry@{listing['version']}/executorch/model.pte"  # a versioned URL
            whole = await client.get(url)
            assert whole.content == PROGRAM and whole.headers["content-length"] == str(len(PROGRAM))
            etag = whole.headers["etag"]
            part = await client.get(url, headers={"range": "bytes=1000-199999"})
            assert part.status_code == 206 and part.content == PROGRAM[1000:200000]
            head = await client.head(url)
            assert head.content == b"" and head.headers["content-length"] == str(len(PROGRAM))
            assert (await client.get(url, headers={"if-none-match": etag})).status_code == 304
            nested = await client.get("/archives/carry/executorch/extra/notes.bin")
            assert nested.content == b"hello"
            missing = await client.get("/archives/carry/executorch/nope.pte")
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"
            assert (await client.get("/archives/plain/executorch")).json()["files"] == []

    run(check())
