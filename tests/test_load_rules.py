"""reader.load / Archive.load / reader.torch.load on local files: whole models as one read plan.

Every fixture and container loads to what per-tensor reads give; sharing between names equals
torch's (torch as the oracle, where installed); the synchronous calls leave no task or loop behind;
a local file replaced or rewritten after open is handled. No socket, no subprocess: the remote
loads, faults and memory bounds are in test_load.py."""

from __future__ import annotations

import asyncio
import collections
import json
import mmap
import os
import pathlib
import zipfile

import numpy as np
import pytest

import reader
from testing.load_cases import CASE_IDS, CASES, expect_reads
from testing.paths import ARCHIVES, CONTAINERS
from testing.torch_oracle import needs_torch
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("path", "model"), CASES, ids=CASE_IDS)
async def test_local_load_equals_reads(path: pathlib.Path, model: str) -> None:
    async with reader.open_archive(path) as archive:
        arrays = await archive.load(model=model)
        assert archive.stats.get("data", {"bytes": 0})["bytes"] == 0  # mapped: nothing read yet
        await expect_reads(archive, model, arrays)
        for info in archive.tensors(model=model):  # views of the mapped file are read-only
            if info.readable and info.storage.compression == "stored" and info.storage.nbytes:
                assert info.dtype == "complex32" or not arrays[info.name].flags.writeable, info.name
        copied = await archive.load(model=model, copy=True, verify=True)
        assert all(array.flags.writeable for array in copied.values())
        assert {n: a.tobytes() for n, a in copied.items()} == {n: a.tobytes() for n, a in arrays.items()}


def test_sync_load_selects_by_prefix_names_and_model() -> None:
    path = ARCHIVES / "two_models.pt2"
    with pytest.raises(reader.ModelNotFound):
        reader.load(path)
    encoder = reader.load(path, model="encoder")
    assert encoder and all(isinstance(a, np.ndarray) for a in encoder.values())
    first = next(iter(encoder))
    assert list(reader.load(path, model="encoder", names=[first])) == [first]
    prefix = first.split(".")[0]
    assert set(reader.load(path, model="encoder", prefix=prefix)) == {
        n for n in encoder if n.startswith(prefix)
    }
    with pytest.raises(ValueError, match="order"):
        reader.load(path, model="encoder", order="backwards")
    with pytest.raises(reader.TensorNotFound):
        reader.load(path, model="encoder", names=["nope"])


def test_pickled_payload_is_refused_by_name_and_left_out_otherwise() -> None:
    path = ARCHIVES / "pickled.pt2"

    async def infos():
        async with reader.open_archive(path) as archive:
            return archive.tensors()

    tensors = asyncio.run(infos())
    refused = [t.name for t in tensors if not t.readable]
    assert refused
    assert set(reader.load(path)) == {t.name for t in tensors if t.readable}
    with pytest.raises(reader.UnsupportedPayload):
        reader.load(path, names=refused)


def test_layouts_keep_strides_or_come_row_major() -> None:
    path = ARCHIVES / "layouts.pt2"

    async def infos():
        async with reader.open_archive(path) as archive:
            return {t.name: t for t in archive.tensors()}

    layouts = asyncio.run(infos())
    default = reader.load(path)
    contiguous = reader.load(path, order="contiguous")
    for name, info in layouts.items():
        itemsize = info.itemsize or 1
        if info.numel:
            assert default[name].strides == tuple(s * itemsize for s in info.strides or ())
        assert contiguous[name].flags.c_contiguous
        assert np.array_equal(contiguous[name], default[name])
    assert any(not a.flags.c_contiguous for a in default.values())  # the fixture has non-row-major views


def _groups(tensors: dict, pointer) -> list[list[str]]:
    found = collections.defaultdict(list)
    for name, value in tensors.items():
        found[pointer(value)].append(name)
    return sorted(sorted(names) for names in found.values())


def _torch_truth(path: pathlib.Path, model: str) -> dict | None:
    """What torch itself loads: torch.load for checkpoints (flattened), torch.export.load's
    state_dict plus constants for export archives; None where torch cannot load it."""
    import torch

    from testing.fixtures import make_containers

    if path.suffix == ".pt":
        flat: dict = {}
        make_containers._flatten(torch.load(path, weights_only=True), [], flat)
        return {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}
    if model != "model" or path.name in ("pickled.pt2", "mixed.pt2"):
        return None  # torch.export.load loads one model; pickled payloads and AOTI are not its
    program = torch.export.load(path)
    return {
        **program.state_dict,
        **{k: v for k, v in program.constants.items() if isinstance(v, torch.Tensor)},
    }


