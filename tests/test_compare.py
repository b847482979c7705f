"""reader.compare: what differs between two archives, proven cheaply where the metadata can, and
by how much (figures checked against NumPy on the full arrays)."""

from __future__ import annotations

import pathlib
import tracemalloc

import numpy as np
import pytest

import reader
from reader.pt2.dtypes import BY_NAME
from testing.checks import run
from testing.fixtures.rezip import read_entries, write_entries
from testing.paths import ARCHIVES
from testing.torch_oracle import needs_torch
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.unit

CONTAINERS = ARCHIVES.parent / "containers" / "torch-2.13"
SELF_COMPARABLE = sorted(
    [p for p in ARCHIVES.glob("*.pt2") if p.name != "legacy.pt2"]  # legacy.pt2 does not open (by design)
    + [CONTAINERS / name for name in ("checkpoint.pt", "mixed.pt2", "aoti_pickle.pt2")]
)
FLOAT32, FLOAT64 = 7, 8


async def _compare(path_a, path_b, **kwargs):
    async with reader.open_archive(path_a) as a, reader.open_archive(path_b) as b:
        return await reader.compare(a, b, **kwargs), a.stats, b.stats


def oracle(x: np.ndarray, y: np.ndarray) -> dict:
    """The figures, by their definition, over the full arrays (norms of values scaled by the
    largest magnitude, so float64 values near the limit do not overflow)."""
    x, y = x.reshape(-1), y.reshape(-1)
    wide = np.complex128 if x.dtype.kind == "c" else np.float64
    xf, yf = x.astype(wide), y.astype(wide)
    differ = x != y
    if x.dtype.kind not in "iub":
        differ &= ~(np.isnan(xf) & np.isnan(yf))
    keep = np.isfinite(xf) & np.isfinite(yf)
    xf, yf = xf[keep], yf[keep]
    scale = max(np.abs(xf).max(), np.abs(yf).max())
    xs, ys = xf / scale, yf / scale
    norm_a, norm_b = np.linalg.norm(xs), np.linalg.norm(ys)
    with np.errstate(over="ignore"):
        max_abs = float(np.abs(xf - yf).max())
    return {
        "max_abs_diff": max_abs if np.isfinite(max_abs) else None,
        "relative_l2": float(np.linalg.norm(xs - ys) / norm_a),
        "cosine": float(np.real(np.vdot(ys, xs)) / (norm_a * norm_b)),
        "fraction_differ": float(np.count_nonzero(differ) / x.size),
        "elements_differ": int(np.count_nonzero(differ)),
    }


def changed_copy(src: pathlib.Path, dst: pathlib.Path, entry: str, at: int, xor: int = 0x01) -> pathlib.Path:
    """`src` rewritten with one byte of one payload entry flipped."""
    entries = []
    for name, data in read_entries(src):
        if name == entry:
            edited = bytearray(data)
            edited[at] ^= xor
            data = bytes(edited)
        entries.append((name, data))
    write_entries(dst, entries)
    return dst


@pytest.mark.parametrize("path", SELF_COMPARABLE, ids=lambda p: p.name)
def test_every_fixture_against_itself_is_same_without_reading_data(path):
    diff, stats_a, stats_b = run(_compare(path, path))
    assert diff.identical and bool(diff.tensors) == (path.name != "no_weights.pt2")
    assert {t.status for t in diff.tensors} <= {"same"}
    assert {t.proof for t in diff.tensors} <= {"crc32"}
    assert "data" not in stats_a and "data" not in stats_b  # no data request on either side
    summary = diff.to_dict()["summary"]
    assert summary["counts"]["same"] == len(diff.tensors) and summary["bytes_differ"] == 0
    assert summary["modules"] == []


def _lonely(archive: reader.Archive, dtype: str | None = None) -> reader.TensorInfo:
    """A readable tensor of `dtype` that is the only name viewing its payload, with elements."""
    viewers: dict[str, int] = {}
    for info in archive.tensors():
        viewers[info.storage.entry] = viewers.get(info.storage.entry, 0) + 1
    for info in archive.tensors():
        if (
            info.readable
            and info.numel
            and info.storage.nbytes
            and info.dense
            and viewers[info.storage.entry] == 1
            and (dtype is None or info.dtype == dtype)
        ):
            return info
    raise AssertionError(f"no lonely {dtype} tensor")


