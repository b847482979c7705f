"""`pull`: a mirror that updates by digest, verifies every byte, resumes, and switches atomically."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys

import httpx
import pytest

import reader
from app.pull import pull
from app.pull.mirror import Mirror
from testing.paths import ARCHIVES
from testing.service import make_app, real_server
from testing.versioned_archives import CHANGED, write_version

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Two torch-written versions (256-wide: the changed weight is 256 KiB, big enough to cut)."""
    pytest.importorskip("torch", reason="torch writes the two archive versions")
    out = tmp_path_factory.mktemp("pull")
    return tuple(write_version(out / f"v{n}" / "net.pt2", n, width=256) for n in (1, 2))


def deploy(source, target) -> None:
    staging = target.with_name(target.name + ".new")
    shutil.copy2(source, staging)
    staging.replace(target)


async def expected_files(path) -> dict[str, bytes]:
    async with reader.open_archive(path) as ar:
        return {
            f"{t.model}/{t.name}": await ar.read(t.name, model=t.model) for t in ar.tensors() if t.readable
        }


def mirrored(directory) -> dict[str, bytes]:
    current = directory / "current"
    manifest = json.loads((current / "manifest.json").read_text())
    return {f"{e['model']}/{e['name']}": (current / e["file"]).read_bytes() for e in manifest["tensors"]}


def sent(app) -> float:
    return app.state.metrics.registry.get_sample_value("pt2serve_response_bytes_total")


async def wait_for_version(
    base: str, archive_id: str, version: str | None = None, not_version: str | None = None
):
    async with httpx.AsyncClient() as client:
        for _ in range(200):
            listing = (await client.get(f"{base}/archives")).json()["archives"]
            now = next(a for a in listing if a["id"] == archive_id).get("version")
            if (version and now == version) or (not_version and now and now != not_version):
                return now
            await asyncio.sleep(0.05)
    raise AssertionError("the server never switched versions")


class Interrupt(Exception):
    """Stands in for a crash or a cut connection in the middle of a pull."""


def cut_after(limit: int):
    """A progress factory whose callback raises once `limit` bytes have been written."""

    @contextlib.contextmanager
    def factory(total: int):
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if done >= limit:
                raise Interrupt(f"cut after {done} bytes")

        yield advance

    return factory


async def test_update_moves_only_the_changed_tensors_and_switches_atomically(versions, tmp_path) -> None:
    first, second = versions
    path, mirror = tmp_path / "net.pt2", tmp_path / "mirror"
    deploy(first, path)
    app = make_app([f"net={path}"], revalidate_seconds=0.1)
    async with real_server(app) as base:
        url = f"{base}/archives/net"
        report = await pull(url, mirror)
        assert report.switched and report.reused == 0 and report.fetched == report.tensors == 13
        v1_files = await expected_files(first)
        assert mirrored(mirror) == v1_files
        assert report.bytes_fetched == sum(map(len, v1_files.values()))
        old_dir = os.readlink(mirror / "current")

        again = await pull(url, mirror)  # nothing changed: nothing moves, nothing switches
        assert not again.switched and again.bytes_fetched == 0 and again.reused == 13
        assert os.readlink(mirror / "current") == old_dir

        deploy(second, path)
        await wait_for_version(base, "net", not_version=report.version)
        async with httpx.AsyncClient() as client:
            # what goes on the wire (the service encodes JSON for clients that accept it, as pull's do)
            manifest_size = int((await client.get(f"{url}/manifest")).headers["content-length"])
        before = sent(app)
        update = await pull(url, mirror)
        server_bytes = sent(app) - before
        v2_files = await expected_files(second)
        changed = {key for key in v2_files if v2_files[key] != v1_files[key]}
        assert changed == {f"model/{name}" for name in CHANGED}
        changed_bytes = sum(len(v2_files[key]) for key in changed)
        assert update.switched and update.fetched == 2 and update.reused == 11
        assert update.bytes_fetched == changed_bytes  # the client's counter
        assert server_bytes == changed_bytes + manifest_size  # the server's counter: tensors + manifest
        assert mirrored(mirror) == v2_files
        assert (mirror / old_dir).is_dir()  # the previous version stays for readers still in it


async def test_an_interrupted_update_leaves_the_old_set_and_resumes(versions, tmp_path) -> None:
    first, second = versions
    path, mirror = tmp_path / "net.pt2", tmp_path / "mirror"
    deploy(first, path)
    app = make_app([f"net={path}"], revalidate_seconds=0.1, chunk_size=16 << 10)
    async with real_server(app) as base:
        url = f"{base}/archives/net"
        first_report = await pull(url, mirror)
        v1_files = mirrored(mirror)
        deploy(second, path)
        await wait_for_version(base, "net", not_version=first_report.version)
        with pytest.raises(Interrupt):
            await pull(url, mirror, progress=cut_after(1))
        assert mirrored(mirror) == v1_files  # the old complete set, untouched
        partials = list((mirror / ".pull" / "partial").iterdir())
        kept = sum(p.stat().st_size for p in partials)
        assert kept > 0
        resumed = await pull(url, mirror)
        v2_files = await expected_files(second)
        changed_bytes = sum(len(v2_files[f"model/{name}"]) for name in CHANGED)
        assert resumed.bytes_fetched == changed_bytes - kept  # resumed, not restarted
        assert mirrored(mirror) == v2_files