@needs_torch
@pytest.mark.parametrize(("path", "model"), CASES, ids=CASE_IDS)
def test_torch_load_equals_torch(path: pathlib.Path, model: str) -> None:

    import reader.torch

    tensors = reader.torch.load(path, model=model)
    arrays = reader.load(path, model=model)
    # NumPy views share memory exactly where the torch tensors share a storage
    bases = {name: tensors[name].untyped_storage().data_ptr() for name in tensors}
    numpy_groups = _groups(arrays, lambda a: _shared_base(a, arrays, bases))
    torch_groups = _groups(tensors, lambda t: t.untyped_storage().data_ptr())
    assert [g for g in numpy_groups if len(g) > 1] == [
        g for g in torch_groups if len(g) > 1 and _nonempty(g, arrays)
    ]
    truth = _torch_truth(path, model)
    if truth is None:
        expected = CONTAINERS / path.parent.name / "expected.json"
        if expected.exists():  # AOTI packages: torch's storage groups as recorded at generation
            spec = json.loads(expected.read_text())["archives"][path.name].get("aoti_tensors", {})
            recorded = spec.get(model.removeprefix("aoti/"), {})
            if recorded:
                truth_groups = _groups(recorded, lambda t: t["storage_group"])
                assert torch_groups == truth_groups
        return
    assert set(tensors) == set(truth)
    for name, want in truth.items():
        got = tensors[name]
        assert (got.dtype, got.shape, got.stride(), got.storage_offset()) == (
            want.dtype, want.shape, want.stride(), want.storage_offset()
        ), name  # fmt: skip
        if want.numel():
            assert _raw(got) == _raw(want.detach()), name
    assert torch_groups == _groups(truth, lambda t: t.untyped_storage().data_ptr())


def _shared_base(array: np.ndarray, arrays: dict[str, np.ndarray], bases: dict[str, int]) -> int:
    """The storage pointer of the first array that shares memory with `array` (itself if none)."""
    for name, other in arrays.items():
        if array.size and other.size and np.shares_memory(array, other):
            return bases[name]
    return id(array)


def _nonempty(group: list[str], arrays: dict[str, np.ndarray]) -> bool:
    return all(arrays[name].size for name in group)


def _raw(tensor) -> bytes:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@needs_torch
def test_torch_state_dict_loads_into_the_module(tmp_path) -> None:
    import torch

    import reader.torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    path = tmp_path / "seq.pt2"
    torch.export.save(torch.export.export(model, (torch.zeros(1, 4),)), path)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    fresh.load_state_dict(reader.torch.load(path))
    for (name, want), got in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(want, got), name


@pytest.mark.parametrize("order", ["in order", "reversed", "interleaved"])
def test_arrivals_find_where_the_first_gap_begins(order: str) -> None:
    from reader.loading.landing import Arrivals

    spans = [(100 + 10 * i, 10) for i in range(10)]
    if order == "reversed":
        spans.reverse()
    elif order == "interleaved":
        spans = spans[::2] + spans[1::2]
    arrivals = Arrivals(100, 200)
    seen = []
    for at, nbytes in spans:
        arrivals.add(at, nbytes)
        seen.append(arrivals.prefix)
    assert seen[-1] == 200
    assert seen == sorted(seen)  # the prefix never moves back
    landed = set()
    for (at, nbytes), prefix in zip(spans, seen, strict=True):
        landed.update(range(at, at + nbytes))
        gap = next(x for x in range(100, 201) if x not in landed or x == 200)
        assert prefix == gap


def test_prefaulting_backs_the_pages_and_leaves_written_bytes_alone() -> None:
    import threading

    from reader.loading import prefault

    if prefault._madvise() is None:
        pytest.skip("MADV_POPULATE_WRITE is Linux's")
    buffer = np.empty(prefault.STEP * 4 + 12345, dtype=np.uint8)  # a fresh mapping of its own
    written = np.random.default_rng(27).integers(0, 256, prefault.STEP, dtype=np.uint8)
    buffer[: len(written)] = written  # what a receive wrote before the thread got there

    def resident() -> int:
        return int(pathlib.Path("/proc/self/statm").read_text().split()[1]) * mmap.PAGESIZE

    before = resident()
    prefault.populate(buffer, threading.Event())
    assert np.array_equal(buffer[: len(written)], written)
    assert resident() - before >= 2 * prefault.STEP  # the pages not written yet are backed now
    stopped = np.empty(prefault.STEP * 4, dtype=np.uint8)
    stop = threading.Event()
    stop.set()
    prefault.populate(stopped, stop)  # a finished receive: nothing more is faulted in