async def _one_element_changed(src: pathlib.Path, tmp: pathlib.Path, dtype: str | None, xor: int):
    async with reader.open_archive(src) as a:
        info = _lonely(a, dtype)
    # the last byte of the tensor's first element: a low mantissa / value bit for every dtype
    at = info.storage.offset + (info.itemsize or 1) - 1
    dst = changed_copy(src, tmp / f"{src.stem}-{info.dtype}.pt2", info.storage.entry, at, xor)
    async with reader.open_archive(src) as a, reader.open_archive(dst) as b:
        diff = await reader.compare(a, b, model_a=info.model, model_b=info.model)
        x = await a.read_numpy(info.name, model=info.model)
        y = await b.read_numpy(info.name, model=info.model)
    return info, diff, x, y


def _assert_one_changed(info, diff, x, y):
    changed = [t for t in diff.tensors if t.status != "same"]
    assert [t.name for t in changed] == [info.name]
    assert changed[0].status == "changed"
    figures = changed[0].figures.to_dict()
    assert figures["sampled"] is False and figures["elements"] == x.size
    want = oracle(x, y)
    assert figures["elements_differ"] == want["elements_differ"] == 1
    for key in ("max_abs_diff", "relative_l2", "cosine", "fraction_differ"):
        if want[key] is None:
            assert figures[key] is None, key
        else:
            assert figures[key] == pytest.approx(want[key], rel=1e-9, abs=1e-15), key


@pytest.mark.parametrize(
    "name",
    ["layouts.pt2", "many.pt2", "many_deflate.pt2", "two_models.pt2", "zero_payload.pt2", "pickled.pt2"],
)
def test_one_element_changed_is_that_tensor_alone_with_numpys_figures(tmp_path, name):
    info, diff, x, y = run(_one_element_changed(ARCHIVES / name, tmp_path, "float32", 0x40))
    _assert_one_changed(info, diff, x, y)


@pytest.mark.parametrize(
    "dtype", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float64", "int64", "uint8", "complex64"]
)
def test_one_element_changed_in_each_dtype_decodes_as_the_stats_do(tmp_path, dtype):
    info, diff, x, y = run(_one_element_changed(ARCHIVES / "dtypes.pt2", tmp_path, dtype, 0x01))
    assert x.dtype == BY_NAME[dtype].numpy or dtype == "complex32"
    _assert_one_changed(info, diff, x, y)


def _layouts(archive: reader.Archive) -> dict[str, reader.TensorInfo]:
    return {t.name: t for t in archive.tensors()}


def test_tied_names_change_together(tmp_path):
    src = ARCHIVES / "layouts.pt2"
    layout = _layouts(run(_open_index(src)))
    tied = layout["lin1.weight"]
    assert layout["lin2.weight"].storage.entry == tied.storage.entry
    dst = changed_copy(src, tmp_path / "tied.pt2", tied.storage.entry, tied.storage.offset + 3, 0x40)
    diff, _, _ = run(_compare(src, dst))
    assert sorted(t.name for t in diff.tensors if t.status == "changed") == ["lin1.weight", "lin2.weight"]


def test_views_of_one_payload_are_decided_each_by_its_own_bytes(tmp_path):
    """view_a (elements 2..6) and view_b (7..21) view one payload: a change at element 3 changes
    view_a alone; view_b's payload CRC-32 differs, so its sameness is proven by digest."""
    src = ARCHIVES / "layouts.pt2"
    layout = _layouts(run(_open_index(src)))
    view_a, view_b = layout["view_a"], layout["view_b"]
    assert view_a.storage.entry == view_b.storage.entry
    dst = changed_copy(src, tmp_path / "views.pt2", view_a.storage.entry, 3 * 4 + 3, 0x40)
    diff, _, _ = run(_compare(src, dst))
    by_name = {t.name: t for t in diff.tensors}
    assert by_name["view_a"].status == "changed" and by_name["view_a"].figures.elements_differ == 1
    assert by_name["view_b"].status == "same" and by_name["view_b"].proof == "sha256"
    assert by_name["strided"].proof == "crc32"


async def _open_index(path):
    async with reader.open_archive(path) as ar:
        return ar


def _floats(values) -> bytes:
    return np.asarray(values, dtype=np.float32).tobytes()


