"""The service's bundles (/safetensors, /ptd) of a remote archive, read as a plan: byte-identical to
the ones built from the local file, whole and by Range, with runs of tensors read as one range."""

from __future__ import annotations

import pathlib
import random

import numpy as np
import pytest

from testing.faultserver import DropAfter, FaultServer
from testing.paths import ARCHIVES
from testing.service import in_process, make_app
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.emulator

ROUTES = ("safetensors", "ptd")
NAMES = ["layouts.pt2", "dtypes.pt2", "many.pt2", "many_deflate.pt2", "zero_payload.pt2"]


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> pathlib.Path:
    rng = np.random.default_rng(11)
    tensors = {
        f"block{i}.weight": rng.standard_normal(2**18 + i, dtype=np.float32).tobytes() for i in range(5)
    }
    path = tmp_path_factory.mktemp("bundles") / "big.pt2"
    write_pt2(path, {name: (7, [len(data) // 4], data) for name, data in tensors.items()})
    return path


def _ranges(length: int) -> list[tuple[int, int]]:
    picks = random.Random(length)
    ranges = [(0, min(length, 99) - 1), (max(0, length - 100), length - 1), (length // 3, length // 2)]
    ranges += [tuple(sorted(picks.sample(range(length), 2))) for _ in range(3)]
    return ranges


async def _compare(path: pathlib.Path, url: str, route: str) -> None:
    async with in_process(make_app([f"m={path}"])) as local, in_process(make_app([f"m={url}"])) as remote:
        want = await local.get(f"/archives/m/{route}")
        got = await remote.get(f"/archives/m/{route}")
        assert want.status_code == got.status_code == 200, got.text
        assert got.content == want.content
        assert got.headers["content-length"] == str(len(want.content))
        for low, high in _ranges(len(want.content)):
            part = await remote.get(f"/archives/m/{route}", headers={"Range": f"bytes={low}-{high}"})
            assert part.status_code == 206
            assert part.headers["content-range"] == f"bytes {low}-{high}/{len(want.content)}"
            assert part.content == want.content[low : high + 1]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", NAMES)
async def test_remote_bundle_equals_local(name: str, route: str) -> None:
    path = ARCHIVES / name
    async with FaultServer() as server:
        server.put("/a.pt2", path.read_bytes())
        await _compare(path, server.url("/a.pt2"), route)
        assert not server.errors


@pytest.mark.parametrize("route", ROUTES)
async def test_big_bundle_is_one_range_and_survives_a_cut(big_archive: pathlib.Path, route: str) -> None:
    async with FaultServer() as server:
        server.put("/big.pt2", big_archive.read_bytes())
        async with in_process(make_app([f"m={big_archive}"])) as local:
            want = (await local.get(f"/archives/m/{route}")).content
        async with in_process(make_app([f"m={server.url('/big.pt2')}"])) as remote:
            opened = len(server.log)
            got = await remote.get(f"/archives/m/{route}")
            data_requests = len(server.log) - opened
            assert got.content == want
            assert data_requests <= 2  # the five tensors as one range (one more if parts split it)
            server.faults.append(DropAfter(nbytes=500_000, method="GET"))
            again = await remote.get(f"/archives/m/{route}")
            assert server.faults[0].applied == 1
            assert again.content == want  # the cut part was resumed
            for low, high in (
                (1_500_007, 2_600_003),
                (300_001, len(want) - 1),
                (len(want) - 70_000, len(want) - 1),
            ):
                before = len(server.log)
                part = await remote.get(f"/archives/m/{route}", headers={"Range": f"bytes={low}-{high}"})
                assert part.status_code == 206 and part.content == want[low : high + 1]
                assert len(server.log) - before <= 3  # the run, and a data offset resolved at an end


def _tied_archive(path: pathlib.Path, tied: dict[str, str]) -> dict[str, bytes]:
    """Tensors "a", "b", "c" of 3 MiB each, and `tied` names viewing their payloads."""
    rng = np.random.default_rng(5)
    tensors = {name: rng.standard_normal(3 << 18, dtype=np.float32).tobytes() for name in ("a", "b", "c")}
    write_pt2(path, {n: (7, [len(d) // 4], d) for n, d in tensors.items()}, tied=tied)
    return tensors


async def _bundles(path: pathlib.Path, server: FaultServer) -> tuple[bytes, bytes, int]:
    """The local and the remote /safetensors of `path`, and the bytes the remote one fetched."""
    server.put("/tied.pt2", path.read_bytes())
    async with in_process(make_app([f"m={path}"])) as local:
        want = (await local.get("/archives/m/safetensors")).content
    async with in_process(make_app([f"m={server.url('/tied.pt2')}"])) as remote:
        sent_before = sum(record.body_bytes for record in server.log)
        got = await remote.get("/archives/m/safetensors")
        assert got.status_code == 200
        return want, got.content, sum(record.body_bytes for record in server.log) - sent_before


async def test_a_tied_weight_is_read_once_and_sent_twice(tmp_path) -> None:
    """A safetensors bundle writes a tied weight under both names; from remote storage its payload
    is read once (the second copy comes from the spool), byte-identical to the local bundle, and a
    Range request that starts inside the first copy or only reaches the second still answers."""
    from reader.formats import spool

    path = tmp_path / "tied.pt2"
    tensors = _tied_archive(path, {"z": "a", "m": "a"})
    payloads = sum(map(len, tensors.values()))
    async with FaultServer() as server:
        want, got, fetched = await _bundles(path, server)
        assert got == want
        assert len(want) > payloads + 2 * len(tensors["a"])  # "a" goes out three times...
        assert payloads <= fetched < payloads + (1 << 20)  # ...and is read once
        header = 8 + int.from_bytes(want[:8], "little")
        async with in_process(make_app([f"m={server.url('/tied.pt2')}"])) as remote:
            for low, high in ((header + 100, len(want) - 1), (len(want) - 5000, len(want) - 1)):
                part = await remote.get("/archives/m/safetensors", headers={"Range": f"bytes={low}-{high}"})
                assert part.status_code == 206 and part.content == want[low : high + 1]
        assert not server.errors
    assert spool._reserved == 0  # every body gave its reservation back


async def test_copies_beyond_the_spool_budget_are_read_again(tmp_path, monkeypatch) -> None:
    """With no room left on the spool's disk budget the tied weight is read twice, and the bundle
    is the same."""
    from reader.formats import spool

    path = tmp_path / "tied.pt2"
    tensors = _tied_archive(path, {"z": "a"})
    monkeypatch.setattr(spool, "BUDGET", len(tensors["a"]) - 1)
    async with FaultServer() as server:
        want, got, fetched = await _bundles(path, server)
    assert got == want
    assert fetched >= sum(map(len, tensors.values())) + len(tensors["a"])  # "a" read twice
    assert spool._reserved == 0


async def test_s3_bundle_equals_local(seaweed_s3, monkeypatch) -> None:
    path = ARCHIVES / "many.pt2"
    seaweed_s3.upload(seaweed_s3.private_bucket, "bundles/many.pt2", path)
    for name, value in {
        "AWS_REGION": seaweed_s3.region,
        "AWS_ENDPOINT_URL_S3": seaweed_s3.endpoint,
        "AWS_ACCESS_KEY_ID": seaweed_s3.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweed_s3.secret_key,
    }.items():
        monkeypatch.setenv(name, value)
    location = f"s3://{seaweed_s3.private_bucket}/bundles/many.pt2"
    async with in_process(make_app([f"m={path}"])) as local:
        want = {route: (await local.get(f"/archives/m/{route}")).content for route in ROUTES}
    async with in_process(make_app([f"m={location}"])) as remote:
        for route in ROUTES:
            got = await remote.get(f"/archives/m/{route}")
            assert got.content == want[route]
            low, high = len(want[route]) // 4, len(want[route]) // 2
            part = await remote.get(f"/archives/m/{route}", headers={"Range": f"bytes={low}-{high}"})
            assert part.status_code == 206 and part.content == want[route][low : high + 1]


async def test_first_pull_from_an_archive_url_reads_a_plan(big_archive: pathlib.Path, tmp_path) -> None:
    """`pt2serve pull https://…/x.pt2` the first time: the tensors come as one range, each file
    equal to the tensor's bytes."""
    import reader
    from app.pull import pull
    from app.pull.mirror import tensor_file

    async with FaultServer() as server:
        server.put("/big.pt2", big_archive.read_bytes())
        report = await pull(server.url("/big.pt2"), tmp_path / "mirror")
        data_gets = [r for r in server.requests("/big.pt2") if r.range and not r.range.startswith("bytes=-")]
    assert report.tensors == 5 and report.switched
    assert len(data_gets) <= 2
    async with reader.open_archive(big_archive) as archive:
        for info in archive.tensors():
            stored = tmp_path / "mirror" / "current" / tensor_file(info.model, info.name)
            assert stored.read_bytes() == await archive.read(info.name)


@pytest.mark.parametrize("suffix", ["safetensors", "ptd"])
async def test_export_of_a_remote_archive_shows_throughput(
    big_archive: pathlib.Path, tmp_path, suffix
) -> None:
    """`pt2serve export URL -o FILE --progress`: the bar, then what moved how fast; the file equals
    the service's bundle of the local archive."""
    from testing.cli import acli

    async with FaultServer() as server:
        server.put("/big.pt2", big_archive.read_bytes())
        out = tmp_path / f"big.{suffix}"
        status, _, stderr = await acli("export", server.url("/big.pt2"), "-o", out, "--progress")
    assert status == 0, stderr
    assert "MB/s)" in stderr and f"big.{suffix}" in stderr
    async with in_process(make_app([f"m={big_archive}"])) as local:
        want = (await local.get(f"/archives/m/{suffix}", params={"name": []})).content
    if suffix == "safetensors":  # the service names its archive in the metadata; export does not
        import safetensors.numpy

        assert safetensors.numpy.load(out.read_bytes()).keys() == safetensors.numpy.load(want).keys()
        for name, array in safetensors.numpy.load(out.read_bytes()).items():
            assert array.tobytes() == safetensors.numpy.load(want)[name].tobytes()
    else:
        assert out.read_bytes() == want
