"""`GET /tensors/{name}/data?slice=...` under uvicorn with the hot lane: the slice's bytes, its JSON
errors and Range beside it. The in-process checks are in test_slices_http_rules.py."""

from __future__ import annotations

import httpx
import pytest

from testing import slice_routes
from testing.service import real_server
from testing.slice_routes import EMB, error, slice_app

emb_path = slice_routes.emb_path  # the fixture: the embedding archive

pytestmark = pytest.mark.emulator


async def test_slices_under_uvicorn_with_the_hot_lane(emb_path) -> None:
    async with real_server(slice_app(emb_path)) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/tensors/wte/data", params={"slice": "2:4,-3:"})
        assert response.status_code == 200
        assert response.content == EMB[2:4, -3:].tobytes()
        error(await client.get("/archives/emb/tensors/wte/data", params={"slice": "x"}), 400, "bad_slice")
        plain = await client.get("/tensors/wte/data", headers={"Range": "bytes=0-15"})
        assert plain.content == EMB.tobytes()[:16]
