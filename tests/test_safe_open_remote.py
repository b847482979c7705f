"""reader.safe_open over HTTP (nginx) and from S3 (SeaweedFS): the same answers as safetensors' own
safe_open on a safetensors file of the same weights, a sharded index as one handle, and a row block of
a large tensor read as one request of the block's bytes (issue 49's target, counted by the source)."""

from __future__ import annotations

import os
import pathlib
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reader
from reader.sources import S3Settings
from testing.fixtures.make_sharded import write_sharded
from testing.paths import ARCHIVES
from testing.safetensors_oracle import (
    assert_same,
    assert_same_handles,
    indices,
    raw,
    write_bundle,
    write_state_dict,
)
from testing.servers import NginxProcess

pytestmark = pytest.mark.emulator

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")

CONTAINERS = ARCHIVES.parent / "containers" / f"torch-{'.'.join(torch.__version__.split('.')[:2])}"
FILES = [
    ARCHIVES / "dtypes.pt2",
    ARCHIVES / "layouts.pt2",
    ARCHIVES / "many.pt2",
    ARCHIVES / "many_deflate.pt2",
    ARCHIVES / "pickled.pt2",
    ARCHIVES / "zero_payload.pt2",
    CONTAINERS / "checkpoint.pt",
    CONTAINERS / "aoti_pickle.pt2",
    CONTAINERS / "mixed.pt2",
]
SAMPLE = 40  # names checked per archive remotely (every one when it has fewer): each is a request
ROWS, WIDTH = 4096, 256  # the large tensor: 4 MiB of float32
BLOCK = slice(1024, 1280)  # one row block of it: 256 KiB


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> pathlib.Path:
    """The fixture files, a sharded checkpoint and a large exported Linear, in one folder; beside
    it their safetensors oracles."""
    root = tmp_path_factory.mktemp("served")
    for path in FILES:
        shutil.copy(path, root / path.name)
    write_sharded(root / "gpt")
    exported = torch.export.export(torch.nn.Linear(WIDTH, ROWS), (torch.randn(1, WIDTH),))
    torch.export.save(exported, root / "big.pt2")
    oracles = tmp_path_factory.mktemp("oracles")
    for path in FILES:
        write_bundle(path, oracles / f"{path.name}.safetensors")
    state = {}
    for shard in sorted((root / "gpt").glob("*.bin")):
        state.update(torch.load(shard, weights_only=True))
    write_state_dict(state, oracles / "gpt.safetensors")
    write_state_dict(exported.state_dict, oracles / "big.pt2.safetensors")
    root.joinpath("oracles").symlink_to(oracles)
    return root


