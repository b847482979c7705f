"""A bug of ours is a logged 500 in the JSON error contract, never a 4xx blaming the client."""

from __future__ import annotations

import httpx
import pytest

from testing.service import make_app

pytestmark = pytest.mark.unit


async def test_an_internal_value_error_is_a_logged_500_not_the_clients_fault(caplog) -> None:
    app = make_app()

    async def broken() -> None:
        raise ValueError("a bug of ours")

    app.add_api_route("/broken", broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # as a server goes on
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/broken")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal error (see the server log)"}
    }
    assert "a bug of ours" in caplog.text
