"""Target of issue 47: open a 500 MB archive over HTTP from the viewer's Open box to the first rows of
the tensor table with at most 2 requests to the origin, and no tensor bytes read until a tensor is
opened (opening reads the archive's tail: the central directory and the configs). The origin is
testing/servers.py's FaultServer in a process of its own on loopback (a real HTTP server with Range),
whose request log is the count; the browser is Debian's Chromium."""

from __future__ import annotations

import re
import time
import zipfile

import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.servers import FaultServerProcess
from testing.service import threaded_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.browser

FLOAT32 = 7
TENSORS = 50
ROWS, COLUMNS = 2560, 1024  # 10 MiB of float32 each: 500 MiB in all


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A 500 MiB PT2 archive (50 tensors of 10 MiB) and where its tensor bytes are: [start, end) each."""
    path = tmp_path_factory.mktemp("open-large") / "big.pt2"
    payload = bytes(ROWS * COLUMNS * 4)
    write_pt2(path, {f"layers.{i}.weight": (FLOAT32, [ROWS, COLUMNS], payload) for i in range(TENSORS)})
    with zipfile.ZipFile(path) as archive:
        weights = [i for i in archive.infolist() if "/data/weights/weight_" in i.filename]
        payloads = []
        for info in weights:
            start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            payloads.append((start, start + info.compress_size))
    return path, payloads


def byte_range(header: str | None, size: int) -> tuple[int, int]:
    """The bytes [start, end) a request asked for (a GET without Range: all of them)."""
    if not header:
        return 0, size
    first, last = re.fullmatch(r"bytes=(\d*)-(\d*)", header).groups()
    return (int(first), min(size, int(last) + 1)) if first else (size - int(last), size)


def reads_tensor_bytes(request: dict, size: int, payloads: list[tuple[int, int]]) -> bool:
    start, end = byte_range(request["range"], size)
    return any(start < p_end and p_start < end for p_start, p_end in payloads)


def test_open_500_mb_over_http_in_two_requests_reading_no_tensor_bytes(browser, big):
    path, payloads = big
    size = path.stat().st_size
    assert size >= 500 << 20
    with FaultServerProcess(path, url_path="/models/big.pt2") as origin:
        settings = Settings(
            archives=parse_archive_specs([f"layouts={ARCHIVES / 'layouts.pt2'}"]),
            revalidate_seconds=0,
            allow_open=("http://127.0.0.1:*/models/*",),  # names the loopback host, which the rule allows
        )
        with threaded_server(create_app(settings)) as base:
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            page = context.new_page()
            try:
                page.goto(f"{base}/")
                page.wait_for_selector("[data-testid=tensor-row]")
                assert origin.take_log() == []
                page.fill("[data-testid=open-input]", origin.url)
                started = time.perf_counter()
                page.click("[data-testid=open-go]")
                page.wait_for_selector("[data-testid=tensor-row][data-name='layers.0.weight']")
                shown = time.perf_counter() - started
                assert page.text_content("[data-testid=tensor-count]") == str(TENSORS)
                opening = origin.take_log()
                print(f"\nOpen box -> table: {shown * 1000:.0f} ms, {len(opening)} origin requests, "
                      f"{sum(r['bytes'] for r in opening)} bytes: {opening}")  # fmt: skip
                assert 1 <= len(opening) <= 2
                # the tail (central directory, configs: its first bytes may be the end of the last
                # payload) and one small header: not a tensor's worth of bytes
                assert sum(r["bytes"] for r in opening) <= 1 << 20 < ROWS * COLUMNS * 4, opening
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(500)
                assert origin.take_log() == []  # the page shows the table, and reads no tensor bytes
                # a tensor opened: now its bytes are read (what the counter would have seen before)
                page.click("[data-testid=tensor-row][data-name='layers.0.weight']")
                page.wait_for_selector("[data-testid=detail-stats] >> text=/\\d/")
                reads = origin.take_log()
                assert any(reads_tensor_bytes(r, size, payloads) for r in reads), reads
            finally:
                context.close()
