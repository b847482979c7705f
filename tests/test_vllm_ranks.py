"""The vLLM format's tensor-parallel reading (reader/integrations/vllm/ranks.py) without vLLM: two
rank processes in a gloo group on loopback (testing/tp_ranks.py) read one torch-exported archive
from a FaultServer together. Each is handed every tensor of the checkpoint, exact, while the
server sends about one copy of the tensors' bytes, not one per rank; an object replaced while the
ranks read fails both ranks with SourceChanged (the owner's read sees it, the other learns it), and
neither is left waiting; ranks that opened different versions both fail before reading a tensor.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

from testing import versioned_archives
from testing.faultserver import ChangeObject, FaultServer
from testing.servers import free_port
from testing.tp_ranks import describe, run_ranks

pytestmark = pytest.mark.emulator

PATH = "/net.pt2"
RANKS = 2


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """Two versions of one archive with 8 MiB of tensors: each rank's open (the archive's tail) is
    small beside them."""
    out = tmp_path_factory.mktemp("versions")
    return tuple(
        versioned_archives.write_version(out / f"v{version}" / "net.pt2", version, width=512, depth=8)
        for version in (1, 2)
    )


def _checkpoint(path: pathlib.Path) -> dict[str, dict]:
    """The archive's state dict as torch loads it, described as the ranks describe theirs."""
    import torch

    return {name: describe(tensor) for name, tensor in torch.export.load(str(path)).state_dict.items()}


async def test_two_ranks_each_get_every_tensor_while_the_store_sends_it_once(two_versions, tmp_path) -> None:
    v1, _ = two_versions
    expected = _checkpoint(v1)
    async with FaultServer(objects={PATH: v1.read_bytes()}) as server:
        results = await run_ranks(server.url(PATH), RANKS, free_port(), tmp_path)
        sent = sum(record.body_bytes for record in server.log)

    for result in results:
        assert result.get("tensors") == expected, result.get("message")
    tensor_bytes = sum(tensor.numel() * tensor.element_size() for tensor in _tensors(v1))
    assert sent <= 1.1 * v1.stat().st_size, f"sent {sent} for {tensor_bytes} bytes of tensors"  # each all: 2x


async def test_an_object_replaced_while_the_ranks_read_fails_every_rank_with_source_changed(
    two_versions, tmp_path
) -> None:
    v1, v2 = two_versions
    async with FaultServer(objects={PATH: v1.read_bytes()}) as server:
        await run_ranks(server.url(PATH), RANKS, free_port(), tmp_path / "clean")
        # the ranks agree on the version before either reads a tensor: the last request is a read
        last = server.log[-1].range
        assert last is not None and not last.startswith("bytes=-")
        server.log.clear()
        change = _ChangeAt(data=v2.read_bytes(), offset=int(last.split("=")[1].split("-")[0]))
        server.faults.append(change)
        results = await run_ranks(server.url(PATH), RANKS, free_port(), tmp_path / "changed")

    assert change.applied == 1 and 412 in [record.status for record in server.log]  # a read saw it
    assert [result.get("error") for result in results] == ["SourceChanged"] * RANKS, results


async def test_ranks_that_opened_different_versions_all_fail_with_source_changed_before_reading(
    two_versions, tmp_path
) -> None:
    v1, v2 = two_versions
    async with FaultServer(objects={PATH: v1.read_bytes()}) as server:
        change = ChangeObject(data=v2.read_bytes(), after=1)  # the second rank's open sees version 2
        server.faults.append(change)
        results = await run_ranks(server.url(PATH), RANKS, free_port(), tmp_path)

    assert change.applied == 1
    assert [result.get("error") for result in results] == ["SourceChanged"] * RANKS, results
    assert all((record.range or "").startswith("bytes=-") for record in server.log)  # nothing read after
    assert len(server.log) == RANKS


@dataclasses.dataclass
class _ChangeAt(ChangeObject):
    """ChangeObject at the request whose range holds byte `offset`: the same tensor's read in every
    run, however the ranks' requests interleave or a read is split into parts."""

    offset: int = 0

    def matches(self, request) -> bool:
        found = re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers.get("range") or "")
        return (
            super().matches(request) and found is not None and int(found[1]) <= self.offset <= int(found[2])
        )


def _tensors(path: pathlib.Path) -> list:
    import torch

    return list(torch.export.load(str(path)).state_dict.values())