def test_sync_load_leaves_no_event_loop_behind() -> None:
    """The kept loop is never the thread's current one: asyncio code around reader.load runs as if
    it were not there."""
    path = ARCHIVES / "layouts.pt2"
    reader.load(path)

    async def inside() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    outer = asyncio.run(inside())
    assert set(reader.load(path)) == {t.name for t in asyncio.run(_infos(path)) if t.readable}
    assert not outer.is_running()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


async def _infos(path: pathlib.Path) -> list:
    async with reader.open_archive(path) as archive:
        return archive.tensors()


async def test_local_file_rewritten_in_place_after_open_raises_source_changed(tmp_path) -> None:
    path = tmp_path / "layouts.pt2"
    path.write_bytes((ARCHIVES / "layouts.pt2").read_bytes())
    async with reader.open_archive(path) as archive:
        with path.open("r+b") as file:  # same inode, new bytes and modification time
            file.write(file.read()[::-1])
        os.utime(path, ns=(0, 12345))
        with pytest.raises(reader.SourceChanged):
            await archive.load()


async def test_local_file_replaced_after_open_loads_the_opened_file(tmp_path) -> None:
    """A path that names a new file now (an atomic rename over it) does not change what an open
    archive loads: the bytes its index was read from."""
    path = tmp_path / "layouts.pt2"
    path.write_bytes((ARCHIVES / "layouts.pt2").read_bytes())
    async with reader.open_archive(path) as archive:
        replacement = tmp_path / "other.pt2"
        replacement.write_bytes((ARCHIVES / "dtypes.pt2").read_bytes())
        os.replace(replacement, path)
        arrays = await archive.load()
        await expect_reads(archive, archive.models[0], arrays)


@needs_torch
def test_zeros_viewed_with_two_item_sizes_share_one_storage(tmp_path) -> None:
    """A zero-byte payload is zeros of its views' extent; views of several item sizes on it (12
    bytes as 3 float32 and as 1 float64) each come out whole, on one storage."""
    import torch

    import reader.torch

    plain = tmp_path / "plain.pt2"
    write_pt2(plain, {"a": (7, [3], b"")}, tied={"b": "a"})
    path = tmp_path / "mixed.pt2"
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                meta = config["config"]["b"]["tensor_meta"]
                meta.update(dtype=8, sizes=[{"as_int": 1}], strides=[{"as_int": 1}])  # one float64
                data = json.dumps(config).encode()
            target.writestr(item.filename, data)
    tensors = reader.torch.load(path)
    assert tensors["a"].dtype == torch.float32 and tensors["a"].tolist() == [0.0, 0.0, 0.0]
    assert tensors["b"].dtype == torch.float64 and tensors["b"].tolist() == [0.0]
    assert tensors["a"].untyped_storage().data_ptr() == tensors["b"].untyped_storage().data_ptr()
    arrays = reader.load(path)
    assert arrays["a"].tolist() == [0.0, 0.0, 0.0] and arrays["b"].tolist() == [0.0]


def test_each_sync_load_runs_in_the_callers_context() -> None:
    """As under asyncio.run, a call sees the context variables its caller has set (a tracing span,
    say), each call its own, though the main thread keeps one loop for them."""
    import contextvars

    from reader.sources import LocalFileSource

    trace: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="none")
    seen: list[str] = []

    class Traced(LocalFileSource):
        async def read(self, start: int, end: int, *, purpose: str = "data") -> bytes:
            seen.append(trace.get())
            return await super().read(start, end, purpose=purpose)

    path = ARCHIVES / "layouts.pt2"
    for span in ("first", "second"):
        trace.set(span)
        reader.load(asyncio.run(Traced.open(path)))
        assert seen and set(seen) == {span}
        seen.clear()


def test_a_sync_call_leaves_no_task_running() -> None:
    """What a call leaves running is cancelled before it returns, as asyncio.run does, though the
    main thread keeps its loop for the next call."""
    from reader.blocking.sync import run_sync

    started: list[asyncio.Task] = []

    async def spawn() -> str:
        started.append(asyncio.create_task(asyncio.sleep(3600)))
        await asyncio.sleep(0)
        return "done"

    assert run_sync(spawn) == "done"
    assert started[0].cancelled()
    assert run_sync(spawn) == "done"  # the kept loop goes on working


def test_run_sync_raises_a_load_s_error_without_an_unrelated_context() -> None:
    """An error a load raises (or keeps for later) is not chained to run_sync's own check for a
    running loop: that RuntimeError's traceback holds run_sync's frame, and with it the model the
    call returns, until the cyclic garbage collector runs."""
    from reader.blocking.sync import run_sync

    async def failing() -> None:
        raise ValueError("the load failed")

    with pytest.raises(ValueError) as caught:
        run_sync(failing)
    assert caught.value.__context__ is None
