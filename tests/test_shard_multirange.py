"""Column blocks (dim-1 shards) over HTTP as the parts of multi-range requests.

nginx answers several ranges a request with `multipart/byteranges`: a rank then reads its runs and
about its share of bytes. A server without multi-range answers (FaultServer: 200 and the whole body)
still gives the same arrays, through single ranges, its whole body never read. A multipart answer
whose part names a range not asked, or is shorter than its Content-Range says, is an error, never
wrong bytes (a small server below serves such answers). The parser (sans-IO) on its own:
test_multirange_answers.py.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import reader
from reader.errors import SourceError
from reader.sources import HttpOptions
from testing.faultserver import FaultServer
from testing.multipart_server import MultipartServer
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

# -- the parser, sans-IO ---------------------------------------------------------------------------


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
# Parts that cost no CPU: a column block is always read as its runs (at loopback rates their rows may
# cost less, and are read instead: see test_over_nginx_a_rank_reads_rows_where_parts_cost_more).
PARTS = HttpOptions(part_cost=0.0)


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
    ranks = await _ranks(server.url("m.pt2"), http_options=PARTS)
    _check_blocks(ranks, truth)
    share = _share(truth)
    for _, stats in ranks:
        # the runs, each part's ~110 bytes of framing (a 1 KiB run: +11%; the 64-byte runs of
        # small.weight: +170%) and the local headers; rows read whole would be 4x
        assert share <= stats["bytes"] <= 1.2 * share, (stats, share)
        assert stats["requests"] <= 12, stats  # the probe, the headers, a multi-range request a weight
    multi = [entry for entry in server.take_log() if entry["range"] and entry["range"].count(",") > 10]
    assert multi and all(entry["status"] == 206 for entry in multi)


async def test_over_nginx_a_rank_reads_rows_where_parts_cost_more(nginx, tmp_path) -> None:
    """A part priced dear (1 s of CPU): the rows the column blocks lie in are read, one range a
    request, though the server answers several (the timed read and the headers still use them)."""
    root, server = nginx
    path, truth = _matrices(tmp_path)
    (root / "dear.pt2").write_bytes(path.read_bytes())
    server.take_log()
    ranks = await _ranks(server.url("dear.pt2"), http_options=HttpOptions(part_cost=1.0))
    _check_blocks(ranks, truth)
    assert not [entry for entry in server.take_log() if entry["range"] and entry["range"].count(",") > 10]
    for _, stats in ranks:  # the rows (about 4x the share of the layers) and the timed read (<= 1 MiB)
        assert 3 * _share(truth) <= stats["bytes"] <= 5 * _share(truth) + (64 << 10), stats


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
        reader.open_archive(server.url, http_options=PARTS) as archive,
    ):
        with pytest.raises(SourceError, match=message):
            await archive.load(shard=reader.Shard(1, 4, DIMS))


async def test_the_small_server_serves_right_answers_right(tmp_path) -> None:
    """The server above without a fault: the same blocks (so the errors above are the faults')."""
    path, truth = _matrices(tmp_path)
    async with MultipartServer(path.read_bytes(), "none") as server:
        ranks = await _ranks(server.url, http_options=PARTS)
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
