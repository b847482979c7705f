"""The memory budget of a streaming load (`max_buffered`): a model several times the budget, served by
nginx on loopback, streams through `reader.torch.iter_load` with each tensor dropped as it lands and
the load's peak resident set (a process of its own, over its resident set before the load) stays
within the budget plus a fixed margin; the tensors are exact, one bigger than the budget included
(read alone); a consumer that stops asking stops the reads (bytes counted at the server). The same
for `reader.safe_open`'s `get_tensor` over `keys()`, which reads the next keys ahead within the budget."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time

import pytest

import reader
import reader.torch
from reader.loading.budget import BudgetWarning
from testing.memory_probe import probe
from testing.servers import NginxProcess
from testing.torch_oracle import needs_torch

pytestmark = [pytest.mark.emulator, needs_torch]

MIB = 1 << 20
BUDGET = 64 * MIB
TENSOR = 16 * MIB
TENSORS = 24
BIG = 96 * MIB  # bigger than the budget: read alone
MARGIN = 48 * MIB  # what is held besides the budget: the tensor being hashed, allocator slack


def _model(path) -> dict[str, str]:
    """A torch.save checkpoint of TENSORS tensors of TENSOR bytes and one of BIG bytes (float32,
    each distinct); their sha256 by name."""
    import torch

    tensors = {
        f"layer{i}.weight": torch.arange(TENSOR // 4, dtype=torch.float32) + i * 0.5 for i in range(TENSORS)
    }
    tensors["embed.weight"] = torch.arange(BIG // 4, dtype=torch.float32) - 7
    torch.save(tensors, path)
    return {name: hashlib.sha256(t.numpy().data).hexdigest() for name, t in tensors.items()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    hashes = _model(root / "model.bin")
    with NginxProcess(root) as nginx:
        yield nginx, hashes


@pytest.mark.parametrize("how", ["iter_load", "safe_open"])
def test_a_model_several_times_the_budget_streams_within_it(served, how) -> None:
    nginx, hashes = served
    model = TENSORS * TENSOR + BIG
    assert model >= 7 * BUDGET
    result = probe("stream_dropped", nginx.url("model.bin"), BUDGET, how)
    assert result["hashes"] == hashes  # every tensor exact, the one bigger than the budget too
    grown = result["peak_rss"] - result["rss_before"]
    # the budget read ahead, and the tensor the consumer holds (handed over: no longer the budget's);
    # the code before the budget held the whole model, 480 MiB
    assert grown <= BUDGET + BIG + MARGIN, grown / MIB


async def test_a_consumer_that_stops_asking_stops_the_reads(served) -> None:
    nginx, hashes = served
    nginx.take_log()
    async with reader.open_archive(nginx.url("model.bin")) as archive:
        nginx.take_log()  # what the open read
        tensors = reader.torch.iter_load(archive, names=sorted(hashes)[1:9], max_buffered=BUDGET)
        async with contextlib.aclosing(tensors):
            name, tensor = await anext(tensors)
            del tensor
            await asyncio.sleep(1.0)  # room for reads that would run ahead (none may)
            sent = sum(record["bytes"] for record in nginx.take_log())
            assert sent <= BUDGET + MIB, sent / MIB  # today: all eight tensors, 128 MiB
            found = {name}
            async for name, tensor in tensors:  # asked again, the reads go on
                assert hashlib.sha256(tensor.numpy().data).hexdigest() == hashes[name]
                found.add(name)
    assert found == set(sorted(hashes)[1:9])


@pytest.mark.parametrize("bad", [0, -1])
async def test_a_budget_of_zero_or_below_is_refused_naming_the_setting(served, bad) -> None:
    nginx, _ = served
    async with reader.open_archive(nginx.url("model.bin")) as archive:
        with pytest.raises(ValueError, match="max_buffered must be a positive number of bytes"):
            reader.torch.iter_load(archive, max_buffered=bad)
        with pytest.raises(ValueError, match="max_buffered"):
            archive.iter_load(max_buffered=bad)


def test_safe_open_reads_the_next_keys_ahead_within_the_budget(served) -> None:
    nginx, hashes = served
    with reader.safe_open(nginx.url("model.bin"), max_buffered=BUDGET) as handle:
        keys = handle.keys()
        nginx.take_log()  # what the open read
        first = handle.get_tensor(keys[1])
        time.sleep(1.0)  # room for the reads ahead (they stop at the budget)
        sent = sum(record["bytes"] for record in nginx.take_log())
        assert TENSOR + 2 * TENSOR <= sent <= TENSOR + BUDGET + MIB, sent / MIB  # today: TENSOR alone
        assert hashlib.sha256(first.numpy().data).hexdigest() == hashes[keys[1]]
        del first
        for name in keys[2:]:  # in turn
            assert hashlib.sha256(handle.get_tensor(name).numpy().data).hexdigest() == hashes[name]
        with pytest.warns(BudgetWarning, match="read alone"):  # out of turn, bigger than the budget
            big = handle.get_tensor(keys[0])
        assert hashlib.sha256(big.numpy().data).hexdigest() == hashes[keys[0]]
        assert hashlib.sha256(handle.get_tensor(keys[5]).numpy().data).hexdigest() == hashes[keys[5]]


def test_the_vllm_weights_stop_when_vllm_stops_asking(served) -> None:
    """The vLLM format's iterator hands over one tensor at a time and reads ahead within the budget:
    bounded by bytes, not by an unbounded queue of tensors."""
    from reader.integrations.vllm.weights import iter_weights

    nginx, hashes = served
    weights = iter_weights([nginx.url("model.bin")], max_buffered=BUDGET)
    try:
        nginx.take_log()
        name, tensor = next(weights)
        assert hashlib.sha256(tensor.numpy().data).hexdigest() == hashes[name]
        del tensor
        time.sleep(1.0)  # room for reads that would run ahead
        sent = sum(record["bytes"] for record in nginx.take_log())
        assert sent <= BUDGET + BIG + MIB, sent / MIB  # today: the whole model, 480 MiB
        found = {name} | {name for name, _ in weights}
    finally:
        weights.close()
    assert found == set(hashes)


def test_dcp_read_data_stops_while_the_tensors_are_not_copied_out(served) -> None:
    """`StorageReader.read_data` reads whole tensors within the budget: while the state dict's first
    tensor is not copied out (its planner stalls), the reads do not run further ahead than it."""
    import threading

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    nginx, hashes = served
    go_on, first_in = threading.Event(), threading.Event()

    class Stalling(DefaultLoadPlanner):
        def commit_tensor(self, read_item, tensor) -> None:
            first_in.set()
            assert go_on.wait(60)  # a guard, not a timing
            super().commit_tensor(read_item, tensor)

    names = sorted(hashes)[1:9]  # eight tensors of TENSOR bytes
    state = {name: torch.empty(TENSOR // 4) for name in names}
    storage_reader = reader.torch.StorageReader(nginx.url("model.bin"), max_buffered=2 * TENSOR)
    loading = threading.Thread(
        target=dcp.load,
        args=(state,),
        kwargs={"storage_reader": storage_reader, "planner": Stalling(), "no_dist": True},
    )
    try:
        storage_reader.read_metadata()
        nginx.take_log()
        loading.start()
        assert first_in.wait(60)
        time.sleep(1.0)  # room for reads that would run ahead
        sent = sum(record["bytes"] for record in nginx.take_log())
        assert sent <= 2 * TENSOR + MIB, sent / MIB  # today: all eight, 128 MiB
    finally:
        go_on.set()
        loading.join(120)
        storage_reader.close()
    for name in names:
        assert hashlib.sha256(state[name].numpy().data).hexdigest() == hashes[name]


def test_dcp_refuses_a_budget_of_zero() -> None:
    with pytest.raises(ValueError, match="max_buffered must be a positive number of bytes"):
        reader.torch.StorageReader("http://127.0.0.1:9/model.bin", max_buffered=0)
