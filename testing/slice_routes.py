"""What the slice-route tests share: an embedding archive (EMB, ROWS x COLS float32) beside two fixtures,
the app serving them, an in-process client of it, and the check of a JSON error."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from testing.paths import ARCHIVES
from testing.service import in_process, make_app
from testing.zipbytes import write_pt2

ROWS, COLS = 1024, 768


EMB = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)


@pytest.fixture(scope="module")
def emb_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("slices_http") / "emb.pt2"
    write_pt2(path, {"wte": (7, [ROWS, COLS], EMB.tobytes())})
    return path


def slice_app(emb_path):
    return make_app(
        [f"emb={emb_path}", f"layouts={ARCHIVES / 'layouts.pt2'}", f"dtypes={ARCHIVES / 'dtypes.pt2'}"]
    )


@pytest.fixture
async def client(emb_path):
    async with in_process(slice_app(emb_path)) as client:
        yield client


def error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
