"""torch.distributed.checkpoint through `reader.torch.StorageReader`, in one process (`no_dist=True`):
`dcp.load` fills a state dict with what torch itself loads (torch.export.load for .pt2 archives,
torch.load for torch.save checkpoints and sharded `*.index.json` checkpoints); a ReadItem's region is
`full[region]` for every dtype and layout; bad input fails the load naming the tensor."""

from __future__ import annotations

import pathlib

import pytest

import reader
from testing.paths import ARCHIVES

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner  # noqa: E402
from torch.distributed.checkpoint.metadata import MetadataIndex  # noqa: E402
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem  # noqa: E402

import reader.torch  # noqa: E402

pytestmark = pytest.mark.unit

CONTAINERS = ARCHIVES.parent / "containers"


def _failure(caught: pytest.ExceptionInfo) -> BaseException:
    """What the rank raised, out of the CheckpointException DCP wraps it in."""
    ((error, _),) = caught.value.failures.values()
    return error


def _raw(tensor) -> bytes:
    """Row-major bytes, whatever the dtype (NaNs compare by their bits)."""
    return tensor.contiguous().flatten().view(torch.uint8).numpy().tobytes() if tensor.numel() else b""


def _torch_truth(path: pathlib.Path) -> dict | None:
    """What torch loads: torch.load for a checkpoint (flattened as the reader names it),
    torch.export.load's state_dict for a .pt2 (its constants are not the checkpoint's); None where
    torch cannot."""
    if path.suffix == ".pt":
        from testing.fixtures import make_containers

        flat: dict = {}
        make_containers._flatten(torch.load(path, weights_only=True), [], flat)
        return {name: value for name, value in flat.items() if isinstance(value, torch.Tensor)}
    try:
        program = torch.export.load(path)
    except Exception:  # legacy layouts, pickled payloads, several models, AOTI: not torch.export's
        return None
    return dict(program.state_dict)


TORCH_CASES = [
    path
    for path in sorted(ARCHIVES.glob("*.pt2")) + sorted(CONTAINERS.glob("torch-*/checkpoint.pt"))
    if _torch_truth(path) is not None and path.name != "legacy.pt2"  # (refused: test below)
]


def _zeros_like(truth: dict) -> dict:
    return {name: torch.zeros(value.shape, dtype=value.dtype) for name, value in truth.items()}


@pytest.mark.parametrize("path", TORCH_CASES, ids=[f"{p.parent.name}/{p.name}" for p in TORCH_CASES])
def test_dcp_load_equals_what_torch_loads(path: pathlib.Path) -> None:
    truth = _torch_truth(path)
    assert truth is not None
    state = _zeros_like(truth)
    with reader.torch.StorageReader(path) as storage_reader:
        dcp.load(state, storage_reader=storage_reader, no_dist=True)
    for name, want in truth.items():
        assert state[name].dtype == want.dtype and state[name].shape == want.shape, name
        assert _raw(state[name]) == _raw(want), name


def test_the_metadata_describes_every_readable_tensor_as_one_chunk() -> None:
    with reader.torch.StorageReader(ARCHIVES / "dtypes.pt2") as storage_reader:
        metadata = storage_reader.read_metadata()
        infos = [info for info in storage_reader.archive().tensors() if info.readable]
    assert list(metadata.state_dict_metadata) == [info.name for info in infos]
    for info in infos:
        described = metadata.state_dict_metadata[info.name]
        sizes, zeros = torch.Size(info.sizes), torch.Size([0] * len(info.sizes))
        assert described.size == sizes and described.properties.dtype == getattr(torch, info.dtype)
        assert [(chunk.offsets, chunk.sizes) for chunk in described.chunks] == [(zeros, sizes)]
        assert metadata.storage_data[MetadataIndex(info.name, zeros)] == info.name


def test_model_picks_one_model_of_several() -> None:
    path = ARCHIVES / "two_models.pt2"
    for model in ("encoder", "decoder"):
        truth = reader.torch.load(path, model=model)
        state = _zeros_like(truth)
        with reader.torch.StorageReader(path, model=model) as storage_reader:
            dcp.load(state, storage_reader=storage_reader, no_dist=True)
        assert all(_raw(state[name]) == _raw(truth[name]) for name in truth)
    with pytest.raises(CheckpointException, match="name one with model="):
        dcp.load(_zeros_like(truth), storage_reader=reader.torch.StorageReader(path), no_dist=True)


def test_a_sharded_index_loads_as_one_checkpoint(tmp_path) -> None:
    from testing.fixtures.make_sharded import write_sharded

    index = write_sharded(tmp_path / "gpt")
    state = reader.torch.load(index)  # the reader's own tensors, checked against torch below
    truth = {}
    for shard in sorted(index.parent.glob("*.bin")):
        truth.update(torch.load(shard, weights_only=True))
    assert set(state) == set(truth)
    target = _zeros_like(truth)
    with reader.torch.StorageReader(index) as storage_reader:
        dcp.load(target, storage_reader=storage_reader, no_dist=True)
    for name, want in truth.items():
        assert _raw(target[name]) == _raw(want), name


