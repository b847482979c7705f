"""ExecuTorch's runtime runs programs with OUR .ptd, fetched from the service over HTTP with a
Range-resumed download; outputs equal torch's (and, bit for bit, those with ExecuTorch's own .ptd)."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator

import httpx
import pytest

from testing.executorch_models import ExportedModel, export_models, package_with_program, run_program
from testing.executorch_oracle import needs_executorch, read_ptd
from testing.service import make_app, real_server, run

pytestmark = [pytest.mark.emulator, needs_executorch]

ATOL, RTOL = 1e-5, 1e-4  # what ExecuTorch's portable kernels give against torch with its own .ptd


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> dict[str, ExportedModel]:
    return export_models(tmp_path_factory.mktemp("executorch_models"))


@pytest.fixture(scope="session")
def packaged(exported, tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("packaged")
    return package_with_program(exported["block"], folder / "block_with_program.pt2")


@contextlib.asynccontextmanager
async def service_client(specs: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the service under a real uvicorn on loopback."""
    async with real_server(make_app(specs)) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield client


async def resumed_download(client: httpx.AsyncClient, url: str, cut: int) -> bytes:
    """Fetch `url` as a client that was cut off after `cut` bytes and resumes with If-Range."""
    head = await client.head(url)
    assert head.status_code == 200, head.text
    length, etag = int(head.headers["content-length"]), head.headers["etag"]
    assert not etag.startswith("W/")
    assert 0 < cut < length
    first = await client.get(url, headers={"range": f"bytes=0-{cut - 1}"})
    assert first.status_code == 206 and first.headers["content-range"] == f"bytes 0-{cut - 1}/{length}"
    rest = await client.get(url, headers={"range": f"bytes={cut}-", "if-range": etag})
    assert rest.status_code == 206 and rest.headers["content-range"] == f"bytes {cut}-{length - 1}/{length}"
    data = first.content + rest.content
    assert len(data) == length
    return data


def check_outputs(outputs: list, model: ExportedModel, reference: list) -> None:
    import torch

    assert len(outputs) == 1
    assert torch.allclose(outputs[0], model.expected, atol=ATOL, rtol=RTOL)
    assert torch.equal(outputs[0], reference[0])  # same bytes in, same numbers out


@pytest.mark.parametrize("name", ["mlp", "convnet", "block"])
def test_runtime_runs_with_our_ptd_from_the_service(name, exported, tmp_path) -> None:
    model = exported[name]

    async def fetch() -> bytes:
        async with service_client([f"{name}={model.archive}"]) as client:
            url = f"/archives/{name}/ptd"
            length = int((await client.head(url)).headers["content-length"])
            # cut inside the FlatBuffer for one model, inside a segment for the others
            return await resumed_download(client, url, 100 if name == "mlp" else length // 2 + 3)

    ours = run(fetch())
    pte, ptd, theirs = tmp_path / "model.pte", tmp_path / "ours.ptd", tmp_path / "theirs.ptd"
    pte.write_bytes(model.pte)
    ptd.write_bytes(ours)
    theirs.write_bytes(model.executorch_ptd)
    # key by key what ExecuTorch wrote (we also write names its program does not use)
    our_keys, their_keys = read_ptd(ours), read_ptd(model.executorch_ptd)
    assert {key: our_keys[key] for key in their_keys} == their_keys
    check_outputs(run_program(pte, ptd, model.inputs), model, run_program(pte, theirs, model.inputs))


def test_archive_carrying_its_program_runs_from_the_service(exported, packaged, tmp_path) -> None:
    """package_pt2(exported_programs=..., executorch_files={"model.pte": ...}): the program and
    its .ptd both come out of the one archive, through one server."""
    model = exported["block"]

    async def fetch() -> tuple[dict, bytes, bytes]:
        async with service_client([f"pkg={packaged}"]) as client:
            listing = (await client.get("/archives/pkg/executorch")).json()
            program = await resumed_download(client, listing["files"][0]["url"], 1000)
            data = await resumed_download(client, "/archives/pkg/ptd", 5000)
            return listing, program, data

    listing, program, data = run(fetch())
    assert [f["name"] for f in listing["files"]] == ["model.pte"]
    assert listing["files"][0]["size"] == len(model.pte)
    assert program == model.pte
    pte, ptd, theirs = tmp_path / "model.pte", tmp_path / "model.ptd", tmp_path / "theirs.ptd"
    pte.write_bytes(program)
    ptd.write_bytes(data)
    theirs.write_bytes(model.executorch_ptd)
    check_outputs(run_program(pte, ptd, model.inputs), model, run_program(pte, theirs, model.inputs))
