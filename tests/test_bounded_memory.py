"""Work bounded by what is sent, not by what an archive declares: peak RSS of a process of its own
(testing/memory_probe.py) while a service, a comparison or an open meets a crafted archive of a few KB
that declares gibibytes. The bounds are far from what the same work took before: 16 stride-0 views
of 64 bytes, 1 GiB each, took a service to 4.2 GB before its first request; eight configs inflating
to 255 MiB each took an open to 2.35 GB; a graph of 64 MiB of untyped values took 1.8 GB."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from testing.memory_probe import probe
from testing.strided_views import write_views_pt2

pytestmark = pytest.mark.emulator

MIB = 1 << 20
GIB_ELEMENTS = 1 << 28  # float32 elements in a gibibyte
VIEWS = 8


def _gibibyte_views(path, payload: np.ndarray) -> None:
    """VIEWS stride-0 views of `payload` (float32), 1 GiB each as declared, view i at element i."""
    views = {f"v{i}": ("weight_0", [GIB_ELEMENTS], [0], i) for i in range(VIEWS)}
    write_views_pt2(path, {"weight_0": payload.tobytes()}, views)


def test_a_service_over_gibibyte_views_stays_small(tmp_path) -> None:
    """Digests ahead skip amplified views, and a 1-byte Range of each builds one byte: two archives of
    eight 1 GiB views stay far below one view's declared size."""
    payloads = [np.arange(16, dtype=np.float32) + 100 * k for k in range(2)]
    paths = [tmp_path / f"views{k}.pt2" for k in range(2)]
    for path, payload in zip(paths, payloads):
        _gibibyte_views(path, payload)
        assert path.stat().st_size < 40_000
    result = probe("service_ranges", *paths)
    assert result["healthz"] == 200
    answers = iter(result["answers"])
    for payload in payloads:
        for i in range(VIEWS):
            name, status, byte = next(answers)
            assert (name, status) == (f"v{i}", 206)
            middle = (GIB_ELEMENTS * 4 // 2) % 4  # the byte of the element the Range falls in
            assert bytes.fromhex(byte) == payload[i : i + 1].tobytes()[middle : middle + 1]
    assert result["peak_rss"] < 300 * MIB, result["peak_rss"]


def test_a_comparison_of_gibibyte_views_reads_their_storage(tmp_path) -> None:
    """Views alike over equal storage are `same` without reading 1 GiB each (their payloads differ
    only where no view looks, so CRC-32 cannot tell); others differ on the sample. Before, the sample
    alone gathered every view whole, 64 times."""
    base = np.arange(32, dtype=np.float32)
    touched_elsewhere = base.copy()
    touched_elsewhere[31] = -1  # beyond every view's reach (views i reach only element i)
    changed = base + 1
    paths = {name: tmp_path / f"{name}.pt2" for name in ("a", "same", "changed")}
    for name, payload in zip(paths, (base, touched_elsewhere, changed)):
        _gibibyte_views(paths[name], payload)
    same = probe("compare", paths["a"], paths["same"])
    assert set(same["statuses"].values()) == {"same"}
    assert same["peak_rss"] < 300 * MIB, same["peak_rss"]
    differ = probe("compare", paths["a"], paths["changed"])
    assert set(differ["statuses"].values()) == {"changed"}
    assert differ["peak_rss"] < 300 * MIB, differ["peak_rss"]


def test_an_exact_comparison_of_repeating_views_reads_what_repeats(tmp_path) -> None:
    """Two 1 GiB views that repeat two elements (sizes [2**27, 2], strides [0, 2]) compared exactly:
    without the stride-0 dim, 8 bytes a side, each pair counted 2**27 times. Where the payloads
    differ only in an element no view looks at, `same`; where they differ in one it does, `changed`
    with the figures of the whole views. Before, each pass read and folded the gibibytes."""
    views = {"v": ("weight_0", [1 << 27, 2], [0, 2], 0)}
    payloads = {"a": [1.0, 5.0, 2.0, 0.0], "unseen": [1.0, 7.0, 2.0, 0.0], "seen": [1.0, 5.0, 3.5, 0.0]}
    paths = {}
    for name, values in payloads.items():
        paths[name] = tmp_path / f"{name}.pt2"
        write_views_pt2(paths[name], {"weight_0": np.array(values, np.float32).tobytes()}, views)
    same = probe("compare", paths["a"], paths["unseen"], "exact")
    assert same["statuses"] == {"v": "same"}
    differ = probe("compare", paths["a"], paths["seen"], "exact")
    assert differ["statuses"] == {"v": "changed"}
    figures = differ["figures"]["v"]
    assert (figures["elements"], figures["elements_differ"]) == (1 << 28, 1 << 27)
    assert figures["max_abs_diff"] == 1.5 and figures["sampled"] is False
    assert figures["relative_l2"] == pytest.approx(1.5 / np.sqrt(1 + 4))  # ||(0, 1.5)|| / ||(1, 2)||
    for result in (same, differ):
        assert result["peak_rss"] < 300 * MIB, result["peak_rss"]


def _pt2_with_models(path, configs: dict[str, bytes], program: bytes = b"{}") -> None:
    """An archive of several models, each with the given weights config and program (DEFLATE)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("m/archive_format", b"pt2")
        archive.writestr("m/archive_version", b"0")
        for model, config in configs.items():
            archive.writestr(f"m/models/{model}.json", program)
            archive.writestr(f"m/data/weights/{model}_weights_config.json", config)


def test_metadata_is_capped_across_entries(tmp_path) -> None:
    """Eight configs of 48 MiB each (spaces: a few hundred KB deflated) are each under any per-entry
    cap, together over the archive's one cap: refused before any is inflated, naming the cap."""
    config = b'{"config": {}}' + b" " * (48 * MIB)
    path = tmp_path / "configs.pt2"
    _pt2_with_models(path, {f"model{i}": config for i in range(8)})
    assert path.stat().st_size < 2 * MIB
    result = probe("open", path)
    assert result["opened"] is False
    assert result["error"].startswith("ArchiveFormatError")
    assert "MAX_METADATA_BYTES" in result["error"] and str(256 * MIB) in result["error"]
    assert result["peak_rss"] < 200 * MIB, result["peak_rss"]  # before: every config inflated


def test_a_graph_of_too_many_values_is_refused_once(tmp_path) -> None:
    """A program whose untyped argument holds 32 million integers (64 MiB inflated, a few hundred KB
    stored) is refused by its value count, before it is decoded; asked again, the failure is
    remembered: nothing is read again."""
    values = b"[" + b"0," * (32 * MIB) + b"0]"
    node = b'{"target": "aten.x", "inputs": [{"name": "a", "arg": {"as_ints": %s}}]}' % values
    program = b'{"graph_module": {"graph": {"nodes": [%s]}}}' % node
    path = tmp_path / "graph.pt2"
    _pt2_with_models(path, {"model": json.dumps({"config": {}}).encode()}, program)
    assert path.stat().st_size < MIB
    result = probe("open", path)
    assert result["opened"] is True
    first, second = result["graph"]
    assert first.startswith("ArchiveFormatError") and "MAX_PROGRAM_ELEMENTS" in first
    assert second == first
    assert result["requests"][1] == 0  # remembered, not read and parsed again
    assert result["peak_rss"] < 300 * MIB, result["peak_rss"]  # before: 384 MB parsed, 1.8 GB served
