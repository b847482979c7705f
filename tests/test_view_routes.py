"""The service over views that declare far more than lies behind them: a Range, an .npy Range and a
slice of a 1 GiB stride-0 view answer the bytes NumPy's view holds there, and nothing costs the size
declared (no digest of it is computed ahead or before the answer); a small non-dense view keeps its
content digest."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from testing.service import in_process, make_app
from testing.strided_views import write_views_pt2

pytestmark = pytest.mark.unit

GIB_ELEMENTS = 1 << 28
PAYLOAD = np.arange((1 << 14) + 8, dtype=np.float32) * 1.5
VIEWS = {
    "big": ("weight_0", [1 << 14, GIB_ELEMENTS >> 14], [1, 0], 2),  # 1 GiB: row i is element 2 + i
    "small": ("weight_0", [4, 3], [7, 2], 1),  # gaps, 48 bytes
}


def _numpy(name: str) -> np.ndarray:
    _, sizes, strides, offset = VIEWS[name]
    return np.lib.stride_tricks.as_strided(PAYLOAD[offset:], sizes, [s * 4 for s in strides])


async def test_ranges_and_slices_of_a_gibibyte_view(tmp_path) -> None:
    path = tmp_path / "views.pt2"
    write_views_pt2(path, {"weight_0": PAYLOAD.tobytes()}, VIEWS)
    app = make_app([f"v={path}"], digests_ahead="local")
    async with in_process(app) as client:
        opened = app.state.registry.slots["v"].current
        await opened.ahead  # the digests computed ahead: the small view's, not the big one's
        big = _numpy("big")
        row = big.shape[1] * 4
        start = 5000 * row - 3  # across a row's end
        url = "/archives/v/tensors/big/data"
        response = await client.get(url, headers={"range": f"bytes={start}-{start + 9}"})
        assert response.status_code == 206
        assert response.content == big[4999:5001].tobytes()[row - 3 : row + 7]
        assert "repr-digest" not in response.headers and response.headers["etag"]

        npy = await client.get(url, params={"format": "npy"}, headers={"range": "bytes=-8"})
        assert npy.status_code == 206 and npy.content == big[-1, -2:].tobytes()

        sliced = await client.get(url, params={"slice": "-3:,7"})
        assert sliced.status_code == 200 and sliced.content == big[-3:, 7].tobytes()

        small = await client.get("/archives/v/tensors/small/data", params={"order": "contiguous"})
        assert small.content == np.ascontiguousarray(_numpy("small")).tobytes()
        assert hashlib.sha256(small.content).digest() in opened.digests._done.values()
        assert opened.digests.bytes_hashed < 1 << 20  # nothing near the gibibyte was hashed


async def test_a_graph_over_its_cap_answers_one_json_error(tmp_path, monkeypatch) -> None:
    """The service's graph route: a program over the value cap is a JSON 502 `archive_format_error`
    naming the cap, and asking again reads nothing (the failure is remembered with the version)."""
    from reader.pt2 import graph

    path = tmp_path / "views.pt2"
    write_views_pt2(path, {"weight_0": PAYLOAD.tobytes()}, {"small": VIEWS["small"]})
    monkeypatch.setattr(graph, "MAX_PROGRAM_ELEMENTS", 0)  # the archive's program "{}" has one value
    app = make_app([f"v={path}"], digests_ahead="off")
    async with in_process(app) as client:
        archive = app.state.registry.slots["v"].current.archive
        for attempt in range(2):
            before = archive.stats.get("data", {}).get("requests", 0)
            response = await client.get("/archives/v/graph")
            assert response.status_code == 502
            error = response.json()["error"]
            assert error["code"] == "archive_format_error" and "MAX_PROGRAM_ELEMENTS" in error["message"]
            read = archive.stats.get("data", {}).get("requests", 0) - before
            assert read == (1 if attempt == 0 else 0)
