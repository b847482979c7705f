"""One selection rule (reader.formats.selection.select_tensors) behind every entry point that takes a
model, a prefix or names: an unknown name is `TensorNotFound` (404 `tensor_not_found` from the
service) everywhere, never a silent drop."""

from __future__ import annotations

import pytest

import reader
from app.manifest import manifest_tensors
from reader.formats.selection import select_tensors
from testing.paths import ARCHIVES
from testing.service import in_process, make_app

pytestmark = pytest.mark.unit

TWO = ARCHIVES / "two_models.pt2"
LAYOUTS = ARCHIVES / "layouts.pt2"


async def test_the_rule_names_prefix_and_scope() -> None:
    async with reader.open_archive(TWO) as ar:
        assert [t.name for t in select_tensors(ar, "encoder", "proj.")] == ["proj.weight", "proj.bias"]
        named = select_tensors(ar, "decoder", names=["scale", "proj.bias", "scale"])
        assert [t.name for t in named] == ["scale", "proj.bias"]  # each once, in the order given
        every = select_tensors(ar, prefix="proj.", every_model=True)
        assert {(t.model, t.name) for t in every} == {
            (m, n) for m in ("encoder", "decoder") for n in ("proj.weight", "proj.bias")
        }
        assert [t.model for t in select_tensors(ar, names=["scale"], every_model=True)] == ["decoder"]
        with pytest.raises(reader.TensorNotFound, match="scale"):
            select_tensors(ar, "encoder", names=["proj.bias", "scale"])
        with pytest.raises(reader.TensorNotFound, match="nope"):
            select_tensors(ar, names=["scale", "nope"], every_model=True)
        with pytest.raises(TypeError):
            select_tensors(ar, "encoder", names="proj.bias")


async def test_a_manifest_of_an_unknown_name_is_an_error_not_a_shorter_list() -> None:
    async with reader.open_archive(TWO) as ar:
        assert [t.name for t in manifest_tensors(ar, None, None, ["scale"])] == ["scale"]
        with pytest.raises(reader.TensorNotFound, match="nope"):
            manifest_tensors(ar, None, None, ["scale", "nope"])


async def test_library_loads_refuse_an_unknown_name() -> None:
    async with reader.open_archive(LAYOUTS) as ar:
        with pytest.raises(reader.TensorNotFound):
            await ar.load(names=["conv.weight", "nope"])
        with pytest.raises(reader.TensorNotFound):
            async for _ in ar.iter_load(names=["nope"]):
                pass


def test_safe_open_refuses_an_unknown_name() -> None:
    with reader.safe_open(str(LAYOUTS), framework="numpy") as f, pytest.raises(reader.TensorNotFound):
        f.get_tensor("nope")


@pytest.mark.parametrize(
    "path, query",
    [
        ("/archives/layouts/manifest", [("name", "conv.weight"), ("name", "nope")]),
        ("/archives/two/manifest", [("name", "nope")]),
        ("/archives/layouts/safetensors", [("name", "nope")]),
        ("/archives/layouts/ptd", [("name", "nope")]),
    ],
)
async def test_the_service_answers_404_for_an_unknown_name(path, query) -> None:
    async with in_process(make_app()) as client:
        response = await client.get(path, params=query)
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "tensor_not_found"
    assert "nope" in response.json()["error"]["message"]


async def test_the_listing_and_the_manifest_select_alike() -> None:
    async with in_process(make_app()) as client:
        listing = (await client.get("/archives/two/tensors", params={"prefix": "proj."})).json()
        manifest = (await client.get("/archives/two/manifest", params={"prefix": "proj."})).json()
    listed = sorted((t["model"], t["name"]) for t in listing["tensors"])
    assert listed == [(t["model"], t["name"]) for t in manifest["tensors"]] and len(listed) == 4