async def test_a_crash_between_files_keeps_the_old_set_and_the_finished_downloads(
    versions, tmp_path, monkeypatch
) -> None:
    first, _ = versions
    path, mirror = tmp_path / "net.pt2", tmp_path / "mirror"
    deploy(first, path)
    async with real_server(make_app([f"net={path}"])) as base:
        url = f"{base}/archives/net"
        await pull(url, mirror, names=["head.bias"])  # a selection: one tensor
        assert set(mirrored(mirror)) == {"model/head.bias"}
        # now everything, crashing right after the first new file is stored
        original = Mirror.finish_download

        def crash_after_one(self, partial, sha256):
            stored = original(self, partial, sha256)
            raise Interrupt(f"crash after storing {stored}")

        monkeypatch.setattr(Mirror, "finish_download", crash_after_one)
        with pytest.raises(Interrupt):
            await pull(url, mirror)
        monkeypatch.setattr(Mirror, "finish_download", original)
        assert set(mirrored(mirror)) == {"model/head.bias"}  # still the old, complete set
        finished = list((mirror / ".pull" / "blobs").iterdir())
        # the verified downloads wait for the next run (downloads run at once: each one that
        # finished before the first crash stopped the others is stored)
        assert 1 <= len(finished) < len(await expected_files(first))
        kept = sum(blob.stat().st_size for blob in finished)  # plus the downloads cut short, resumed below
        kept += sum(p.stat().st_size for p in (mirror / ".pull" / "partial").iterdir())
        rerun = await pull(url, mirror)
        v1_files = await expected_files(first)
        assert mirrored(mirror) == v1_files
        total = sum(map(len, v1_files.values()))
        assert rerun.bytes_fetched == total - len(v1_files["model/head.bias"]) - kept


async def test_a_corrupted_local_file_is_detected_and_fetched_again(versions, tmp_path) -> None:
    first, _ = versions
    path, mirror = tmp_path / "net.pt2", tmp_path / "mirror"
    deploy(first, path)
    async with real_server(make_app([f"net={path}"])) as base:
        url = f"{base}/archives/net"
        await pull(url, mirror)
        victim = mirror / "current" / "model" / "blocks.2.weight"
        data = bytearray(victim.read_bytes())
        data[100] ^= 0xFF
        # rewrite in place (a bad disk), keeping the size: only the digest can tell
        with open(victim, "r+b") as handle:
            handle.write(data)
        repaired = await pull(url, mirror)
        assert repaired.switched and repaired.fetched == 1 and repaired.bytes_fetched == len(data)
        assert mirrored(mirror) == await expected_files(first)


async def test_wrong_bytes_from_the_server_are_refused(versions, tmp_path) -> None:
    """A manifest whose digest does not match the bytes (a lying or broken server): IntegrityError,
    nothing switched, the wrong bytes not kept."""
    first, _ = versions
    path, mirror = tmp_path / "net.pt2", tmp_path / "mirror"
    deploy(first, path)
    async with real_server(make_app([f"net={path}"])) as base:
        async with httpx.AsyncClient() as client:
            manifest = (await client.get(f"{base}/archives/net/manifest")).json()
        manifest["tensors"][0]["sha256"] = hashlib.sha256(b"something else").hexdigest()
        from app.pull.served import FromServer
        from app.pull.update import update

        async with httpx.AsyncClient() as client:
            target = FromServer(client, f"{base}/archives/net")
            for entry in manifest["tensors"]:
                entry["url"] = base + entry["url"]
            with pytest.raises(reader.IntegrityError):
                await update(Mirror(mirror), manifest, target, None)
        assert not (mirror / "current").exists()
        # the refused bytes are not kept (other downloads, cut short by the failure, are: they resume)
        wrong = manifest["tensors"][0]["sha256"]
        assert not (mirror / ".pull" / "partial" / wrong).exists()
        assert not (mirror / ".pull" / "blobs" / wrong).exists()


