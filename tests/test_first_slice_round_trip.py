"""The first slice of a tensor from a store that answers one range a request costs one round trip: the
entry's local header and the slice's bytes at their predicted place are requested together (the
server, slowed down, sees the second request arrive before it answered the first); a prediction the
header contradicts is read again from where the header says, never handed out. Through the library,
the service's `.../data?slice=` route and `reader.safe_open`'s `get_slice`."""

from __future__ import annotations

import asyncio
import pathlib

import httpx
import numpy as np
import pytest
import torch

import reader
from reader import zipfmt
from reader.sources import HttpOptions
from testing.aligned_pt2 import write_aligned_pt2
from testing.faultserver import FaultServer, RequestRecord
from testing.service import make_app, real_server

pytestmark = pytest.mark.emulator

ROWS, COLS = 2048, 512  # 4 MiB of float32: a row past the first 64 KiB is far from the local header
ROW = COLS * 4
PICK = 1500
DELAY = 0.2  # seconds the server waits before answering each request
FAST = HttpOptions(backoff_base=0.01, backoff_cap=0.05, read_timeout=10.0, time_budget=30.0)
TABLE = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
OTHER = -TABLE[:, ::-1].copy()


class Table(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.from_numpy(TABLE.copy()))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.table[rows]


@pytest.fixture(scope="module")
def torch_written(tmp_path_factory) -> pathlib.Path:
    """Exported and saved by torch: every entry's data where torch's writer puts it."""
    path = tmp_path_factory.mktemp("one_round") / "table.pt2"
    torch.export.save(torch.export.export(Table(), (torch.tensor([0, 1]),)), path)
    return path


@pytest.fixture(scope="module")
def shifted(tmp_path_factory) -> pathlib.Path:
    """Laid out as torch lays it, but `table`'s data 64 bytes later than torch's writer puts it (a
    longer local extra field): the prediction is wrong there, right for `other`."""
    path = tmp_path_factory.mktemp("one_round") / "shifted.pt2"
    write_aligned_pt2(path, {"table": TABLE, "other": OTHER}, shifted={0})
    return path


def _payload_entry(ar: reader.Archive, name: str) -> zipfmt.ZipEntry:
    return ar._entries[ar.layout(name).storage.entry]


def _one_round_trip(sent: list[RequestRecord]) -> None:
    """The local header and the bytes, two requests in flight together."""
    assert len(sent) == 2, [record.range for record in sent]
    assert sent[1].unanswered_before == 1  # the second arrived before the first was answered


def _mispredicted(sent: list[RequestRecord]) -> None:
    """The header and the predicted bytes together, then the bytes from where the header says."""
    assert len(sent) == 3, [record.range for record in sent]
    assert sent[1].unanswered_before == 1 and sent[2].unanswered_before == 0


async def test_a_torch_written_archive_gives_its_first_slice_in_one_round_trip(torch_written) -> None:
    async with FaultServer() as server:
        server.put("/table.pt2", torch_written.read_bytes())
        async with reader.open_archive(server.url("/table.pt2"), http_options=FAST) as ar:
            entry = _payload_entry(ar, "table")
            server.delay, opened = DELAY, len(server.log)
            row = await ar.read_numpy("table", index=PICK)
            assert row.tobytes() == TABLE[PICK].tobytes()
            sent = server.log[opened:]
            _one_round_trip(sent)
            assert ar.stats["data"]["requests"] == 2
            assert sum(record.body_bytes for record in sent) <= ROW + zipfmt.local_header_guess(entry)
            # the header confirmed the prediction: the offset is known, the next slice one request
            again = len(server.log)
            block = await ar.read_numpy("table", index=np.s_[PICK + 2 : PICK + 5, 7:])
            assert block.tobytes() == TABLE[PICK + 2 : PICK + 5, 7:].tobytes()
            assert len(server.log) - again == 1
        assert not server.errors


async def test_a_wrong_prediction_is_read_again_and_stops_predicting(shifted) -> None:
    async with FaultServer() as server:
        server.put("/shifted.pt2", shifted.read_bytes())
        async with reader.open_archive(server.url("/shifted.pt2"), http_options=FAST) as ar:
            entry = _payload_entry(ar, "table")
            server.delay, opened = DELAY, len(server.log)
            row = await ar.read_numpy("table", index=PICK)
            assert row.tobytes() == TABLE[PICK].tobytes()  # the header decided, not the prediction
            _mispredicted(server.log[opened:])
            assert ar._fetcher.offsets.known(entry.name) == zipfmt.predicted_data_offset(entry) + 64
            # this archive's writer is not torch's: the next entry's header comes first, then its bytes
            opened = len(server.log)
            column = await ar.read_numpy("other", index=(PICK, slice(None)))
            assert column.tobytes() == OTHER[PICK].tobytes()
            sent = server.log[opened:]
            assert len(sent) == 2 and sent[1].unanswered_before == 0
        assert not server.errors


