"""Column blocks (dim-1 shards) over HTTP as the parts of multi-range requests.

nginx answers several ranges a request with `multipart/byteranges`: a rank then reads its runs and
about its share of bytes. A server without multi-range answers (FaultServer: 200 and the whole body)
still gives the same arrays, through single ranges, its whole body never read. A multipart answer
whose part names a range not asked, or is shorter than its Content-Range says, is an error, never
wrong bytes (a small server below serves such answers). The parser (sans-IO) on its own: every
split of a body into chunks gives the same pieces; each bad body its error.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import reader
from reader.errors import SourceChanged, SourceError
from reader.sources import HttpOptions
from reader.sources.multirange import (
    HEAD_WINDOW,
    MAX_RANGE_HEADER,
    ByteRangesParser,
    batches,
    boundary_of,
    layout,
    range_header,
)
from testing.faultserver import FaultServer
from testing.multipart_server import MultipartServer
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

# -- the parser, sans-IO ---------------------------------------------------------------------------

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


# -- shards over real servers ----------------------------------------------------------------------


def _matrices(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, np.ndarray]]:
    """Four 256 x 1024 float32 matrices (a column block at world 4: 256 runs of 1 KiB, 3 KiB apart),
    one 64 x 64 (runs of 64 bytes) and a small vector."""
    rng = np.random.default_rng(35)
    arrays = {f"layer{i}.weight": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(4)}
    arrays["small.weight"] = rng.standard_normal((64, 64), dtype=np.float32)
    arrays["norm"] = rng.standard_normal(1024, dtype=np.float32)
    path = tmp_path / "matrices.pt2"
    write_pt2(path, {name: (7, list(array.shape), array.tobytes()) for name, array in arrays.items()})
    return path, arrays


def _block(array: np.ndarray, rank: int, world: int, dim: int) -> np.ndarray:
    step = -(-array.shape[dim] // world)
    index = [slice(None)] * array.ndim
    index[dim] = slice(min(rank * step, array.shape[dim]), min((rank + 1) * step, array.shape[dim]))
    return array[tuple(index)]


DIMS = {"layer*": 1, "small.weight": 1}


async def _ranks(location: str, **options) -> list[tuple[dict[str, np.ndarray], dict]]:
    out = []
    for rank in range(4):
        async with reader.open_archive(location, **options) as archive:
            arrays = await archive.load(shard=reader.Shard(rank, 4, DIMS))
            out.append((arrays, dict(archive.stats["data"])))
    return out


def _check_blocks(ranks, truth: dict[str, np.ndarray]) -> None:
    for rank, (arrays, _) in enumerate(ranks):
        for name, array in truth.items():
            want = array if name == "norm" else _block(array, rank, 4, 1)
            assert np.array_equal(arrays[name], want), (name, rank)
    for name, array in truth.items():  # the ranks put together are the whole
        if name != "norm":
            assert np.array_equal(np.concatenate([arrays[name] for arrays, _ in ranks], axis=1), array)


def _share(truth: dict[str, np.ndarray]) -> int:
    return sum(array.nbytes for name, array in truth.items() if name != "norm") // 4 + truth["norm"].nbytes


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    from testing.servers import NginxProcess, nginx_binary

    if nginx_binary() is None:
        pytest.skip("nginx is not installed")
    root = tmp_path_factory.mktemp("nginx")
    with NginxProcess(root) as server:
        yield root, server


async def test_over_nginx_a_rank_reads_its_runs_as_parts(nginx, tmp_path) -> None:
    root, server = nginx
    path, truth = _matrices(tmp_path)
    (root / "m.pt2").write_bytes(path.read_bytes())
    server.take_log()
    ranks = await _ranks(server.url("m.pt2"))
    _check_blocks(ranks, truth)
    share = _share(truth)
    for _, stats in ranks:
        # the runs, each part's ~110 bytes of framing (a 1 KiB run: +11%; the 64-byte runs of
        # small.weight: +170%) and the local headers; rows read whole would be 4x
        assert share <= stats["bytes"] <= 1.2 * share, (stats, share)
        assert stats["requests"] <= 12, stats  # the probe, the headers, a multi-range request a weight
    multi = [entry for entry in server.take_log() if entry["range"] and entry["range"].count(",") > 10]
    assert multi and all(entry["status"] == 206 for entry in multi)


async def test_with_multi_range_off_a_rank_reads_the_rows_and_asks_for_one_range(nginx, tmp_path) -> None:
    root, server = nginx
    path, truth = _matrices(tmp_path)
    (root / "rows-off.pt2").write_bytes(path.read_bytes())
    server.take_log()
    ranks = await _ranks(server.url("rows-off.pt2"), http_options=HttpOptions(multi_range=False))
    _check_blocks(ranks, truth)
    assert not [entry for entry in server.take_log() if entry["range"] and "," in entry["range"]]
    for _, stats in ranks:  # the rows its runs lie in: about 4x its share of the layers
        assert 3 * _share(truth) <= stats["bytes"] <= 4 * _share(truth) + (64 << 10), stats


async def test_a_server_without_multi_range_gives_the_same_blocks(tmp_path) -> None:
    path, truth = _matrices(tmp_path)
    options = HttpOptions(parallel_parts=1)
    async with FaultServer() as server:  # answers several ranges with 200 and the whole object
        server.put("/m.pt2", path.read_bytes())
        ranks = await _ranks(server.url("/m.pt2"), http_options=options)
        multi = [entry for entry in server.log if entry.range and "," in entry.range]
    _check_blocks(ranks, truth)
    assert len(multi) == 4  # asked once a rank (each rank opens its own source)
    for _, stats in ranks:  # the rows the runs lie in (4x), never the 200's whole body
        assert stats["bytes"] <= 4 * _share(truth) + 64 << 10, stats


# -- a server whose multipart answers are wrong ----------------------------------------------------


@pytest.mark.parametrize(("fault", "message"), [("wrong-range", "not asked"), ("short", "not the length")])
async def test_a_wrong_or_short_part_is_an_error_not_wrong_bytes(tmp_path, fault: str, message: str) -> None:
    path, _ = _matrices(tmp_path)
    async with (
        MultipartServer(path.read_bytes(), fault) as server,
        reader.open_archive(server.url) as archive,
    ):
        with pytest.raises(SourceError, match=message):
            await archive.load(shard=reader.Shard(1, 4, DIMS))


async def test_the_small_server_serves_right_answers_right(tmp_path) -> None:
    """The server above without a fault: the same blocks (so the errors above are the faults')."""
    path, truth = _matrices(tmp_path)
    async with MultipartServer(path.read_bytes(), "none") as server:
        ranks = await _ranks(server.url)
    _check_blocks(ranks, truth)


@pytest.mark.parametrize("dim", [0, 1])
async def test_predicted_offsets_a_header_refutes_in_a_multi_range_answer(tmp_path, dim: int) -> None:
    """Where the server answers several ranges a request, the headers, the small tensors and the
    blocks come as the parts of a few requests; a header that refutes its entry's predicted data
    offset still gets the block read again at the right one."""
    from testing.aligned_pt2 import write_aligned_pt2

    rng = np.random.default_rng(35)
    truth = {f"layer{i}.weight": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(4)}
    truth["norm"] = rng.standard_normal(1024, dtype=np.float32)
    path = tmp_path / "m.pt2"
    write_aligned_pt2(path, truth, shifted={1, 3})
    async with MultipartServer(path.read_bytes(), "none") as server:
        for rank in range(4):
            async with reader.open_archive(server.url) as archive:
                arrays = await archive.load(shard=reader.Shard(rank, 4, {"layer*": dim}))
            for name, array in truth.items():
                want = array if name == "norm" else _block(array, rank, 4, dim)
                assert np.array_equal(arrays[name], want), (name, rank)


async def test_over_nginx_a_dim_0_rank_reads_its_share_in_a_few_requests(nginx, tmp_path) -> None:
    root, server = nginx
    path, truth = _matrices(tmp_path)
    (root / "rows.pt2").write_bytes(path.read_bytes())
    for rank in range(4):
        async with reader.open_archive(server.url("rows.pt2")) as archive:
            arrays = await archive.load(shard=reader.Shard(rank, 4, {"layer*": 0, "small.weight": 0}))
            stats = archive.stats["data"]
        for name, array in truth.items():
            assert np.array_equal(arrays[name], array if name == "norm" else _block(array, rank, 4, 0))
        share = _share(truth)
        assert share <= stats["bytes"] <= share + 16 << 10, stats  # + the headers and each part's head
        assert stats["requests"] <= 10, stats  # the probe and up to 8 multi-range requests


@pytest.mark.parametrize("fast_connection", [1.0, 1e18, None])
async def test_a_fast_connection_takes_the_spans_after_a_timed_probe_in_one_request(
    nginx, tmp_path, fast_connection
) -> None:
    """A dim-0 rank's spans: small ones first, alone and timed; at least `fast_connection` fast (1 byte/s:
    always), the rest as one multi-range request; never that fast (1e18), or not asked (None), as
    several at once."""
    from testing.aligned_pt2 import write_aligned_pt2

    root, server = nginx
    _, truth = _matrices(tmp_path)
    write_aligned_pt2(root / "probe.pt2", truth)  # laid out as torch lays it: the blocks come at once
    options = HttpOptions(part_size=128 << 10, fast_connection=fast_connection)
    async with reader.open_archive(server.url("probe.pt2"), http_options=options) as archive:
        server.take_log()
        arrays = await archive.load(shard=reader.Shard(1, 4, {"layer*": 0, "small.weight": 0}))
    for name, array in truth.items():
        assert np.array_equal(arrays[name], array if name == "norm" else _block(array, 1, 4, 0))
    log = server.take_log()[1:]  # (after the multi-range probe)
    blocks = [entry for entry in log if entry["bytes"] >= 256 << 10]  # requests with the layers' blocks
    if fast_connection == 1.0:
        assert len(log) == 2, log  # the small spans, timed; then the rest
        assert len(blocks) == 1 and blocks[0]["range"].count(",") == 3, log  # the 4 blocks, one request
    else:
        assert len(blocks) == 4, log  # at once, in shares


async def test_a_single_206_to_a_multi_range_request_is_seen_and_single_ranges_follow(tmp_path) -> None:
    path, truth = _matrices(tmp_path)
    async with MultipartServer(path.read_bytes(), "single-206") as server:
        ranks = await _ranks(server.url)
    _check_blocks(ranks, truth)
    for _, stats in ranks:  # the rows the runs lie in, as a server of one range a request gives them
        assert stats["bytes"] <= 4 * _share(truth) + (64 << 10), stats