async def test_pull_straight_from_an_archive_computes_the_same_digests(versions, tmp_path) -> None:
    first, second = versions
    path = tmp_path / "net.pt2"
    deploy(first, path)
    served_dir, direct_dir = tmp_path / "served", tmp_path / "direct"
    async with real_server(make_app([f"net={path}"])) as base:
        await pull(f"{base}/archives/net", served_dir)
    report = await pull(str(path), direct_dir)
    assert report.switched and mirrored(direct_dir) == mirrored(served_dir)

    def digests(directory):
        manifest = json.loads((directory / "current" / "manifest.json").read_text())
        return [(e["name"], e["sha256"]) for e in manifest["tensors"]]

    assert digests(direct_dir) == digests(served_dir)
    same = await pull(str(path), direct_dir)  # same object, same version: nothing is read again
    assert not same.switched and same.bytes_fetched == 0
    victim = direct_dir / "current" / "model" / "head.weight"
    victim.write_bytes(b"\0" * victim.stat().st_size)  # damaged: its recorded digest tells
    repaired = await pull(str(path), direct_dir)
    assert repaired.switched and repaired.fetched == 1 and repaired.bytes_fetched == victim.stat().st_size
    assert mirrored(direct_dir) == mirrored(served_dir)
    deploy(second, path)
    update = await pull(str(path), direct_dir)
    assert update.switched and update.fetched == 2 and mirrored(direct_dir) == await expected_files(second)


async def test_pull_a_selection_of_a_multi_model_archive(tmp_path) -> None:
    async with real_server(make_app([f"two={ARCHIVES / 'two_models.pt2'}"])) as base:
        report = await pull(f"{base}/archives/two/manifest", tmp_path / "m", model="encoder", prefix="proj.")
    assert report.tensors == 2
    files = mirrored(tmp_path / "m")
    async with reader.open_archive(ARCHIVES / "two_models.pt2") as ar:
        assert files == {
            f"encoder/{n}": await ar.read(n, model="encoder") for n in ("proj.bias", "proj.weight")
        }


async def test_cli_pull(tmp_path) -> None:
    async with real_server(make_app([f"two={ARCHIVES / 'two_models.pt2'}"])) as base:
        command = [sys.executable, "-m", "app", "pull", f"{base}/archives/two", str(tmp_path / "m"), "--json"]
        done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["switched"] and report["tensors"] == 7 and report["fetched"] == 7
    assert (tmp_path / "m" / "current" / "decoder" / "proj.weight").is_file()
    nowhere = [sys.executable, "-m", "app", "pull", "http://127.0.0.1:9/archives/x", str(tmp_path / "n")]
    missing = subprocess.run(nowhere, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stderr.startswith("pt2serve: SourceError")


async def test_tied_tensors_are_fetched_once_and_empty_ones_work(tmp_path) -> None:
    """layouts.pt2: lin2.weight is lin1.weight (one digest, one download, one file linked twice),
    views of one payload, a strided view, a scalar and an empty tensor."""
    async with real_server(make_app([f"layouts={ARCHIVES / 'layouts.pt2'}"])) as base:
        report = await pull(f"{base}/archives/layouts", tmp_path / "m")
    files = mirrored(tmp_path / "m")
    assert files == await expected_files(ARCHIVES / "layouts.pt2")
    assert files["model/empty"] == b""
    manifest = json.loads((tmp_path / "m" / "current" / "manifest.json").read_text())
    distinct = {e["sha256"]: e["nbytes"] for e in manifest["tensors"] if e["sha256"]}
    assert report.bytes_fetched == sum(distinct.values()) < sum(map(len, files.values()))
    current = tmp_path / "m" / "current" / "model"
    assert (current / "lin1.weight").stat().st_ino == (current / "lin2.weight").stat().st_ino


async def test_pull_straight_from_an_http_archive(versions, tmp_path) -> None:
    """`https://…/x.pt2`: the same reader over HTTP ranges, digests computed while streaming."""
    from testing.faultserver import FaultServer

    first, _ = versions
    async with FaultServer() as upstream:
        upstream.put("/net.pt2", first.read_bytes())
        report = await pull(upstream.url("/net.pt2"), tmp_path / "m", prefix="blocks.")
        again = await pull(upstream.url("/net.pt2"), tmp_path / "m", prefix="blocks.")
    expected = {k: v for k, v in (await expected_files(first)).items() if k.startswith("model/blocks.")}
    assert report.switched and mirrored(tmp_path / "m") == expected
    assert not again.switched and again.bytes_fetched == 0  # same ETag: same version, nothing read


async def test_pulling_an_unknown_name_fails_and_names_it(tmp_path) -> None:
    """Direct or through a server: a name the archive lacks is an error, not a shorter mirror."""
    with pytest.raises(reader.TensorNotFound, match="nope"):
        await pull(
            str(ARCHIVES / "two_models.pt2"), tmp_path / "d", model="encoder", names=["proj.bias", "nope"]
        )
    async with real_server(make_app([f"two={ARCHIVES / 'two_models.pt2'}"])) as base:
        with pytest.raises(reader.SourceError, match="nope"):
            await pull(f"{base}/archives/two/manifest", tmp_path / "m", names=["scale", "nope"])
