"""One cap on an archive's decompressed metadata, counted across its entries (reader/entries/budget.py):
configs at open and each program's JSON when its graph is first asked for."""

from __future__ import annotations

import asyncio
import json
import zipfile

import pytest

import reader
from reader.entries import budget

pytestmark = pytest.mark.unit

PROGRAM = json.dumps({"graph_module": {"graph": {"nodes": []}}}).encode()


def _archive(path, configs: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("m/archive_format", b"pt2")
        for model, config in configs.items():
            archive.writestr(f"m/models/{model}.json", PROGRAM)
            archive.writestr(f"m/data/weights/{model}_weights_config.json", config)


def test_configs_are_counted_together(tmp_path, monkeypatch) -> None:
    config = b'{"config": {}}' + b" " * 1000
    path = tmp_path / "a.pt2"
    _archive(path, {f"m{i}": config for i in range(3)})
    monkeypatch.setattr(budget, "MAX_METADATA_BYTES", 2 * len(config) + 100)  # two fit, not three

    async def open_it() -> None:
        async with reader.open_archive(path):
            pass

    with pytest.raises(reader.ArchiveFormatError, match=r"MAX_METADATA_BYTES.*refusing to inflate"):
        asyncio.run(open_it())


def test_a_graph_takes_what_the_configs_left(tmp_path, monkeypatch) -> None:
    config = b'{"config": {}}'
    path = tmp_path / "a.pt2"
    _archive(path, {"a": config, "b": config})
    monkeypatch.setattr(budget, "MAX_METADATA_BYTES", 2 * len(config) + len(PROGRAM) + 3)

    async def graphs() -> None:
        async with reader.open_archive(path) as ar:
            assert (await ar.graph(model="a")).model == "a"
            assert (await ar.graph(model="a")).model == "a"  # read once, counted once
            for _ in range(2):
                with pytest.raises(reader.ArchiveFormatError, match="MAX_METADATA_BYTES"):
                    await ar.graph(model="b")

    asyncio.run(graphs())


def test_a_malformed_graph_is_parsed_once(tmp_path) -> None:
    path = tmp_path / "a.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("m/archive_format", b"pt2")
        archive.writestr("m/models/model.json", b'{"graph_module": 7}')
        archive.writestr("m/data/weights/model_weights_config.json", b'{"config": {}}')

    async def twice() -> list[int]:
        async with reader.open_archive(path) as ar:
            reads = []
            for _ in range(2):
                before = ar.stats.get("data", {}).get("requests", 0)
                with pytest.raises(reader.ArchiveFormatError, match="graph_module"):
                    await ar.graph()
                reads.append(ar.stats.get("data", {}).get("requests", 0) - before)
            return reads

    assert asyncio.run(twice()) == [1, 0]
