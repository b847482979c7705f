"""Archives over HTTP against a server the tests own: same index and bytes as local, few requests,
and for every misbehaviour either exact bytes or the right typed error within the time budget."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest

import reader
from reader.sources import HttpOptions
from testing.faultserver import (
    ChangeObject,
    Chunked,
    Drip,
    DropAfter,
    FaultServer,
    Hang,
    IgnoreRange,
    NoContentLength,
    RefuseSuffix,
    ResetConnection,
    ShortBody,
    StallAfter,
    Status,
    WrongContentRange,
)
from testing.paths import ARCHIVES

pytestmark = pytest.mark.emulator

FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=2.0, time_budget=10.0)
BIG = "many.pt2"  # 880 KB, 1100 tensors, an 80 KiB central directory


@pytest.fixture
async def server():
    async with FaultServer() as srv:
        for name in ("layouts.pt2", "dtypes.pt2", "many.pt2", "many_deflate.pt2", "two_models.pt2"):
            srv.put("/" + name, (ARCHIVES / name).read_bytes())
        yield srv
        assert not srv.errors


async def _bytes(
    ar: reader.Archive, name: str, model: str | None = None, order: reader.Order = "default", **chunks
) -> bytes:
    tensor = ar.tensor(name, model=model, order=order)
    return b"".join([bytes(chunk) async for chunk in tensor.chunks(**chunks)])


@pytest.mark.parametrize("name", ["layouts.pt2", "dtypes.pt2", "many_deflate.pt2", "two_models.pt2"])
async def test_remote_index_and_bytes_equal_local(server, name: str) -> None:
    async with (
        reader.open_archive(ARCHIVES / name) as local,
        reader.open_archive(server.url("/" + name), tail_size=4096, http_options=FAST) as remote,
    ):
        assert [t.to_dict() for t in remote.tensors()] == [t.to_dict() for t in local.tensors()]
        for info in local.tensors()[::7]:
            if not info.readable:
                continue
            for order in ("default", "contiguous"):
                want = await local.read(info.name, model=info.model, order=order)
                assert await remote.read(info.name, model=info.model, order=order) == want
                assert await _bytes(remote, info.name, model=info.model, order=order) == want


async def test_open_takes_two_round_trips_when_the_directory_fits_the_tail(server) -> None:
    async with reader.open_archive(server.url("/" + BIG), http_options=FAST) as ar:
        # the suffix read (256 KiB) holds the 80 KiB directory; the weights and constants
        # configs are adjacent and come in one more request
        assert ar.stats["open"]["requests"] == 2
        configs = sum(e.size for name, e in ar._entries.items() if name.endswith("_config.json"))
        assert ar.stats["open"]["bytes"] <= (256 << 10) + configs + 4096  # tail + configs + headers
    ranges = [record.range for record in server.requests("/" + BIG)]
    assert ranges[0] == f"bytes=-{256 << 10}"


async def test_open_takes_three_round_trips_when_the_directory_is_bigger_than_the_tail(server) -> None:
    async with reader.open_archive(server.url("/" + BIG), tail_size=16 << 10, http_options=FAST) as ar:
        log = server.requests("/" + BIG)
        # suffix, then exactly one read for the rest of the directory, then the configs
        # (two ranges 350 KiB apart, fetched in parallel: the third round trip)
        assert [r.range.startswith("bytes=-") for r in log[:2]] == [True, False]
        assert ar.stats["open"]["requests"] == 4 == len(log)
        assert log[1].range.endswith(f"-{len(server.objects['/' + BIG].data) - (16 << 10) - 1}")


async def test_a_tensor_read_is_one_request_with_its_local_header(server) -> None:
    async with reader.open_archive(server.url("/" + BIG), tail_size=16 << 10, http_options=FAST) as ar:
        before = len(server.log)
        names = [t.name for t in ar.tensors()]
        await ar.read(names[3])
        assert len(server.log) == before + 1
        await _bytes(ar, names[4])
        assert len(server.log) == before + 2
        assert ar.stats["data"]["requests"] == 2


async def test_small_archive_is_served_from_the_open_read(server) -> None:
    async with reader.open_archive(server.url("/layouts.pt2"), http_options=FAST) as ar:
        for info in ar.tensors():
            if info.readable:
                await ar.read(info.name)
        assert len(server.log) == 1  # the whole 33 KB archive came with the suffix read


async def test_server_errors_and_resets_are_retried(server) -> None:
    server.faults += [Status(503, times=2, method="GET"), ResetConnection(times=1, after=2)]
    async with reader.open_archive(server.url("/" + BIG), tail_size=4096, http_options=FAST) as ar:
        name = ar.tensors()[10].name
        server.faults.append(Status(500, times=1))
        async with reader.open_archive(ARCHIVES / BIG) as local:
            assert await ar.read(name) == await local.read(name)
    assert [r.status for r in server.log[:4]] == [503, 503, None, 206]  # None: connection reset


async def test_429_retry_after_is_honoured(server) -> None:
    server.faults.append(Status(429, headers={"Retry-After": "1"}, times=1))
    started = time.monotonic()
    async with reader.open_archive(server.url("/layouts.pt2"), http_options=FAST) as ar:
        assert ar.models == ["model"]
    assert time.monotonic() - started >= 1.0  # waited as told (a lower bound, not a speed check)
    assert [r.status for r in server.log] == [429, 206]


async def test_body_cut_mid_stream_resumes_from_the_next_byte(server) -> None:
    async with (
        reader.open_archive(server.url("/layouts.pt2"), tail_size=1024, http_options=FAST) as ar,
        reader.open_archive(ARCHIVES / "layouts.pt2") as local,
    ):
        want = await local.read("conv.weight")  # 864 bytes
        server.faults.append(DropAfter(100, times=2))
        assert await _bytes(ar, "conv.weight", chunk_size=64) == want
        resumed = server.log[-3:]
        assert [r.fault for r in resumed] == ["DropAfter", "DropAfter", None]
        starts = [int(r.range.split("=")[1].split("-")[0]) for r in resumed]
        assert starts[1] == starts[0] + 100 and starts[2] == starts[1] + 100  # none twice, none skipped


async def test_stalled_body_times_out_and_resumes(server) -> None:
    options = HttpOptions(backoff_base=0.01, read_timeout=0.3, time_budget=10.0)
    async with reader.open_archive(server.url("/dtypes.pt2"), http_options=options) as ar:
        pass
    server.put("/dtypes.pt2", (ARCHIVES / "dtypes.pt2").read_bytes())
    server.faults.append(StallAfter(500, times=1))
    async with reader.open_archive(server.url("/dtypes.pt2"), tail_size=1024, http_options=options) as ar:
        assert len(ar.tensors()) == 22


async def test_range_ignored_small_object_is_accepted_in_one_request(server) -> None:
    server.faults.append(IgnoreRange(times=None))
    async with reader.open_archive(server.url("/layouts.pt2"), http_options=FAST) as ar:
        assert await ar.read("transposed")
    assert len(server.log) == 1


async def test_range_ignored_big_object_is_refused_without_downloading_it(server) -> None:
    server.put("/huge.pt2", bytes(64 << 20))
    server.faults.append(IgnoreRange(times=None))
    options = HttpOptions(full_body_cap=1 << 20)
    # refused on its Content-Length, before reading any of the body
    with pytest.raises(reader.SourceError, match=f"ignores Range and is {64 << 20} bytes"):
        await reader.open_archive(server.url("/huge.pt2"), http_options=options)


@pytest.mark.parametrize(
    ("fault", "complaint"),
    [(WrongContentRange(shift=4), "server sent"), (ShortBody(missing=3), "Content-Length")],
    ids=["wrong Content-Range", "short body"],
)
async def test_wrong_range_or_short_body_is_refused(server, fault, complaint: str) -> None:
    async with reader.open_archive(server.url("/" + BIG), tail_size=4096, http_options=FAST) as ar:
        name = ar.tensors()[5].name
        server.faults.append(copy.deepcopy(fault))  # a fresh budget for each body path
        with pytest.raises(reader.SourceError, match=complaint):
            await ar.read(name)


@pytest.mark.parametrize("fault", [Chunked(chunk_size=1000, times=None), NoContentLength(times=None)])
async def test_chunked_and_unsized_bodies_give_exact_bytes(server, fault) -> None:
    server.faults.append(copy.deepcopy(fault))
    async with (
        reader.open_archive(server.url("/" + BIG), tail_size=4096, http_options=FAST) as ar,
        reader.open_archive(ARCHIVES / BIG) as local,
    ):
        for info in ar.tensors()[::97]:
            assert await ar.read(info.name) == await local.read(info.name)


async def test_object_replaced_under_a_read_raises_source_changed(server) -> None:
    async with reader.open_archive(server.url("/" + BIG), tail_size=4096, http_options=FAST) as ar:
        name = ar.tensors()[7].name
        assert await ar.revalidate()
        server.faults.append(ChangeObject((ARCHIVES / "many_deflate.pt2").read_bytes()))
        with pytest.raises(reader.SourceChanged):
            await ar.read(name)
        assert server.log[-1].status == 412
        assert not await ar.revalidate()


async def test_refused_suffix_range_falls_back_to_head(server) -> None:
    server.faults.append(RefuseSuffix(code=501, times=None))
    async with reader.open_archive(server.url("/two_models.pt2"), http_options=FAST) as ar:
        assert ar.models == ["decoder", "encoder"]
    assert [r.method for r in server.log[:3]] == ["GET", "HEAD", "GET"]


async def test_hanging_server_fails_within_the_budget(server) -> None:
    server.faults.append(Hang(times=None))
    options = HttpOptions(read_timeout=0.2, max_attempts=3, backoff_base=0.01)
    with pytest.raises(reader.SourceError, match="giving up after 3 attempts"):
        await asyncio.wait_for(reader.open_archive(server.url("/layouts.pt2"), http_options=options), 10)


async def test_slow_drip_exceeding_the_time_budget_is_an_error(server) -> None:
    server.faults.append(Drip(chunk_size=64, interval=0.1, times=None))
    options = HttpOptions(read_timeout=5, time_budget=0.5)
    with pytest.raises(reader.SourceError):
        await asyncio.wait_for(reader.open_archive(server.url("/layouts.pt2"), http_options=options), 20)


@pytest.mark.parametrize(("status", "message"), [(404, "not found"), (403, "access denied")])
async def test_missing_or_forbidden_objects(server, status: int, message: str) -> None:
    server.faults.append(Status(status, times=None))
    with pytest.raises(reader.SourceError, match=message):
        await reader.open_archive(server.url("/layouts.pt2"), http_options=FAST)
    assert len(server.log) == 1  # not retried


async def test_weak_etag_is_checked_instead_of_if_match(server) -> None:
    server.put("/weak.pt2", (ARCHIVES / BIG).read_bytes(), etag='W/"v1"')
    async with reader.open_archive(server.url("/weak.pt2"), tail_size=4096, http_options=FAST) as ar:
        name = ar.tensors()[3].name
        await ar.read(name)
        assert "if-match" not in server.log[-1].headers
        server.put("/weak.pt2", (ARCHIVES / BIG).read_bytes(), etag='W/"v2"')
        with pytest.raises(reader.SourceChanged):
            await ar.read(ar.tensors()[4].name)


async def test_query_string_is_kept_for_requests_but_hidden_from_the_location(server) -> None:
    url = server.url("/layouts.pt2") + "?X-Amz-Signature=secret"
    async with reader.open_archive(url, http_options=FAST) as ar:
        assert "secret" not in ar.source.location
        assert server.log[0].target.endswith("?X-Amz-Signature=secret")


async def test_read_many_coalesces_neighbouring_tensors_into_one_request(server) -> None:
    async with (
        reader.open_archive(server.url("/" + BIG), tail_size=4096, http_options=FAST) as ar,
        reader.open_archive(ARCHIVES / BIG) as local,
    ):
        names = [t.name for t in ar.tensors()[200:260]]
        before = len(server.log)
        got = await ar.read_many(names)
        assert len(server.log) == before + 1  # 60 neighbouring payloads, one range request
        assert got == {name: await local.read(name) for name in names}
        again = await ar.read_many(names[:3] + names[-3:], order="contiguous")
        assert again == {name: await local.read(name, order="contiguous") for name in names[:3] + names[-3:]}


async def test_read_many_handles_views_zeros_and_deflate(server) -> None:
    for name in ("layouts.pt2", "many_deflate.pt2"):
        async with (
            reader.open_archive(server.url("/" + name), tail_size=2048, http_options=FAST) as ar,
            reader.open_archive(ARCHIVES / name) as local,
        ):
            names = [t.name for t in ar.tensors() if t.readable][:40]
            for order in ("default", "contiguous"):
                got = await ar.read_many(names, order=order)
                assert got == {n: await local.read(n, order=order) for n in names}


async def test_http2_option_and_an_object_that_shrank(server) -> None:
    async with reader.open_archive(
        server.url("/" + BIG), tail_size=4096, http_options=HttpOptions(http2=True)
    ) as ar:
        assert len(ar.tensors()) == 1100
        etag = server.etag("/" + BIG)
        server.put("/" + BIG, b"x" * 1000, etag=etag)  # same validator, fewer bytes: a broken server
        with pytest.raises(reader.SourceChanged):
            await ar.read(ar.tensors()[-1].name)
