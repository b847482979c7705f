"""torch.save checkpoints and AOTInductor packages against torch's truth, for every torch version
whose fixtures are checked in (tests/fixtures/containers/torch-*/, written by make_containers.py), read
from local files and memory: no socket, no subprocess. The same fixtures over HTTP are in test_containers.py.

No torch is needed for most: the truth files hold what torch.load(weights_only=True) (and, for
AOTI, torch's own as_strided over the nested torch.load) gave when the fixtures were written.
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile

import pytest

import reader
from reader.pickle import ForbiddenGlobal
from reader.sources import BytesSource
from testing.checks import sha256
from testing.container_truth import TRUTH, cases
from testing.paths import CONTAINER_VERSIONS as VERSIONS
from testing.paths import CONTAINERS
from testing.torch_oracle import HAVE_TORCH

pytestmark = pytest.mark.unit


def test_at_least_two_torch_versions_are_checked_in() -> None:
    assert len(VERSIONS) >= 2, VERSIONS
    assert len({truth["torch"] for truth in TRUTH.values()}) == len(VERSIONS)


async def _check_tensor(ar: reader.Archive, info: reader.TensorInfo, want: dict) -> None:
    assert info.dtype == want["dtype"]
    assert list(info.sizes) == want["sizes"]
    assert list(info.strides) == want["strides"]
    assert info.storage_offset == want["storage_offset"]
    assert info.dense == want["dense"]
    assert list(info.dim_order) == want["dim_order"]
    assert info.is_param == want["is_param"]
    assert info.requires_grad == want["requires_grad"]
    assert info.nbytes == want["nbytes"]
    assert info.storage.nbytes == want["storage_nbytes"]
    default = await ar.read(info.name, model=info.model)
    contiguous = await ar.read(info.name, model=info.model, order="contiguous")
    assert sha256(default) == want["sha256_default"], info.name
    assert sha256(contiguous) == want["sha256_contiguous"], info.name
    streamed = b"".join([bytes(c) async for c in ar.tensor(info.name, model=info.model).chunks(chunk_size=7)])
    assert streamed == default


def _check_storage_sharing(infos: dict[str, reader.TensorInfo], truth: dict[str, dict]) -> None:
    """Tensors share a storage entry exactly when torch says they share a storage."""
    by_group: dict[str, set[str]] = {}
    for name, want in truth.items():
        if want.get("kind", "tensor") == "tensor":
            by_group.setdefault(want["storage_group"], set()).add(infos[name].storage.entry)
    entries = list(by_group.values())
    assert all(len(group) == 1 for group in entries)
    assert len({next(iter(group)) for group in entries}) == len(entries)


@pytest.mark.parametrize(("version", "name"), cases("checkpoint"))
async def test_checkpoint_matches_torch_load(version: str, name: str) -> None:
    truth = TRUTH[version]["archives"][name]["tensors"]
    async with reader.open_archive(CONTAINERS / version / name) as ar:
        assert ar.container == "checkpoint"
        assert ar.models == ["checkpoint"]
        infos = {info.name: info for info in ar.tensors()}
        assert set(infos) == set(truth)
        for tensor_name, want in truth.items():
            info = ar.layout(tensor_name)
            if want["kind"] == "object":
                assert info.kind == "custom_object" and not info.readable
                with pytest.raises(reader.UnsupportedPayload, match="not a tensor"):
                    await ar.read(tensor_name)
                continue
            assert info.kind == "weight"
            await _check_tensor(ar, info, want)
        _check_storage_sharing(infos, truth)
        assert infos["model.head.weight"].storage == infos["model.emb.weight"].storage  # tied
        assert infos["model.conv.weight"].dim_order == (0, 2, 3, 1)  # channels_last


@pytest.mark.parametrize(("version", "name"), cases("aoti"))
async def test_aoti_packages(version: str, name: str) -> None:
    spec = TRUTH[version]["archives"][name]
    path = CONTAINERS / version / name
    if spec["format"] != "aoti_pickle":
        with pytest.raises(reader.NoReadableWeights) as caught:
            await reader.open_archive(path)
        message = str(caught.value)
        assert "AOTInductor" in message and "'aoti/model'" in message
        assert "wrapper.cpp" in message and "wrapper.so" in message
        assert ("binary blob" in message) == (spec["format"] == "aoti_blob")
        return
    async with reader.open_archive(path) as ar:
        assert ar.container == "aoti"
        truth = spec["aoti_tensors"]
        assert ar.models == [f"aoti/{model}" for model in sorted(truth)]
        for model, tensors in truth.items():
            infos = {info.name: info for info in ar.tensors(model=f"aoti/{model}")}
            assert set(infos) == set(tensors)
            for fqn, want in tensors.items():
                info = infos[fqn]
                assert info.storage.entry.startswith(want["entry"] + "!/")
                await _check_tensor(ar, info, want)
            _check_storage_sharing(infos, tensors)


@pytest.mark.parametrize(("version", "name"), cases("mixed"))
async def test_mixed_package_shows_both(version: str, name: str) -> None:
    spec = TRUTH[version]["archives"][name]
    async with reader.open_archive(CONTAINERS / version / name) as ar:
        assert ar.container == "pt2+aoti"
        assert ar.models == ["model"]
        assert sorted(info.name for info in ar.tensors(model="model")) == spec["exported_tensors"]
        assert list(ar.unreadable) == ["aoti/model"]
        assert "compiled into the shared library" in ar.unreadable["aoti/model"]
        with pytest.raises(reader.UnsupportedPayload, match="generated C"):
            ar.tensors(model="aoti/model")
        assert await ar.read("fc.weight")


@pytest.mark.parametrize(("version", "name"), cases("legacy"))
async def test_legacy_checkpoint_is_named(version: str, name: str) -> None:
    with pytest.raises(reader.UnsupportedPayload, match=r"legacy torch\.save"):
        await reader.open_archive(CONTAINERS / version / name)


async def test_zip_that_is_neither() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("notes/readme.txt", "hello")
    with pytest.raises(reader.ArchiveFormatError, match=r"torch\.save checkpoint"):
        await reader.open_archive(BytesSource(buffer.getvalue()))


async def test_bare_pickle_is_named() -> None:
    with pytest.raises(reader.UnsupportedPayload, match="bare pickle"):
        await reader.open_archive(BytesSource(pickle.dumps({"a": list(range(40))}, protocol=2)))


class _Touch:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def _checkpoint_zip(pickle_bytes: bytes, extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("evil/data.pkl", pickle_bytes)
        zf.writestr("evil/byteorder", "little")
        for name, data in (extra or {}).items():
            zf.writestr(f"evil/{name}", data)
        zf.writestr("evil/version", "3\n")
    return buffer.getvalue()


async def test_malicious_checkpoint_is_refused_and_nothing_runs(tmp_path) -> None:
    marker = tmp_path / "pwned"
    data = _checkpoint_zip(pickle.dumps({"model": {}, "hook": _Touch(str(marker))}, protocol=2))
    path = tmp_path / "evil.pt"
    path.write_bytes(data)
    with pytest.raises(ForbiddenGlobal, match="system"):
        await reader.open_archive(path)
    assert not marker.exists()


async def test_checkpoint_storage_must_match_its_entry(tmp_path) -> None:
    pkl = (
        b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n"
        b"((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ"
        b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs."
    )
    with pytest.raises(reader.ArchiveFormatError, match="16 bytes"):
        await reader.open_archive(BytesSource(_checkpoint_zip(pkl, {"data/0": b"\x00" * 12})))
    with pytest.raises(reader.ArchiveFormatError, match="no entry"):
        await reader.open_archive(BytesSource(_checkpoint_zip(pkl)))
    async with reader.open_archive(BytesSource(_checkpoint_zip(pkl, {"data/0": bytes(range(16))}))) as ar:
        assert await ar.read("w") == bytes(range(16))  # a deflated storage entry reads too


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (CI installs torch==2.13.0)")
@pytest.mark.parametrize("protocol", [2, 4, 5])
async def test_fresh_checkpoint_from_installed_torch(tmp_path, protocol: int) -> None:
    """The installed torch as a live oracle: its checkpoint, read back, equals torch.load's tensors
    (torch's default pickle protocol 2, and 4/5: STACK_GLOBAL, MEMOIZE, FRAME)."""
    import torch

    from testing.fixtures import make_containers

    obj = make_containers.checkpoint_object()
    torch.save(obj, tmp_path / "fresh.pt", pickle_protocol=protocol)
    flat: dict = {}
    # torch's weights_only loader cannot read protocol 4/5 (FRAME); this file is our own
    make_containers._flatten(torch.load(tmp_path / "fresh.pt", weights_only=protocol == 2), [], flat)
    async with reader.open_archive(tmp_path / "fresh.pt") as ar:
        assert {info.name for info in ar.tensors()} == set(flat)
        for name, value in flat.items():
            if isinstance(value, torch.Tensor):
                got = await ar.read_numpy(name)
                want = value.detach().contiguous()
                assert got.tobytes() == want.view(-1).view(torch.uint8).numpy().tobytes() or want.numel() == 0
