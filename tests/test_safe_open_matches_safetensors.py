"""reader.safe_open answers what safetensors' own safe_open answers for a safetensors file of the same
weights (keys, shapes, dtype strings, tensors, slices) on every fixture container read from local disk;
tied names come out as separate copies; several threads read at once; bad input raises typed errors.
The same checks over HTTP and from S3: test_safe_open_remote.py."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reader
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

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")

CONTAINERS = ARCHIVES.parent / "containers" / f"torch-{'.'.join(torch.__version__.split('.')[:2])}"
# (file, model): every fixture container the reader reads weights from
CASES = [
    (ARCHIVES / "dtypes.pt2", None),
    (ARCHIVES / "layouts.pt2", None),
    (ARCHIVES / "many.pt2", None),
    (ARCHIVES / "many_deflate.pt2", None),
    (ARCHIVES / "no_weights.pt2", None),
    (ARCHIVES / "pickled.pt2", None),
    (ARCHIVES / "zero_payload.pt2", None),
    (ARCHIVES / "two_models.pt2", "encoder"),
    (ARCHIVES / "two_models.pt2", "decoder"),
    (CONTAINERS / "checkpoint.pt", None),
    (CONTAINERS / "aoti_pickle.pt2", None),
    (CONTAINERS / "mixed.pt2", None),
]
FLOAT8_AND_BF16 = {
    "BF16",
    "F8_E4M3",
    "F8_E5M2",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
}  # no NumPy dtype in safetensors


def case_id(case: tuple[pathlib.Path, str | None]) -> str:
    path, model = case
    return path.name + (f"[{model}]" if model else "")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, pathlib.Path]:
    """The service's safetensors bundle of each case."""
    out = tmp_path_factory.mktemp("bundles")
    return {case_id(c): write_bundle(c[0], out / f"{case_id(c)}.safetensors", model=c[1]) for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_torch_tensors_and_slices_equal_safetensors(case, bundles):
    path, model = case
    with (
        reader.safe_open(path, "pt", model=model) as ours,
        safetensors.safe_open(bundles[case_id(case)], "pt") as theirs,
    ):
        assert_same_handles(ours, theirs)
        assert ours.metadata()["format"] == theirs.metadata()["format"] == "pt"
        everything = ours.get_tensors()
        assert list(everything) == ours.offset_keys()
        for name, tensor in everything.items():
            assert_same(tensor, theirs.get_tensor(name), name)
        assert ours.metadata().get("pt2serve.skipped") == theirs.metadata().get("pt2serve.skipped")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_numpy_arrays_and_slices_equal_safetensors(case, bundles):
    path, model = case
    with (
        reader.safe_open(path, "np", model=model) as ours,
        safetensors.safe_open(bundles[case_id(case)], "np") as theirs,
    ):
        listed = ours.keys()
        names = [name for name in listed if ours.get_slice(name).get_dtype() not in FLOAT8_AND_BF16]
        assert_same_handles(ours, theirs, names, negative=False)
        for name in set(listed) - set(names):  # ours has them, as ml_dtypes arrays
            array = ours.get_tensor(name)
            assert isinstance(array, np.ndarray) and list(array.shape) == ours.get_slice(name).get_shape()


def test_shared_linear_equals_torch_exports_state_dict(shared_linear, tmp_path):
    exported = torch.export.load(shared_linear)
    state = dict(exported.state_dict)  # its constants are not the checkpoint's
    oracle = write_state_dict(state, tmp_path / "linear.safetensors")
    with reader.safe_open(shared_linear) as ours, safetensors.safe_open(oracle, "pt") as theirs:
        assert_same_handles(ours, theirs)
        for name, tensor in state.items():
            assert torch.equal(ours.get_tensor(name), tensor)


def test_a_sharded_index_opens_as_one_handle(tmp_path):
    index = write_sharded(tmp_path / "gpt")
    state = {}
    for shard in sorted(index.parent.glob("*.bin")):
        state.update(torch.load(shard, weights_only=True))
    oracle = write_state_dict(state, tmp_path / "gpt.safetensors")
    with reader.safe_open(index) as ours, safetensors.safe_open(oracle, "pt") as theirs:
        assert_same_handles(ours, theirs)
        assert ours.metadata()["pt2serve.container"] == "sharded-checkpoint"
        shards = [_shard_of(index, name) for name in ours.offset_keys()]
        assert len(set(shards)) > 1 and shards == sorted(shards)  # shard by shard, in file-name order


def _shard_of(index: pathlib.Path, name: str) -> str:
    import json

    return json.loads(index.read_text())["weight_map"][name]


# -- slices: hypothesis over indices ----------------------------------------------------------------


@pytest.fixture(scope="module")
def layouts_pair(tmp_path_factory):
    """layouts.pt2 (views, non-dense strides, channels_last, tied names) beside its bundle."""
    bundle = write_bundle(
        ARCHIVES / "layouts.pt2", tmp_path_factory.mktemp("layouts") / "layouts.safetensors"
    )
    with reader.safe_open(ARCHIVES / "layouts.pt2") as ours, safetensors.safe_open(bundle, "pt") as theirs:
        yield ours, theirs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_slice_equals_safetensors_slice(layouts_pair, data):
    ours, theirs = layouts_pair
    name = data.draw(st.sampled_from(ours.keys()))
    index = data.draw(indices(ours.get_slice(name).get_shape()))
    assert_same(ours.get_slice(name)[index], theirs.get_slice(name)[index], f"{name}[{index!r}]")


@pytest.fixture(scope="module")
def numpy_handles():
    with (
        reader.safe_open(ARCHIVES / "dtypes.pt2", "np") as dtypes,
        reader.safe_open(ARCHIVES / "layouts.pt2", "np") as layouts,
    ):
        yield [dtypes, layouts]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_negative_steps_equal_numpy_indexing(numpy_handles, data):
    """safetensors refuses negative steps; here they give what NumPy's `full[index]` gives."""
    ours = data.draw(st.sampled_from(numpy_handles))
    name = data.draw(st.sampled_from(ours.keys()))
    shape = ours.get_slice(name).get_shape()
    index = tuple(slice(None, None, data.draw(st.integers(-3, -1))) for _ in shape)
    got = ours.get_slice(name)[index]
    want = ours.get_tensor(name)[index]
    assert got.shape == want.shape and got.tobytes() == np.ascontiguousarray(want).tobytes()


# -- copies, threads, one open ----------------------------------------------------------------------


def test_tied_names_and_views_are_separate_writable_copies():
    path = CONTAINERS / "checkpoint.pt"  # tied weights and views of one storage

    async def storages() -> dict[str, list[reader.TensorInfo]]:
        async with reader.open_archive(path) as archive:
            groups: dict[str, list[reader.TensorInfo]] = {}
            for info in archive.tensors():
                if info.readable:
                    groups.setdefault(info.storage.entry, []).append(info)
            return groups

    shared = [infos for infos in asyncio.run(storages()).values() if len(infos) > 1]
    assert shared
    with reader.safe_open(path) as f:
        for infos in shared:
            tensors = [f.get_tensor(info.name) for info in infos]
            pointers = {tensor.untyped_storage().data_ptr() for tensor in tensors}
            assert len(pointers) == len(tensors)  # no two share memory
            geometry = {(info.sizes, info.strides, info.storage_offset) for info in infos}
            if len(geometry) == 1:  # tied: the same values
                assert len({raw(tensor) for tensor in tensors}) == 1
            before = [raw(tensor) for tensor in tensors[1:]]
            tensors[0].reshape(-1)[0] = 1  # writable, and no other name changes
            assert [raw(tensor) for tensor in tensors[1:]] == before
        name = shared[0][0].name
        first, second = f.get_tensor(name), f.get_tensor(name)  # each read a fresh copy
        assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()


def test_several_threads_read_right_bytes_at_once(tmp_path):
    path = ARCHIVES / "many.pt2"
    bundle = write_bundle(path, tmp_path / "many.safetensors")
    with reader.safe_open(path) as ours, safetensors.safe_open(bundle, "pt") as theirs:
        names = ours.keys()
        expected = {name: raw(theirs.get_tensor(name)) for name in names}
        halves = {name: raw(theirs.get_slice(name)[1::2]) for name in names}
        barrier = threading.Barrier(8)

        def work(worker: int) -> int:
            barrier.wait()
            checked = 0
            for name in names[worker::8]:
                assert raw(ours.get_tensor(name)) == expected[name], name
                assert raw(ours.get_slice(name)[1::2]) == halves[name], name
                checked += 1
            return checked

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(work, range(8))) == len(names)
        opened = ours.stats["open"]["requests"]
        ours.get_tensor(names[0])
        assert ours.stats["open"]["requests"] == opened  # reads never open again


