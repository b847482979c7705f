"""`HttpOptions.check_url`: asked with every request's URL as it is sent, redirect hops included, before
it is sent; raising `HostRefused` refuses the request (reader/sources/http.py's request hook)."""

from __future__ import annotations

import numpy as np
import pytest

import reader
from reader.sources import HttpOptions
from testing.faultserver import FaultServer, Status
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator


def archive(path) -> bytes:
    write_pt2(path, {"w": (7, [512, 1024], np.ones(512 * 1024, dtype=np.float32).tobytes())})
    return path.read_bytes()


async def test_every_request_and_redirect_hop_is_asked_before_it_is_sent(tmp_path):
    data = archive(tmp_path / "m.pt2")
    asked: list[str] = []
    async with FaultServer() as origin:
        origin.put("/final/m.pt2", data)
        origin.faults.append(Status(code=302, times=None, path="/models/m.pt2",
                                    headers={"Location": "/models/../final/m.pt2"}))  # fmt: skip
        options = HttpOptions(check_url=asked.append)
        async with reader.open_archive(origin.url("/models/m.pt2"), http_options=options) as ar:
            await ar.read("w")
    assert asked[:2] == [origin.url("/models/m.pt2"), origin.url("/final/m.pt2")]  # `..` resolved, as sent
    assert len(asked) == len(origin.log)  # every request, each later read's too, was asked first


async def test_a_refused_hop_is_never_sent(tmp_path):
    data = archive(tmp_path / "m.pt2")

    def check(url: str) -> None:
        if "/final/" in url:
            raise reader.HostRefused("outside")

    async with FaultServer() as origin:
        origin.put("/final/m.pt2", data)
        origin.faults.append(Status(code=307, times=None, path="/models/m.pt2",
                                    headers={"Location": "/final/m.pt2"}))  # fmt: skip
        with pytest.raises(reader.HostRefused, match="outside"):
            async with reader.open_archive(
                origin.url("/models/m.pt2"), http_options=HttpOptions(check_url=check)
            ):
                pass
        assert [record.path for record in origin.log] == ["/models/m.pt2"]  # asked once, never retried
