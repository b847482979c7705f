"""A signed URL fetched over a real server (uvicorn on loopback), whole and by Range, without the
token (the rules, in process: test_signed_urls.py)."""

from __future__ import annotations

import httpx
import pytest

from testing.paths import ARCHIVES
from testing.service import make_app, real_server

pytestmark = pytest.mark.emulator

LAYOUTS = f"layouts={ARCHIVES / 'layouts.pt2'}"
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_signed_url_works_for_curl_over_a_real_server() -> None:
    async with (
        real_server(make_app([LAYOUTS], api_token=TOKEN)) as base,
        httpx.AsyncClient(base_url=base) as client,
    ):
        path = "/archives/layouts/safetensors?name=conv.weight&name=conv.bias"
        url = (await client.get("/sign", params={"path": path}, headers=AUTH)).json()["url"]
        response = await client.get(url)
        assert response.status_code == 200 and not response.content.startswith(b'{"error"')
        ranged = await client.get(url, headers={"Range": "bytes=0-7"})
        assert ranged.status_code == 206 and ranged.content == response.content[:8]
