"""The cache from the command line and the service: --cache-dir, --offline, PT2SERVE_CACHE_DIR,
`pt2serve cache ls|prune`, each run for real."""

from __future__ import annotations

import json

import pytest

from testing.cli import acli
from testing.faultserver import FaultServer
from testing.paths import ARCHIVES
from testing.service import in_process, make_app

pytestmark = pytest.mark.emulator

MANY = (ARCHIVES / "many.pt2").read_bytes()


async def test_ls_through_the_cache_then_offline_then_cache_ls_and_prune(tmp_path):
    async with FaultServer() as server:
        server.put("/many.pt2", MANY)
        url = server.url("/many.pt2")
        code, first, err = await acli("ls", url, "--cache-dir", tmp_path)
        assert code == 0, err
        asked = len(server.log)
        code, second, err = await acli("ls", url, "--cache-dir", tmp_path)
        assert code == 0 and second == first, err
        assert len(server.log) == asked + 1  # the one revalidation
        code, offline, err = await acli("ls", url, "--cache-dir", tmp_path, "--offline")
        assert code == 0 and offline == first, err
        assert len(server.log) == asked + 1
        code, listed, err = await acli("cache", "ls", "--json", "--cache-dir", tmp_path)
        assert code == 0, err
        versions = json.loads(listed)["versions"]
        assert [v["location"] for v in versions] == [url] and versions[0]["size"] == len(MANY)
        code, out, err = await acli("cache", "prune", "--cache-dir", tmp_path)
        assert code == 0 and out.startswith("removed 1 version"), err
        code, _, err = await acli("ls", url, "--cache-dir", tmp_path, "--offline")
        assert code == 1 and "NotCached" in err and "no version" in err


async def test_cache_verbs_need_a_cache_and_sizes_they_understand(tmp_path):
    code, _, err = await acli("cache", "ls", env={"PT2SERVE_CACHE_DIR": ""})
    assert code == 2 and "no cache" in err
    code, _, err = await acli("cache", "prune", "--max-size", "lots", "--cache-dir", tmp_path)
    assert code == 2 and "not a size" in err


async def test_the_service_serves_a_cached_archive_offline(tmp_path, monkeypatch):
    async with FaultServer() as server:
        server.put("/many.pt2", MANY)
        url = server.url("/many.pt2")
        monkeypatch.setenv("PT2SERVE_CACHE_DIR", str(tmp_path))
        app = make_app([f"m={url}"])
        async with in_process(app) as client:
            layouts = (await client.get("/tensors")).json()["tensors"]
            name = layouts[-1]["name"]
            online = (await client.get(f"/tensors/{name}/data")).content
        monkeypatch.setenv("PT2SERVE_OFFLINE", "1")
        asked = len(server.log)
        async with in_process(make_app([f"m={url}"])) as client:
            answer = await client.get(f"/tensors/{name}/data")
            assert answer.status_code == 200 and answer.content == online
        assert len(server.log) == asked