def test_device_moves_torch_tensors(shared_linear):
    with reader.safe_open(shared_linear, "pt", device="meta") as f:
        name = f.keys()[0]
        assert f.get_tensor(name).device.type == "meta"
        assert f.get_slice(name)[0:1].device.type == "meta"


# -- bad input, close ------------------------------------------------------------------------------


def test_a_missing_name_is_a_key_error_naming_it():
    with reader.safe_open(ARCHIVES / "layouts.pt2") as f:
        for call in (f.get_tensor, f.get_slice):
            with pytest.raises(KeyError, match=r"no\.such\.tensor") as caught:
                call("no.such.tensor")
            assert isinstance(caught.value, reader.TensorNotFound)
            assert "no tensor 'no.such.tensor'" in str(caught.value)  # printed as written, not quoted


def test_a_name_safetensors_cannot_hold_is_left_out_and_refused_by_name():
    with reader.safe_open(ARCHIVES / "dtypes.pt2") as f:
        skipped = f.metadata()["pt2serve.skipped"].split(",")
        listed = f.keys()
        assert "t_complex32" in skipped and "t_complex32" not in listed
        with pytest.raises(reader.UnsupportedPayload, match=r"t_complex32.*complex32"):
            f.get_tensor("t_complex32")
        with pytest.raises(reader.UnsupportedPayload, match="t_complex32"):
            f.get_slice("t_complex32")