def test_the_archive_is_opened_once_per_reader() -> None:
    """read_metadata and read_data, and a second load with the same reader, share one open."""
    state = {"lin1.weight": torch.zeros(5, 5)}
    with reader.torch.StorageReader(ARCHIVES / "layouts.pt2") as storage_reader:
        dcp.load(state, storage_reader=storage_reader, no_dist=True)
        opened = storage_reader.archive()
        assert storage_reader.stats["open"]["requests"] == 1
        dcp.load(state, storage_reader=storage_reader, no_dist=True)
        assert storage_reader.archive() is opened and storage_reader.stats["open"]["requests"] == 1


# -- regions: what a rank's ReadItems ask for ----------------------------------------------------


class RegionPlanner(DefaultLoadPlanner):
    """DCP's default planner, but its local plan is the given regions (name, offsets, lengths), each
    into the state dict's tensor of that name (shaped as the region): what a rank's plan holds."""

    def __init__(self, regions: list[tuple[str, tuple[int, ...], tuple[int, ...]]], kind=LoadItemType.TENSOR):
        super().__init__()
        self.regions = regions
        self.kind = kind

    def create_local_plan(self) -> LoadPlan:
        return LoadPlan(
            [
                ReadItem(
                    type=self.kind,
                    dest_index=MetadataIndex(name),
                    dest_offsets=torch.Size([0] * len(lengths)),
                    storage_index=MetadataIndex(name, torch.Size([0] * len(lengths))),
                    storage_offsets=torch.Size(offsets),
                    lengths=torch.Size(lengths),
                )
                for name, offsets, lengths in self.regions
            ]
        )


