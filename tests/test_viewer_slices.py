"""The viewer's heat map of a large tensor fetches only the rows it draws (`data?slice=`), in real
headless Chromium against a real uvicorn, and draws them; a small tensor's map still comes from /stats."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.service import threaded_server
from testing.torch_oracle import needs_torch

TALL = (4608, 1024)  # 18 MiB of float32: /stats samples it; rows of 4 KiB
WIDE = (320, 16000)  # 19.5 MiB: its columns are sampled too
BF16 = (4096, 2560)  # 20 MiB of bfloat16

pytestmark = [pytest.mark.browser, needs_torch]


def _gradient(shape: tuple[int, int]) -> np.ndarray:
    """Values that grow down the rows, so a drawn map has a top and a bottom."""
    rows = np.linspace(-1.0, 1.0, shape[0], dtype=np.float32)[:, None]
    cols = np.linspace(0.0, 0.25, shape[1], dtype=np.float32)[None, :]
    return rows + cols


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """An archive written by torch (its graph included: the viewer asks for a tensor's consumers)."""
    import torch

    values = {
        "tall": torch.from_numpy(_gradient(TALL)),
        "wide": torch.from_numpy(_gradient(WIDE)),
        "bf16": torch.from_numpy(_gradient(BF16)).to(torch.bfloat16),
    }

    class Big(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name, tensor in values.items():
                self.register_buffer(name, tensor)

        def forward(self, x):
            return x + self.tall[0, :4] + self.wide[0, :4] + self.bf16[0, :4].float()

    path = tmp_path_factory.mktemp("viewer_slices") / "big.pt2"
    torch.export.save(torch.export.export(Big(), (torch.zeros(4),)), str(path))
    specs = [f"big={path}", f"layouts={ARCHIVES / 'layouts.pt2'}"]
    app = create_app(Settings(archives=parse_archive_specs(specs), revalidate_seconds=0))
    with threaded_server(app) as url:
        yield url


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme="light")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.data_requests = []
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    page.on("response", lambda r: page.data_requests.append(r) if "/data" in urlsplit(r.url).path else None)
    yield page
    context.close()
    assert not errors, errors


def _rows_of_map(page) -> tuple[int, list[tuple[int, int, int]]]:
    """Nonblank pixels of the heat map, and the colour of its top-left and bottom-left cells."""
    return page.eval_on_selector(
        "[data-testid=heatmap]",
        """c => {
            const ctx = c.getContext('2d');
            const d = ctx.getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) {
                if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 30) n++;
            }
            const at = (x, y) => Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3));
            const ratio = c.width / c.clientWidth;
            return [n, [at(2, 2), at(2, Math.floor(90 * ratio))]];
        }""",
    )


def _open(page, server: str, fragment: str) -> None:
    page.goto(f"{server}/{fragment}")
    page.wait_for_selector("[data-testid=detail]:not([hidden])")


@pytest.mark.parametrize(("name", "shape"), [("tall", TALL), ("wide", WIDE), ("bf16", BF16)])
def test_a_large_tensors_heat_map_fetches_only_its_rows(page, server, name, shape) -> None:
    _open(page, server, f"#/archive/big/tensor/{name}")
    page.wait_for_selector("[data-testid=heatmap][data-slice]:not([hidden])")
    drawn_slice = page.get_attribute("[data-testid=heatmap]", "data-slice")
    sliced = [r for r in page.data_requests if "slice" in parse_qs(urlsplit(r.url).query)]
    assert len(sliced) == 1, [r.url for r in page.data_requests]
    response = sliced[0]
    assert parse_qs(urlsplit(response.url).query)["slice"] == [drawn_slice]
    assert urlsplit(response.url).path.endswith(f"/tensors/{name}/data")
    assert response.status == 200
    rows, _, cols = drawn_slice.partition(",")
    assert rows == f"0:{shape[0]}:{-(-shape[0] // 64)}"  # every k-th row: at most 64 of them
    shown = [int(n) for n in response.headers["x-tensor-shape"].split(",")]
    assert shown[0] <= 64
    itemsize = 2 if name == "bf16" else 4
    assert int(response.headers["content-length"]) == shown[0] * shown[1] * itemsize
    assert int(response.headers["content-length"]) * 16 < shape[0] * shape[1] * itemsize
    if name == "wide":
        assert cols == "0:16000:16" and shown[1] == 1000  # wide rows: columns sampled as well
    nonblank, (top, bottom) = _rows_of_map(page)
    assert nonblank > 1000
    assert top != bottom  # the rows' gradient is drawn: the map's top and bottom differ
    assert "slice" in page.get_attribute("[data-testid=heatmap]", "title")


def test_a_small_tensors_heat_map_still_comes_from_stats(page, server) -> None:
    _open(page, server, "#/archive/layouts/tensor/conv.weight")
    page.wait_for_selector("[data-testid=heatmap]:not([hidden])")
    assert page.get_attribute("[data-testid=heatmap]", "data-slice") is None
    assert not page.data_requests
