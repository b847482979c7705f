"""GET .../tensors/{name}/stats: exact statistics for small tensors, a bounded sample for large ones."""

from __future__ import annotations

import math
import pathlib

import httpx
import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.torch_oracle import HAVE_TORCH

pytestmark = pytest.mark.unit

EXACT_FLOAT = {
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
}


def make_app(*specs: str):
    # no digests computed ahead: the tests count the archive's reads
    return create_app(
        Settings(archives=parse_archive_specs(list(specs)), revalidate_seconds=0, digests_ahead="off")
    )


@pytest.fixture
async def client():
    app = make_app(
        f"layouts={ARCHIVES / 'layouts.pt2'}",
        f"dtypes={ARCHIVES / 'dtypes.pt2'}",
        f"pickled={ARCHIVES / 'pickled.pt2'}",
    )
    await app.state.registry.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            yield app, http
    finally:
        await app.state.registry.close()


def expected(values: np.ndarray) -> dict:
    """The statistics as app/values.py documents them, computed directly with numpy."""
    flat = values.reshape(-1)
    real = np.abs(flat).astype(np.float64) if flat.dtype.kind == "c" else flat.astype(np.float64)
    finite = real[np.isfinite(real)]
    with np.errstate(over="ignore", invalid="ignore"):
        return _expected(flat, real, finite)


def _expected(flat: np.ndarray, real: np.ndarray, finite: np.ndarray) -> dict:
    return {
        "min": finite_or_none(finite.min()) if finite.size else None,
        "max": finite_or_none(finite.max()) if finite.size else None,
        "mean": finite_or_none(finite.mean()) if finite.size else None,
        "std": finite_or_none(finite.std()) if finite.size else None,
        "nan_count": int(np.isnan(real).sum()),
        "inf_count": int(np.isinf(real).sum()),
        "zero_count": int((flat == 0).sum()),
        "finite": int(finite.size),
    }


def finite_or_none(x) -> float | None:
    """Statistics that overflow float64 (std of values near 1e308) are reported as null."""
    x = float(x)
    return x if math.isfinite(x) else None


def close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("archive_id", ["layouts", "dtypes"])
async def test_small_tensors_exact(client, archive_id):
    app, http = client
    archive = await app.state.registry.get(archive_id)
    for info in archive.tensors():
        response = await http.get(f"/archives/{archive_id}/tensors/{info.name}/stats")
        assert response.status_code == 200, (info.name, response.text)
        stats = response.json()
        values = await archive.read_numpy(info.name)
        want = expected(values)
        assert stats["name"] == info.name and stats["dtype"] == info.dtype
        assert stats["numel"] == info.numel == values.size
        assert stats["sampled"] is False and stats["sample_elements"] == values.size
        for key in ("nan_count", "inf_count", "zero_count"):
            assert stats[key] == want[key], (info.name, key)
        for key in ("min", "max", "mean", "std"):
            if values.dtype.kind in "iu" and key in ("min", "max"):
                assert stats[key] == int(getattr(values, key)()), (info.name, key)
            else:
                assert close(stats[key], want[key]), (info.name, key, stats[key], want[key])
        histogram = stats["histogram"]
        assert sum(histogram["counts"]) == want["finite"]
        if want["finite"]:
            assert len(histogram["edges"]) == len(histogram["counts"]) + 1 == 33
        first = stats["first"]
        flat = values.reshape(-1)[:16]
        assert len(first) == flat.size
        if flat.dtype.kind == "b":
            assert first == [bool(v) for v in flat]
        elif flat.dtype.kind in "iu":
            assert first == [int(v) for v in flat]
        elif flat.dtype.kind == "c":
            assert first == [[float(v.real), float(v.imag)] for v in flat]
        else:
            assert info.dtype in EXACT_FLOAT
            assert first == [float(v) if np.isfinite(v) else None for v in flat.astype(np.float64)]
        if len(info.sizes) >= 2 and info.numel:
            heat = stats["heatmap"]
            assert heat["rows"] == info.sizes[0] and heat["cols"] == info.numel // info.sizes[0]
            assert len(heat["values"]) == min(64, heat["rows"])
        else:
            assert stats["heatmap"] is None


async def test_heatmap_values_of_a_matrix(client):
    app, http = client
    archive = await app.state.registry.get("layouts")
    stats = (await http.get("/archives/layouts/tensors/transposed/stats")).json()
    values = await archive.read_numpy("transposed")
    assert stats["heatmap"]["values"] == values.astype(np.float64).tolist()  # 6x4: no downsampling
    assert stats["heatmap"]["min"] == float(values.min()) and stats["heatmap"]["max"] == float(values.max())


async def test_default_archive_route_and_model_query(client):
    _, http = client
    a = (await http.get("/tensors/conv.weight/stats")).json()
    b = (await http.get("/archives/layouts/tensors/conv.weight/stats", params={"model": "model"})).json()
    assert a == b and a["heatmap"]["rows"] == 8 and a["heatmap"]["cols"] == 27