def test_renamed_retyped_added_and_removed(tmp_path):
    base = {
        "keep.w": (FLOAT32, [4], _floats([1, 2, 3, 4])),
        "old.name": (FLOAT32, [2, 2], _floats([5, 6, 7, 8])),
    }
    write_pt2(tmp_path / "a.pt2", {**base, "gone.b": (FLOAT32, [3], _floats([1, 1, 1])),
                                   "cast.w": (FLOAT32, [2], _floats([1, 2]))}, root="a")  # fmt: skip
    write_pt2(
        tmp_path / "b.pt2",
        {
            "keep.w": base["keep.w"],
            "new.name": base["old.name"],  # the same bytes under another name
            "cast.w": (FLOAT64, [2], np.asarray([1, 2], dtype=np.float64).tobytes()),
            "fresh.b": (FLOAT32, [2, 2], _floats([0, 0, 0, 1])),  # same shape as old.name, other bytes
        },
        root="a",
    )
    diff, stats_a, stats_b = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2"))
    status = {t.name: t.status for t in diff.tensors}
    assert status == {"keep.w": "same", "new.name": "moved", "cast.w": "retyped", "fresh.b": "added",
                      "gone.b": "removed"}  # fmt: skip
    moved = next(t for t in diff.tensors if t.status == "moved")
    assert moved.moved_from == "old.name" and moved.proof == "crc32"
    summary = diff.to_dict()["summary"]
    assert summary["counts"] == {"same": 1, "changed": 0, "retyped": 1, "moved": 1, "added": 1, "removed": 1}
    assert summary["bytes_differ"] == 16 + 16 + 12  # cast.w (new), fresh.b, gone.b
    assert {m["module"] for m in summary["modules"]} == {"cast", "fresh", "gone"}
    # all of it from the metadata (old.name was taken by new.name before fresh.b was looked at)
    assert "data" not in stats_a and "data" not in stats_b
    assert diff.to_dict()["tensors"][1] == {
        "name": "new.name", "model": "model", "status": "moved", "proof": "crc32", "from": "old.name",
        "a": {"dtype": "float32", "sizes": [2, 2], "nbytes": 16, "crc32": moved.a.storage.crc32},
        "b": {"dtype": "float32", "sizes": [2, 2], "nbytes": 16, "crc32": moved.b.storage.crc32},
    }  # fmt: skip


def test_a_rename_is_found_by_digest_when_the_payload_differs(tmp_path):
    """b stores the renamed tensor as a view into a larger payload: its CRC-32 proves nothing, so
    the digests of the candidates (same dtype and shape) decide."""
    write_pt2(
        tmp_path / "a.pt2", {"old": (FLOAT32, [2], _floats([5, 6])), "other": (FLOAT32, [2], _floats([1, 1]))}
    )
    write_pt2(
        tmp_path / "b.pt2", {"new": (FLOAT32, [2], _floats([5, 6])), "other": (FLOAT32, [2], _floats([1, 1]))}
    )
    entries = read_entries(tmp_path / "b.pt2")
    entries = [(n, d + b"\0\0\0\0" if n.endswith("weight_0") else d) for n, d in entries]
    write_entries(tmp_path / "b.pt2", entries)
    diff, _, stats_b = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2"))
    moved = next(t for t in diff.tensors if t.name == "new")
    assert (moved.status, moved.moved_from, moved.proof) == ("moved", "old", "sha256")
    assert stats_b["data"]["bytes"] >= 8


def test_prefix_keeps_only_those_names(tmp_path):
    write_pt2(
        tmp_path / "a.pt2", {"x.w": (FLOAT32, [2], _floats([1, 2])), "y.w": (FLOAT32, [2], _floats([1, 2]))}
    )
    write_pt2(
        tmp_path / "b.pt2", {"x.w": (FLOAT32, [2], _floats([1, 3])), "y.w": (FLOAT32, [2], _floats([1, 5]))}
    )
    diff, _, _ = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2", prefix="y."))
    assert [(t.name, t.status) for t in diff.tensors] == [("y.w", "changed")]