def sample(names: list[str]) -> list[str]:
    return names[:: max(1, len(names) // SAMPLE)]


def check(location: str, oracle: pathlib.Path, **options) -> None:
    with reader.safe_open(location, **options) as ours, safetensors.safe_open(oracle, "pt") as theirs:
        assert_same_handles(ours, theirs, sample(ours.keys()))
        opened = ours.stats["open"]["requests"]
        ours.get_tensor(ours.keys()[0])
        assert ours.stats["open"]["requests"] == opened  # the handle opened once


@pytest.fixture(scope="module")
def nginx(served):
    with NginxProcess(served) as server:
        yield server


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_over_http_equals_safetensors(nginx, served, path):
    check(nginx.url(path.name), served / "oracles" / f"{path.name}.safetensors")


def test_a_sharded_index_over_http(nginx, served):
    check(nginx.url("gpt/pytorch_model.bin.index.json"), served / "oracles" / "gpt.safetensors")


def test_threads_read_right_bytes_at_once_over_http(nginx, served):
    oracle = served / "oracles" / "many.pt2.safetensors"
    with reader.safe_open(nginx.url("many.pt2")) as ours, safetensors.safe_open(oracle, "pt") as theirs:
        names = ours.keys()[:200]
        opened = ours.stats["open"]["requests"]
        expected = {name: raw(theirs.get_slice(name)[::2]) for name in names}
        barrier = threading.Barrier(6)

        def work(worker: int) -> int:
            barrier.wait()
            for name in names[worker::6]:
                assert raw(ours.get_slice(name)[::2]) == expected[name], name
            return len(names[worker::6])

        with ThreadPoolExecutor(6) as pool:
            assert sum(pool.map(work, range(6))) == len(names)
        assert ours.stats["open"]["requests"] == opened  # no read opened it again


@pytest.fixture(scope="module")
def http_layouts(nginx, served):
    oracle = served / "oracles" / "layouts.pt2.safetensors"
    with reader.safe_open(nginx.url("layouts.pt2")) as ours, safetensors.safe_open(oracle, "pt") as theirs:
        yield ours, theirs


SLICES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SLICES
@given(data=st.data())
def test_any_slice_over_http_equals_safetensors(http_layouts, data):
    ours, theirs = http_layouts
    name = data.draw(st.sampled_from(ours.keys()))
    index = data.draw(indices(ours.get_slice(name).get_shape()))
    assert_same(ours.get_slice(name)[index], theirs.get_slice(name)[index], f"{name}[{index!r}]")


# -- S3 (SeaweedFS) ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(seaweed_s3, served) -> S3Settings:
    bucket = seaweed_s3.private_bucket
    for path in [*served.glob("*.pt*"), *served.glob("gpt/*")]:
        seaweed_s3.upload(bucket, f"safe_open/{path.relative_to(served)}", path)
    return S3Settings(
        region=seaweed_s3.region,
        endpoint=seaweed_s3.endpoint,
        access_key=seaweed_s3.access_key,
        secret_key=seaweed_s3.secret_key,
    )


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_from_s3_equals_safetensors(seaweed_s3, served, s3, path):
    location = f"s3://{seaweed_s3.private_bucket}/safe_open/{path.name}"
    check(location, served / "oracles" / f"{path.name}.safetensors", s3_settings=s3)


def test_a_sharded_index_from_s3(seaweed_s3, served, s3):
    location = f"s3://{seaweed_s3.private_bucket}/safe_open/gpt/pytorch_model.bin.index.json"
    check(location, served / "oracles" / "gpt.safetensors", s3_settings=s3)


@pytest.fixture(scope="module")
def s3_sharded(seaweed_s3, served, s3):
    location = f"s3://{seaweed_s3.private_bucket}/safe_open/gpt/pytorch_model.bin.index.json"
    oracle = served / "oracles" / "gpt.safetensors"
    with reader.safe_open(location, s3_settings=s3) as ours, safetensors.safe_open(oracle, "pt") as theirs:
        yield ours, theirs


@SLICES
@given(data=st.data())
def test_any_slice_from_s3_equals_safetensors(s3_sharded, data):
    ours, theirs = s3_sharded
    name = data.draw(st.sampled_from(ours.keys()))
    index = data.draw(indices(ours.get_slice(name).get_shape()))
    assert_same(ours.get_slice(name)[index], theirs.get_slice(name)[index], f"{name}[{index!r}]")


def data(stats: dict[str, dict[str, int]]) -> tuple[int, int]:
    counted = stats.get("data", {})
    return counted.get("requests", 0), counted.get("bytes", 0)


def test_a_row_block_from_s3_is_one_request_of_its_bytes(seaweed_s3, served, s3):
    """Issue 49's target: `get_slice(name)[a:b]` of one row block: one request, bytes <= the block +
    4 KiB. The first slice of a tensor also reads its entry's local header (a few hundred bytes, one
    small request sent together with the block's, once per tensor: where its data starts is checked
    before the block is trusted)."""
    block_bytes = (BLOCK.stop - BLOCK.start) * WIDTH * 4
    location = f"s3://{seaweed_s3.private_bucket}/safe_open/big.pt2"
    with (
        reader.safe_open(location, s3_settings=s3) as f,
        safetensors.safe_open(served / "oracles" / "big.pt2.safetensors", "pt") as oracle,
    ):
        assert f.stats["open"]["requests"] == 1
        piece = f.get_slice("weight")
        assert piece.get_shape() == [ROWS, WIDTH] and piece.get_dtype() == "F32"
        assert data(f.stats) == (0, 0)  # get_slice reads nothing

        cold = piece[BLOCK]
        requests, read = data(f.stats)
        assert raw(cold) == raw(oracle.get_slice("weight")[BLOCK])
        assert requests == 2 and block_bytes < read <= block_bytes + 4096  # header and block, together

        before = data(f.stats)
        warm = f.get_slice("weight")[2048:2304]
        after = data(f.stats)
        assert raw(warm) == raw(oracle.get_slice("weight")[2048:2304])
        assert after[0] - before[0] == 1  # one request
        assert after[1] - before[1] == block_bytes  # exactly the block's bytes
        assert f.stats["open"]["requests"] == 1  # and no second open


# a process of its own: not a unit test
def test_a_forked_child_is_told_to_open_again():
    with reader.safe_open(ARCHIVES / "layouts.pt2") as f:
        name = f.keys()[0]
        pid = os.fork()
        if pid == 0:  # the child: the handle's loop thread was not forked with it
            try:
                f.get_tensor(name)
            except ValueError as exc:
                os._exit(0 if "another process" in str(exc) else 2)
            except BaseException:
                os._exit(3)
            os._exit(4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert f.get_tensor(name).shape == tuple(f.get_slice(name).get_shape())  # the parent's still works