def test_indices_outside_the_tensor_are_index_errors():
    with reader.safe_open(ARCHIVES / "layouts.pt2") as f:
        listed = f.keys()
        name = next(n for n in listed if len(f.get_slice(n).get_shape()) == 2)
        rows, cols = f.get_slice(name).get_shape()
        piece = f.get_slice(name)
        for index in (rows, -rows - 1, (0, cols), (0, 0, 0), (..., 0, ..., 0)):
            with pytest.raises(IndexError):
                piece[index]
        assert piece[rows + 5 : rows + 9].shape == (0, cols)  # slice bounds are clipped, as in Python


def test_after_close_every_call_is_refused_and_the_loop_thread_ends(shared_linear):
    f = reader.safe_open(shared_linear)
    name = f.keys()[0]
    piece = f.get_slice(name)
    f.close()
    for call in (f.keys, f.offset_keys, f.metadata, lambda: f.get_tensor(name), lambda: f.get_slice(name),
                 lambda: piece[0]):  # fmt: skip
        with pytest.raises(ValueError, match="closed"):
            call()
    f.close()  # twice is fine
    assert not [t for t in threading.enumerate() if t.name == f"safe_open {shared_linear}"]


def test_a_handle_dropped_unclosed_stops_its_thread(shared_linear):
    """The handle's own thread, by its name: the process's thread count also moves with threads
    that other work (an executor's idle workers) starts and ends meanwhile."""
    name = f"safe_open {shared_linear}"
    f = reader.safe_open(shared_linear)
    f.get_tensor(f.keys()[0])
    assert [t for t in threading.enumerate() if t.name == name]
    del f
    gc.collect()
    assert not [t for t in threading.enumerate() if t.name == name]


def test_bad_arguments_are_clear_errors(shared_linear):
    with pytest.raises(ValueError, match="framework 'jax'"):
        reader.safe_open(shared_linear, "jax")
    with pytest.raises(ValueError, match="CPU"):
        reader.safe_open(shared_linear, "np", device="cuda")
    with pytest.raises(ValueError, match="not a torch device"):
        reader.safe_open(shared_linear, "pt", device="nowhere:7")
    with pytest.raises(reader.ModelNotFound):
        reader.safe_open(ARCHIVES / "two_models.pt2")
    with pytest.raises(reader.UnsupportedPayload, match="legacy"):
        reader.safe_open(ARCHIVES / "legacy.pt2")
    with pytest.raises(reader.NoReadableWeights):
        reader.safe_open(CONTAINERS / "aoti_so.pt2")
    opened = (shared_linear, ARCHIVES / "two_models.pt2", ARCHIVES / "legacy.pt2")
    failed = {f"safe_open {path}" for path in opened}
    assert not [t for t in threading.enumerate() if t.name in failed]  # a failed open leaves no thread