def test_large_tensors_are_sampled_unless_exact(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1 << 22).astype(np.float32)  # 16 MiB; the sample is 4 MiB
    y = x + rng.standard_normal(x.size).astype(np.float32) * 1e-3  # every element differs
    write_pt2(tmp_path / "a.pt2", {"w": (FLOAT32, [2048, 2048], x.tobytes())})
    write_pt2(tmp_path / "b.pt2", {"w": (FLOAT32, [2048, 2048], y.tobytes())})
    sampled, _, stats_b = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2", sample_above=1 << 20))
    figures = sampled.tensors[0].figures
    assert figures.sampled and figures.elements == 64 * (64 << 10) // 4
    assert stats_b["data"]["bytes"] < x.nbytes // 2  # the sample, not the tensor
    assert figures.relative_l2 == pytest.approx(oracle(x, y)["relative_l2"], rel=0.05)
    assert sampled.to_dict()["summary"]["sampled"] == 1
    exact, _, _ = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2", sample_above=1 << 20, exact=True))
    full = exact.tensors[0].figures.to_dict()
    assert full["sampled"] is False and full["elements"] == x.size
    assert full["relative_l2"] == pytest.approx(oracle(x, y)["relative_l2"], rel=1e-9)


def test_a_sample_that_agrees_falls_back_to_the_full_pass(tmp_path):
    x = np.arange(1 << 22, dtype=np.float32)
    y = x.copy()
    y[30000] += 1  # between the first two sampled blocks (16,384 elements each, ~66,000 apart)
    write_pt2(tmp_path / "a.pt2", {"w": (FLOAT32, [1 << 22], x.tobytes())})
    write_pt2(tmp_path / "b.pt2", {"w": (FLOAT32, [1 << 22], y.tobytes())})
    diff, _, _ = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2", sample_above=1 << 20))
    figures = diff.tensors[0].figures
    assert not figures.sampled and figures.elements_differ == 1 and figures.max_abs_diff == 1.0


def test_digests_are_kept_for_the_next_comparison(tmp_path):
    write_pt2(tmp_path / "a.pt2", {"w": (FLOAT32, [3], _floats([1, 2, 3]))})
    write_pt2(tmp_path / "b.pt2", {"w": (FLOAT32, [3], _floats([1, 2, 4]))})

    async def twice():
        async with reader.open_archive(tmp_path / "a.pt2") as a, reader.open_archive(tmp_path / "b.pt2") as b:
            from reader.digests import Digests

            da, db = Digests(a), Digests(b)
            first = await reader.compare(a, b, digests_a=da, digests_b=db)
            read = b.stats["data"]["bytes"]
            second = await reader.compare(a, b, digests_a=da, digests_b=db, sample_above=0)
            return first, second, read, b.stats["data"]["bytes"]

    first, second, read_first, read_both = run(twice())
    assert first.tensors[0].status == second.tensors[0].status == "changed"
    assert first.tensors[0].figures.to_dict() == {**second.tensors[0].figures.to_dict()}
    assert 0 < read_both - read_first <= read_first  # the figures again, from known digests


@needs_torch
def test_a_pt2_against_a_torch_save_checkpoint_of_the_same_module(tmp_path):
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()
    program = torch.export.export(module, (torch.randn(1, 8),))
    torch.export.save(program, str(tmp_path / "module.pt2"))
    torch.save(module.state_dict(), tmp_path / "module.pt")
    diff, stats_a, stats_b = run(_compare(tmp_path / "module.pt2", tmp_path / "module.pt"))
    assert sorted(t.name for t in diff.tensors) == sorted(module.state_dict())
    assert diff.identical  # the same storages' bytes: proven by their CRC-32s, nothing read
    assert {t.proof for t in diff.tensors} == {"crc32"}
    assert "data" not in stats_a and "data" not in stats_b
    with torch.no_grad():
        module[2].bias[1] += 0.5
    torch.save(module.state_dict(), tmp_path / "changed.pt")
    diff, _, _ = run(_compare(tmp_path / "module.pt2", tmp_path / "changed.pt"))
    changed = [t for t in diff.tensors if t.status != "same"]
    assert [t.name for t in changed] == ["2.bias"]
    assert changed[0].figures.max_abs_diff == pytest.approx(0.5, rel=1e-6)


