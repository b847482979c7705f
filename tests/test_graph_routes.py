"""GET /archives/{id}/graph and /tensors/{name}/consumers through the real app, in process."""

from __future__ import annotations

import json
import zipfile

import pytest

from testing.paths import ARCHIVES
from testing.service import in_process, make_app, run

pytestmark = pytest.mark.unit


def test_graph_route_lists_every_node_in_order():
    async def go():
        async with in_process(make_app()) as client:
            default = await client.get("/graph")
            named = await client.get("/archives/layouts/graph")
            two = await client.get("/archives/two/graph", params={"model": "decoder"})
            missing = await client.get("/archives/two/graph", params={"model": "nope"})
            ambiguous = await client.get("/archives/two/graph")
            return default, named, two, missing, ambiguous

    default, named, two, missing, ambiguous = run(go())
    assert default.status_code == named.status_code == 200
    body = named.json()
    program = json.loads(zipfile.ZipFile(ARCHIVES / "layouts.pt2").read("layouts/models/model.json"))
    graph = program["graph_module"]["graph"]
    assert len(body["nodes"]) == len(graph["inputs"]) + len(graph["nodes"]) + 1
    assert [n["name"] for n in body["nodes"] if n["op"] == "call_function"] == [
        n["name"] for n in graph["nodes"]
    ]
    assert body["nodes"][-1]["op"] == "output" and body["archive"] == "layouts"
    assert body["tensors"]["conv.weight"] == {"placeholder": "p_conv_weight", "consumers": ["conv2d"]}
    conv = next(n for n in body["nodes"] if n["name"] == "conv2d")
    assert conv["module"] == "conv" and conv["outputs"][0]["dtype"] == "float32"
    assert two.status_code == 200 and two.json()["model"] == "decoder"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert ambiguous.status_code == 404


def test_consumers_route():
    async def go():
        async with in_process(make_app()) as client:
            ok = await client.get("/archives/layouts/tensors/lin2.weight/consumers")
            nope = await client.get("/archives/layouts/tensors/nope/consumers")
            return ok, nope

    ok, nope = run(go())
    assert ok.status_code == 200
    body = ok.json()
    assert body["placeholder"] == "p_lin2_weight"
    assert [c["node"] for c in body["consumers"]] == ["linear", "linear_1"]  # lin1 reads lin2's weight
    assert nope.status_code == 404 and nope.json()["error"]["code"] == "tensor_not_found"