async def test_unreadable_tensors_are_422(client):
    _, http = client
    for name in ("sub", "custom", "symbolic"):
        response = await http.get(f"/archives/pickled/tensors/{name}/stats")
        assert response.status_code == 422, name
        assert response.json()["error"]["code"] == "unsupported_payload"
    assert (await http.get("/archives/pickled/tensors/lin.weight/stats")).status_code == 200


async def test_unknown_names_are_404(client):
    _, http = client
    response = await http.get("/archives/layouts/tensors/no.such.tensor/stats")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "tensor_not_found"
    response = await http.get("/archives/layouts/tensors/conv.weight/stats", params={"model": "nope"})
    assert response.status_code == 404


async def test_nonfinite_values_stay_json(client):
    """NaN and Inf are counted and left out; min/max/mean/std are null when nothing is finite."""
    from app.values import summarize

    values = np.array([np.nan, np.inf, -np.inf, 0.0, 2.0], dtype=np.float32)
    stats = summarize(values, "float32", (1, 5))
    assert stats["nan_count"] == 1 and stats["inf_count"] == 2 and stats["zero_count"] == 1
    assert stats["min"] == 0.0 and stats["max"] == 2.0 and stats["mean"] == 1.0
    assert stats["first"] == [None, None, None, 0.0, 2.0]
    assert sum(stats["histogram"]["counts"]) == 2
    assert stats["heatmap"]["values"] == [[None, None, None, 0.0, 2.0]]
    empty = summarize(np.array([np.nan], dtype=np.float32), "float32", None)
    assert empty["min"] is None and empty["std"] is None and empty["histogram"] == {"edges": [], "counts": []}


# ---- large tensors: a bounded sample -------------------------------------------------------


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> tuple[pathlib.Path, dict]:
    if not HAVE_TORCH:
        pytest.skip("torch is not installed (CI installs torch==2.13.0)")
    import torch

    class Big(torch.nn.Module):
        def __init__(self):
            super().__init__()
            generator = torch.Generator().manual_seed(7)
            self.register_buffer("big2d", torch.randn(4096, 4096, generator=generator))  # 64 MiB
            flat = torch.randn(12 << 20, generator=generator).to(torch.bfloat16)  # 24 MiB
            flat[0] = float("nan")
            self.register_buffer("big1d", flat)
            self.register_buffer(
                "bigt", torch.randn(2048, 2560, generator=generator).t()
            )  # 20 MiB, transposed

        def forward(self, x):
            return x + self.big2d[0, 0] + self.big1d[1] + self.bigt[0, 0]

    module = Big().eval()
    path = tmp_path_factory.mktemp("big") / "big.pt2"
    torch.export.save(torch.export.export(module, (torch.randn(1),), strict=False), str(path))
    truth = {
        "big2d": module.big2d.numpy(),
        "big1d": module.big1d.float().numpy(),
        "bigt": module.bigt.contiguous().numpy(),
    }
    return path, truth


async def test_large_tensors_are_sampled_with_bounded_reads(big_archive):
    path, truth = big_archive
    app = make_app(f"big={path}")
    await app.state.registry.start()
    try:
        archive = await app.state.registry.get("big")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            for name, values in truth.items():
                info = archive.layout(name)
                before = archive.stats.get("data", {}).get("bytes", 0)
                response = await http.get(f"/archives/big/tensors/{name}/stats")
                read = archive.stats.get("data", {}).get("bytes", 0) - before
                assert response.status_code == 200, response.text
                stats = response.json()
                print(f"{name}: {info.nbytes} bytes; read {read}, {stats['sample_elements']} samples")
                assert stats["sampled"] is True
                assert 0 < stats["sample_elements"] < info.numel // 4
                assert 0 < read <= (4 << 20) + 4096 < info.nbytes // 4
                flat = values.reshape(-1)
                assert stats["first"] == [
                    float(v) if np.isfinite(v) else None for v in flat[:16].astype(np.float64)
                ]
                finite = flat[np.isfinite(flat)]
                assert finite.min() <= stats["min"] <= stats["max"] <= finite.max()
                assert abs(stats["mean"]) < 0.05 and abs(stats["std"] - 1) < 0.05  # randn
                assert sum(stats["histogram"]["counts"]) + stats["nan_count"] == stats["sample_elements"]
            big2d = (await http.get("/archives/big/tensors/big2d/stats")).json()
            assert big2d["heatmap"]["rows"] == 4096 and big2d["heatmap"]["cols"] == 4096
            assert len(big2d["heatmap"]["values"]) == 64 and len(big2d["heatmap"]["values"][0]) == 64
            big1d = (await http.get("/archives/big/tensors/big1d/stats")).json()
            assert big1d["nan_count"] >= 1 and big1d["heatmap"] is None and big1d["first"][0] is None
    finally:
        await app.state.registry.close()