@pytest.mark.parametrize("archive", ["torch_written", "shifted"])
async def test_the_service_slice_route_reads_ahead_of_the_header(archive, request) -> None:
    path: pathlib.Path = request.getfixturevalue(archive)
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())
        app = make_app([f"m={server.url('/m.pt2')}"], digests_ahead="off")
        async with real_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/archives/m/tensors")).status_code == 200  # opened
            server.delay, opened = DELAY, len(server.log)
            answer = await client.get("/archives/m/tensors/table/data", params={"slice": str(PICK)})
            assert answer.status_code == 200 and answer.content == TABLE[PICK].tobytes()
            (_one_round_trip if archive == "torch_written" else _mispredicted)(server.log[opened:])
            block = await client.get("/archives/m/tensors/table/data", params={"slice": "9:11,::3"})
            assert block.content == TABLE[9:11, ::3].tobytes()
        assert not server.errors


@pytest.mark.parametrize("archive", ["torch_written", "shifted"])
async def test_safe_open_get_slice_reads_ahead_of_the_header(archive, request) -> None:
    path: pathlib.Path = request.getfixturevalue(archive)
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())

        def first_slice() -> tuple[np.ndarray, list[RequestRecord]]:
            with reader.safe_open(server.url("/m.pt2"), "np", http_options=FAST) as handle:
                server.delay, opened = DELAY, len(server.log)
                block = handle.get_slice("table")[PICK : PICK + 2]
                return block, server.log[opened:]

        block, sent = await asyncio.to_thread(first_slice)
        assert np.asarray(block).tobytes() == TABLE[PICK : PICK + 2].tobytes()
        (_one_round_trip if archive == "torch_written" else _mispredicted)(sent)
        assert not server.errors


async def test_runs_far_apart_come_with_the_header_in_one_round_trip(torch_written) -> None:
    index = np.s_[1024::256, :16]  # four runs 512 KiB apart, none near the local header
    async with FaultServer() as server:
        server.put("/table.pt2", torch_written.read_bytes())
        async with reader.open_archive(server.url("/table.pt2"), http_options=FAST) as ar:
            server.delay, opened = DELAY, len(server.log)
            block = await ar.read_numpy("table", index=index)
            assert block.tobytes() == np.ascontiguousarray(TABLE[index]).tobytes()
            sent = server.log[opened:]
            assert len(sent) == 5  # the header and the four runs, all in flight together
            assert [record.unanswered_before for record in sent] == [0, 1, 2, 3, 4]
        assert not server.errors


async def test_a_header_longer_than_guessed_is_read_whole_before_the_bytes(tmp_path) -> None:
    path = tmp_path / "long.pt2"
    write_aligned_pt2(path, {"table": TABLE}, shifted={0}, shift=4096)  # a 4 KiB local extra field
    async with FaultServer() as server:
        server.put("/long.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/long.pt2"), http_options=FAST) as ar:
            opened = len(server.log)
            row = await ar.read_numpy("table", index=PICK)
            assert row.tobytes() == TABLE[PICK].tobytes()
            sent = server.log[opened:]
            # header guess and prediction together; the rest of the header; the row where it says
            assert len(sent) == 4, [record.range for record in sent]
        assert not server.errors


@pytest.mark.parametrize("archive", ["torch_written", "shifted"])
async def test_a_stream_begun_at_the_predicted_offset_is_exact(archive, request) -> None:
    """Many chunks: the first held until the header is in; a wrong start abandons the stream."""
    path: pathlib.Path = request.getfixturevalue(archive)
    start, end = 1000 * ROW + 12, 1900 * ROW  # 2.7 MB, in 64 KiB chunks
    async with FaultServer() as server:
        server.put("/m.pt2", path.read_bytes())
        async with reader.open_archive(server.url("/m.pt2"), http_options=FAST) as ar:
            entry = _payload_entry(ar, "table")
            server.delay, opened = DELAY, len(server.log)
            chunks = ar._fetcher.chunks(entry, start, end, chunk_size=64 << 10)
            got = b"".join([bytes(chunk) async for chunk in chunks])
            assert got == TABLE.tobytes()[start:end]
            (_one_round_trip if archive == "torch_written" else _mispredicted)(server.log[opened:])
        assert not server.errors