def test_ten_thousand_tensors_compare_with_flat_memory(tmp_path):
    """Two 10,000-tensor archives where every tenth small tensor differs and four 32 MiB tensors
    differ (every differing tensor is read in full, exact=True): the peak memory during the
    comparison is bounded by the result it returns plus a constant (the chunks and batches in
    flight), not by the bytes read (over 128 MiB a side)."""
    count, elements, large = 10_000, 512, 8 << 20
    rng = np.random.default_rng(1)
    base = rng.standard_normal(elements).astype(np.float32)
    a_tensors, b_tensors = {}, {}
    for i in range(count):
        x = base + np.float32(i)
        y = x.copy()
        y[i % elements] += i % 10 == 0
        a_tensors[f"layer{i // 10}.w{i % 10}"] = (FLOAT32, [elements], x.tobytes())
        b_tensors[f"layer{i // 10}.w{i % 10}"] = (FLOAT32, [elements], y.tobytes())
    big = rng.standard_normal(large).astype(np.float32)
    for i in range(4):
        a_tensors[f"big.w{i}"] = (FLOAT32, [large], big.tobytes())
        b_tensors[f"big.w{i}"] = (FLOAT32, [large], (big * np.float32(1 + i / 10)).tobytes())
    write_pt2(tmp_path / "a.pt2", a_tensors)
    write_pt2(tmp_path / "b.pt2", b_tensors)
    del a_tensors, b_tensors, big

    async def measured():
        async with reader.open_archive(tmp_path / "a.pt2") as a, reader.open_archive(tmp_path / "b.pt2") as b:
            tracemalloc.start()
            start, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            diff = await reader.compare(a, b, exact=True)
            held, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            return diff, held - start, peak - start, b.stats["data"]["bytes"]

    diff, held, peak, read = run(measured(), timeout=600)
    assert diff.counts()["changed"] == count // 10 + 3 and len(diff.tensors) == count + 4
    bigs = {t.name: t for t in diff.tensors if t.name.startswith("big.")}
    assert bigs["big.w0"].status == "same" and bigs["big.w0"].proof == "crc32"
    assert [bigs[f"big.w{i}"].figures.sampled for i in (1, 2, 3)] == [False] * 3
    assert read >= 3 * large * 4
    assert peak <= 2 * held + (64 << 20), (peak, held)
    assert peak < read // 2  # far from holding what was read


def test_streams_chunked_differently_pair_up_element_by_element():
    from reader.compare.aligned import aligned

    data_a = np.arange(1000, dtype=np.float64).tobytes()
    data_b = (np.arange(1000, dtype=np.float64) + 1).tobytes()

    async def chunked(data: bytes, sizes: list[int]):
        position = 0
        for size in sizes * (len(data) // sum(sizes) + 1):
            if position >= len(data):
                return
            yield data[position : position + size]
            position += size

    async def pieces():
        return [
            (bytes(x), bytes(y))
            async for x, y in aligned(chunked(data_a, [3, 13, 1000]), chunked(data_b, [7, 5, 999]), 8)
        ]

    got = run(pieces())
    assert all(len(x) == len(y) and len(x) % 8 == 0 and x for x, y in got)
    assert b"".join(x for x, _ in got) == data_a and b"".join(y for _, y in got) == data_b


def test_a_module_whose_old_values_are_all_zero_has_its_absolute_change(tmp_path):
    """Its relative change has no value (||a|| = 0): `absolute_l2` gives ||a - b|| pooled, and it
    ranks above the modules with a relative change; every module carries both figures."""
    write_pt2(
        tmp_path / "a.pt2", {"z.b": (FLOAT32, [2], _floats([0, 0])), "w.w": (FLOAT32, [2], _floats([1, 2]))}
    )
    write_pt2(
        tmp_path / "b.pt2", {"z.b": (FLOAT32, [2], _floats([3, 4])), "w.w": (FLOAT32, [2], _floats([1, 4]))}
    )
    diff, _, _ = run(_compare(tmp_path / "a.pt2", tmp_path / "b.pt2"))
    modules = diff.to_dict()["summary"]["modules"]
    assert [m["module"] for m in modules] == ["z", "w"]
    z, w = modules
    assert z["relative_l2"] is None and z["absolute_l2"] == pytest.approx(5.0) and z["from_zero"] is True
    assert w["relative_l2"] == pytest.approx(2 / 5**0.5) and w["absolute_l2"] == pytest.approx(2.0)
    assert w["from_zero"] is False