def _regions(info: reader.TensorInfo) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """A middle box, a box of the last elements on every dim, one row, and an empty box."""
    sizes = tuple(info.sizes or ())
    middle = tuple(size // 3 for size in sizes), tuple(max(1, size // 2) if size else 0 for size in sizes)
    last = tuple(max(0, size - 2) for size in sizes), tuple(min(2, size) for size in sizes)
    boxes = [middle, last]
    if sizes:
        boxes.append(
            ((sizes[0] - 1 if sizes[0] else 0, *([0] * (len(sizes) - 1))), (min(1, sizes[0]), *sizes[1:]))
        )
        boxes.append(((0,) * len(sizes), (0, *sizes[1:])))
    return [
        (offsets, lengths)
        for offsets, lengths in boxes
        if all(o + n <= s for o, n, s in zip(offsets, lengths, sizes))
    ]


@pytest.mark.parametrize("name", ["dtypes.pt2", "layouts.pt2", "many_deflate.pt2", "zero_payload.pt2"])
def test_each_region_is_the_slice_of_the_full_tensor(name: str) -> None:
    """Every tensor's regions (dense, transposed, strided views, DEFLATE entries, zero payloads, every
    dtype) read in one plan equal `full[region]`; tied names' regions come from one storage."""
    path = ARCHIVES / name
    full = reader.torch.load(path)
    with reader.torch.StorageReader(path) as storage_reader:
        infos = [info for info in storage_reader.archive().tensors() if info.readable]
        regions = [(info.name, offsets, lengths) for info in infos for offsets, lengths in _regions(info)]
        by_name: dict[str, list] = {}
        for name, offsets, lengths in regions:
            by_name.setdefault(name, []).append((name, offsets, lengths))
        for round_ in range(max(len(boxes) for boxes in by_name.values())):  # one region a name a load
            batch = [boxes[round_] for boxes in by_name.values() if round_ < len(boxes)]
            state = {name: torch.zeros(lengths, dtype=full[name].dtype) for name, _, lengths in batch}
            planner = RegionPlanner(batch)
            dcp.load(state, storage_reader=storage_reader, planner=planner, no_dist=True)
            for name, offsets, lengths in batch:
                index = tuple(slice(o, o + n) for o, n in zip(offsets, lengths, strict=True))
                assert _raw(state[name]) == _raw(full[name][index]), (name, offsets, lengths)


def test_an_archive_the_reader_refuses_fails_the_load_with_its_reason() -> None:
    """legacy.pt2 (torch < 2.7's pickled weights layout): torch.export.load reads it, the reader
    refuses it, and DCP's load fails with the reader's reason, never with zeros."""
    truth = _torch_truth(ARCHIVES / "legacy.pt2")
    assert truth
    state = _zeros_like(truth)
    with pytest.raises(CheckpointException, match="legacy pickled layout"):
        dcp.load(state, storage_reader=reader.torch.StorageReader(ARCHIVES / "legacy.pt2"), no_dist=True)


# -- bad input -----------------------------------------------------------------------------------


def test_a_state_dict_naming_a_tensor_the_archive_lacks_fails_naming_it() -> None:
    path = ARCHIVES / "layouts.pt2"
    state = {"lin1.weight": torch.zeros(5, 5), "lin9.weight": torch.zeros(5, 5)}
    with pytest.raises(CheckpointException, match=r"Missing key in checkpoint state_dict: lin9\.weight"):
        dcp.load(state, storage_reader=reader.torch.StorageReader(path), no_dist=True)
    assert not state["lin1.weight"].any()  # nothing was read


@pytest.mark.parametrize(
    ("offsets", "lengths"),
    [((4, 0), (2, 5)), ((0, 0), (6, 5)), ((-1, 0), (2, 5)), ((0,), (5,)), ((0, 0, 0), (1, 1, 1))],
    ids=["past-the-end", "too-long", "negative", "too-few-dims", "too-many-dims"],
)
def test_a_region_outside_its_tensor_fails_the_load_naming_it(offsets, lengths) -> None:
    """A ReadItem asking for elements lin1.weight (5 x 5) does not have: RegionOutOfRange (an
    IndexError) naming it, before anything is read; never zeros or a clipped slice."""
    state = {"lin1.weight": torch.zeros(lengths), "lin2.weight": torch.zeros(2, 2)}
    planner = RegionPlanner([("lin2.weight", (0, 0), (2, 2)), ("lin1.weight", offsets, lengths)])
    with reader.torch.StorageReader(ARCHIVES / "layouts.pt2") as storage_reader:
        with pytest.raises(CheckpointException, match=r"'lin1\.weight' has shape \(5, 5\)") as caught:
            dcp.load(state, storage_reader=storage_reader, planner=planner, no_dist=True)
        error = _failure(caught)
        assert isinstance(error, reader.torch.RegionOutOfRange) and isinstance(error, IndexError)
        assert storage_reader.stats.get("data", {"bytes": 0})["bytes"] == 0
    assert not state["lin2.weight"].any()


def test_a_region_is_not_copied_into_a_tensor_of_another_shape() -> None:
    """A planner whose resolve_tensor hands over a tensor the region does not fit: refused (as
    torch's own readers refuse it), not broadcast or cut."""

    class Misfit(RegionPlanner):
        def resolve_tensor(self, read_item: ReadItem):
            return torch.zeros(3, 3)

    state = {"lin1.weight": torch.zeros(2, 2)}
    planner = Misfit([("lin1.weight", (0, 0), (2, 2))])
    with pytest.raises(CheckpointException, match=r"'lin1\.weight'.*shape \(3, 3\)") as caught:
        dcp.load(state, storage_reader=reader.torch.StorageReader(ARCHIVES / "layouts.pt2"), planner=planner,
                 no_dist=True)  # fmt: skip
    assert isinstance(_failure(caught), reader.torch.RegionOutOfRange)


def test_a_byte_item_is_refused_naming_it() -> None:
    """The archive holds tensors only: a custom planner's BYTE_IO item fails the load."""
    planner = RegionPlanner([("lin1.weight", (0, 0), (5, 5))], kind=LoadItemType.BYTE_IO)
    with pytest.raises(CheckpointException, match=r"'lin1\.weight': a byte item") as caught:
        dcp.load({"lin1.weight": torch.zeros(5, 5)}, storage_reader=reader.torch.StorageReader(
            ARCHIVES / "layouts.pt2"), planner=planner, no_dist=True)  # fmt: skip
    assert isinstance(_failure(caught), reader.UnsupportedPayload)


def test_a_non_tensor_entry_of_the_state_dict_is_a_missing_key() -> None:
    state = {"lin1.weight": torch.zeros(5, 5), "step": 3}
    with pytest.raises(CheckpointException, match=r"Missing key in checkpoint state_dict: step"):
        dcp.load(state, storage_reader=reader.torch.StorageReader(ARCHIVES / "layouts.pt2"), no_dist=True)


# -- locations -----------------------------------------------------------------------------------


def test_validate_checkpoint_id_accepts_locations(tmp_path) -> None:
    accepts = reader.torch.StorageReader.validate_checkpoint_id
    assert accepts(ARCHIVES / "layouts.pt2") and accepts(str(ARCHIVES / "layouts.pt2"))
    for location in (
        "s3://bucket/model.pt2",
        "https://example.com/m.bin",
        "gs://b/o",
        "az://c/b",
        "hf://o/r/m.pt2",
    ):
        assert accepts(location), location
    assert not accepts(tmp_path)  # a folder: DCP's own checkpoint layout, FileSystemReader's
    assert not accepts(tmp_path / "missing.pt2")
    assert not accepts(3)  # type: ignore[arg-type]


def test_checkpoint_id_resets_the_reader_to_another_archive() -> None:
    """`dcp.load(checkpoint_id=...)` resets the reader to that location: the archive is opened again."""
    storage_reader = reader.torch.StorageReader(ARCHIVES / "dtypes.pt2")
    assert "lin1.weight" not in storage_reader.read_metadata().state_dict_metadata
    truth = reader.torch.load(ARCHIVES / "layouts.pt2")
    state = {"lin1.weight": torch.zeros(5, 5)}
    dcp.load(state, checkpoint_id=ARCHIVES / "layouts.pt2", storage_reader=storage_reader, no_dist=True)
    assert _raw(state["lin1.weight"]) == _raw(truth["lin1.weight"])
    assert storage_reader.checkpoint_id == ARCHIVES / "layouts.pt2"
    storage_reader.close()
    dcp.load(state, storage_reader=storage_reader, no_dist=True)  # closed: opened again on use
    storage_reader.close()
