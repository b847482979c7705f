"""`GET /tensors/{name}/data?slice=...` through the app in-process (ASGI, no socket): the slice's bytes (raw
or .npy), its headers, a strong ETag per slice, Range on the slice's bytes, HEAD, and JSON errors; only
the slice's bytes read. Under uvicorn with the hot lane: test_slices_http.py."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from reader import zipfmt
from testing import slice_routes
from testing.service import in_process
from testing.slice_routes import COLS, EMB, ROWS, error, slice_app

emb_path = slice_routes.emb_path  # the fixture: the embedding archive
client = slice_routes.client  # the fixture: an in-process client of the app serving it

pytestmark = pytest.mark.unit


ROW = COLS * 4


async def test_raw_slice_and_its_headers(client) -> None:
    response = await client.get("/tensors/wte/data", params={"slice": "0:128,4:8"})
    assert response.status_code == 200
    assert response.content == EMB[0:128, 4:8].tobytes()
    headers = response.headers
    assert headers["x-tensor-shape"] == "128,4"
    assert headers["x-tensor-dtype"] == "float32"
    assert headers["x-tensor-dim-order"] == "0,1"
    assert headers["content-length"] == str(128 * 4 * 4)
    assert headers["content-type"] == "application/octet-stream"
    assert headers["accept-ranges"] == "bytes"
    assert re.fullmatch(r'"[0-9a-f]{32}"', headers["etag"])  # strong
    row = await client.get("/tensors/wte/data", params={"slice": "-1"})
    assert row.content == EMB[-1].tobytes() and row.headers["x-tensor-shape"] == str(COLS)
    steps = await client.get("/tensors/wte/data", params={"slice": "::-100, ..., 1:700:9"})
    assert steps.content == np.ascontiguousarray(EMB[::-100, ..., 1:700:9]).tobytes()
    empty = await client.get("/tensors/wte/data", params={"slice": "5:5"})
    assert (
        empty.status_code == 200 and empty.content == b"" and empty.headers["x-tensor-shape"] == f"0,{COLS}"
    )


async def test_npy_slices(client) -> None:
    response = await client.get("/tensors/wte/data", params={"slice": "3:7,::-5", "format": "npy"})
    assert response.headers["content-type"] == "application/x-npy"
    array = np.load(io.BytesIO(response.content))
    assert (
        array.shape == (4, COLS // 5 + 1)
        and array.tobytes() == np.ascontiguousarray(EMB[3:7, ::-5]).tobytes()
    )
    bf16 = await client.get(
        "/archives/dtypes/tensors/t_bfloat16/data", params={"slice": "1,::2", "format": "npy"}
    )
    bits = np.load(io.BytesIO(bf16.content))
    assert bits.dtype == np.dtype("<u2") and bits.shape == (2,)  # numpy's fallback for bfloat16
    raw = await client.get("/archives/dtypes/tensors/t_bfloat16/data")
    assert bits.tobytes() == np.frombuffer(raw.content, "<u2").reshape(2, 3)[1, ::2].tobytes()


async def test_etags_per_slice_and_conditional_requests(client) -> None:
    def etag_of(slice_text: str) -> str:
        return client.get("/tensors/wte/data", params={"slice": slice_text})

    first = (await etag_of("0:4")).headers["etag"]
    assert (await etag_of(":4")).headers["etag"] == first  # the same selection, normalized
    assert (await etag_of("0:4:1, :")).headers["etag"] == first
    assert (await etag_of("0:5")).headers["etag"] != first
    assert (await etag_of("0")).headers["etag"] != (await etag_of("0:1")).headers["etag"]  # shapes differ
    whole = await client.get("/tensors/wte/data")
    assert whole.headers["etag"] != first
    npy = await client.get("/tensors/wte/data", params={"slice": "0:4", "format": "npy"})
    assert npy.headers["etag"] != first
    cached = await client.get("/tensors/wte/data", params={"slice": "0:4"}, headers={"If-None-Match": first})
    assert cached.status_code == 304 and cached.content == b""
    # the whole tensor's digest is known now (the whole GET computed it): slices keep working
    again = await client.get("/tensors/wte/data", params={"slice": "0:4"})
    assert again.status_code == 200 and again.content == EMB[0:4].tobytes()


async def test_ranges_on_the_slice_and_head(client) -> None:
    params = {"slice": "10:20,::3"}
    whole = (await client.get("/tensors/wte/data", params=params)).content
    size = len(whole)
    part = await client.get("/tensors/wte/data", params=params, headers={"Range": "bytes=8-99"})
    assert part.status_code == 206 and part.content == whole[8:100]
    assert part.headers["content-range"] == f"bytes 8-99/{size}"
    direct = await client.get("/tensors/wte/data", params={"slice": "10:20"}, headers={"Range": "bytes=-5"})
    assert direct.status_code == 206 and direct.content == EMB[10:20].tobytes()[-5:]
    unsatisfiable = await client.get("/tensors/wte/data", params=params, headers={"Range": f"bytes={size}-"})
    error(unsatisfiable, 416, unsatisfiable.json()["error"]["code"])
    assert unsatisfiable.headers["content-range"] == f"bytes */{size}"
    head = await client.head("/tensors/wte/data", params=params)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(size) and head.headers["x-tensor-shape"] == "10,256"


async def test_bad_slices_are_400_and_slices_outside_the_tensor_404(client) -> None:
    bad = ("a", "1:2:3:4", "0,,1", "1.5", "[0]", "0:1:0", "::-0", "-", "-:", "...,...", "...,-:,...,5")
    for text in bad:
        error(await client.get("/tensors/wte/data", params={"slice": text}), 400, "bad_slice")
        # the same answer where FastAPI, not the hot lane, reads the query (a parameter it must judge)
        error(await client.get("/tensors/wte/data", params={"slice": text, "x": "1"}), 400, "bad_slice")
    for text in (str(ROWS), f"-{ROWS + 1}", "0,0,0", f"0,{COLS}", "...,0,0,0", "9" * 5000):
        error(await client.get("/tensors/wte/data", params={"slice": text}), 404, "slice_out_of_range")
    error(await client.get("/tensors/nope/data", params={"slice": "0"}), 404, "tensor_not_found")


async def test_per_archive_and_versioned_routes(client) -> None:
    layout = (await client.get("/archives/layouts/tensors/strided/layout")).json()
    version = layout["archive_version"]
    full = await client.get("/archives/layouts/tensors/strided/data", params={"order": "contiguous"})
    want = np.frombuffer(full.content, np.float32).reshape(4, 3)
    for prefix in ("/archives/layouts", f"/archives/layouts@{version}"):
        response = await client.get(f"{prefix}/tensors/strided/data", params={"slice": "::-1,1:"})
        assert response.status_code == 200, response.text
        assert response.content == np.ascontiguousarray(want[::-1, 1:]).tobytes()
        assert response.headers["x-tensor-shape"] == "4,2"
    pinned = await client.get(f"/archives/layouts@{version}/tensors/strided/data", params={"slice": "0"})
    assert "immutable" in pinned.headers["cache-control"]


async def test_a_row_reads_its_bytes_and_local_header_only(emb_path) -> None:
    app = slice_app(emb_path)
    async with in_process(app) as client:
        served = await app.state.registry.serve("emb")
        archive = served.archive
        before = archive.stats.get("data", {"requests": 0, "bytes": 0})
        response = await client.get("/archives/emb/tensors/wte/data", params={"slice": "700"})
        assert response.content == EMB[700].tobytes()
        entry = archive._entries[archive.layout("wte").storage.entry]
        read = archive.stats["data"]["bytes"] - before["bytes"]
        assert ROW <= read <= ROW + zipfmt.local_header_guess(entry)
