"""The browser viewer in real headless Chromium (Debian's /usr/bin/chromium via playwright) against a real
uvicorn server on loopback serving fixture archives and a generated 10,000-tensor archive.

Screenshots of the main states go to <pytest basetemp>/screenshots (paths are printed).
"""

from __future__ import annotations

import pathlib

import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.service import threaded_server
from testing.torch_oracle import HAVE_TORCH
from testing.viewer_page import open_viewer

pytestmark = pytest.mark.browser

CONTAINERS = pathlib.Path(__file__).resolve().parent / "fixtures" / "containers" / "torch-2.14"
MANY = 10_000


def _many_names() -> list[str]:
    return ["w"] + [f"blocks.{i // 10}.{'attn' if i % 10 < 5 else 'mlp'}.p{i % 10}" for i in range(MANY - 1)]


@pytest.fixture(scope="module")
def many_archive(tmp_path_factory) -> pathlib.Path | None:
    """10,000 tiny weights written by torch: one exported parameter plus 9,999 more added to the
    ExportedProgram's state_dict before saving (exporting 10,000 parameters takes far longer)."""
    if not HAVE_TORCH:
        return None
    import torch

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(2))

        def forward(self, x):
            return x + self.w

    program = torch.export.export(One().eval(), (torch.randn(2),), strict=False)
    for name in _many_names()[1:]:
        program.state_dict[name] = torch.nn.Parameter(torch.randn(2))
    path = tmp_path_factory.mktemp("many10k") / "many10k.pt2"
    torch.export.save(program, str(path))
    return path


@pytest.fixture(scope="module")
def server(many_archive):
    specs = [
        f"layouts={ARCHIVES / 'layouts.pt2'}",
        f"dtypes={ARCHIVES / 'dtypes.pt2'}",
        f"pickled={ARCHIVES / 'pickled.pt2'}",
        f"ckpt={CONTAINERS / 'checkpoint.pt'}",  # a torch.save checkpoint
        f"aoti={CONTAINERS / 'aoti_pickle.pt2'}",  # an AOTInductor package, model "aoti/model"
    ]
    if many_archive is not None:
        specs.append(f"many10k={many_archive}")
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
    page.errors = errors
    yield page
    context.close()
    assert not [e for e in errors if "404" not in e], errors


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.getbasetemp() / "screenshots"
    path.mkdir(exist_ok=True)
    return path


def pinned(archive: str) -> str:
    """How download links name an archive: `{id}@{version}` with `@` as the service spells it
    (one edge-cache entry per tensor, whoever links to it), immutable URLs."""
    import httpx

    version = httpx.get(f"{VIEWER_BASE[0]}/archives/{archive}/tensors").json()["version"]
    return f"{archive}@{version}"


def screenshot(page, shots: pathlib.Path, name: str) -> None:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")


def real_names(archive: str) -> list[str]:
    import httpx

    return [t["name"] for t in httpx.get(f"{VIEWER_BASE[0]}/archives/{archive}/tensors").json()["tensors"]]


VIEWER_BASE: list[str] = []


@pytest.fixture(autouse=True)
def _base(server):
    VIEWER_BASE[:] = [server]


def rendered_names(page) -> list[str]:
    return page.eval_on_selector_all("[data-testid=tensor-row]", "rows => rows.map(r => r.dataset.name)")


def all_rows_by_scrolling(page) -> set[str]:
    seen: set[str] = set()
    height = page.eval_on_selector("[data-testid=table-scroller]", "s => s.scrollHeight")
    step = page.eval_on_selector("[data-testid=table-scroller]", "s => s.clientHeight")
    top = 0
    while True:
        page.eval_on_selector("[data-testid=table-scroller]", f"s => {{ s.scrollTop = {top}; }}")
        page.wait_for_timeout(50)
        seen.update(rendered_names(page))
        if top >= height:
            return seen
        top += step


def nonblank_pixels(page, testid: str) -> int:
    """Pixels of a canvas that differ from its top-left (background) pixel."""
    return page.eval_on_selector(
        f"[data-testid={testid}]",
        """c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) {
                if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 30) n++;
            }
            return n;
        }""",
    )


@pytest.mark.parametrize("archive", ["layouts", "dtypes", "pickled", "ckpt", "aoti"])
def test_table_lists_every_tensor(page, server, shots, archive):
    names = real_names(archive)
    open_viewer(page, server, f"#/archive/{archive}")
    assert page.text_content("[data-testid=tensor-count]") == str(len(names))
    assert set(rendered_names(page)) <= set(names)
    assert all_rows_by_scrolling(page) == set(names)
    if archive == "layouts":
        screenshot(page, shots, "summary-layouts")


def test_search_narrows_rows(page, server, shots):
    open_viewer(page, server, "#/archive/layouts")
    search = page.locator("[data-testid=search]")
    search.fill("lin")
    assert sorted(rendered_names(page)) == ["lin1.bias", "lin1.weight", "lin2.bias", "lin2.weight"]
    assert "4 of 14" in page.text_content("[data-testid=match-count]")
    search.fill("lin?.b*")
    assert sorted(rendered_names(page)) == ["lin1.bias", "lin2.bias"]
    href = page.get_attribute("[data-testid=download-selection]", "href")
    assert href == f"/archives/{pinned('layouts')}/safetensors?model=model&name=lin1.bias&name=lin2.bias"
    search.fill("conv.bias")
    assert rendered_names(page) == ["conv.bias"]
    screenshot(page, shots, "search")
    search.fill("no such tensor")
    assert rendered_names(page) == []


def test_sort_by_bytes(page, server):
    open_viewer(page, server, "#/archive/layouts")
    page.click("#table-head button[data-key=bytes]")
    page.click("#table-head button[data-key=bytes]")  # descending
    assert rendered_names(page)[0] == "conv.weight"  # 8*3*3*3 floats, the largest


def test_open_tensor_shows_layout_stats_and_charts(page, server, shots):
    open_viewer(page, server, "#/archive/layouts")
    page.click("[data-testid=tensor-row][data-name='conv.weight']")
    assert page.text_content("[data-testid=detail-dtype]") == "float32"
    assert page.text_content("[data-testid=detail-shape]") == "[8, 3, 3, 3]"
    page.wait_for_selector("[data-testid=histogram]:not([hidden])")
    page.wait_for_selector("[data-testid=heatmap]:not([hidden])")
    assert nonblank_pixels(page, "histogram") > 50
    assert nonblank_pixels(page, "heatmap") > 50
    stats = page.text_content("[data-testid=detail-stats]")
    assert "min" in stats and "std" in stats
    assert page.text_content("[data-testid=stat-nan]") == "0"
    assert page.url.endswith("#/archive/layouts/tensor/conv.weight")
    assert page.get_attribute("[data-testid=download-npy]", "href") == (
        f"/archives/{pinned('layouts')}/tensors/conv.weight/data?model=model&format=npy"
    )
    curl = page.text_content("[data-testid=curl]")
    assert (
        curl.startswith("curl -H 'Range: bytes=0-1023' 'http://127.0.0.1:")
        and "/tensors/conv.weight/data" in curl
    )
    screenshot(page, shots, "detail-conv-weight")
    page.keyboard.press("Escape")
    page.wait_for_selector("[data-testid=detail]", state="hidden")
    assert page.url.endswith("#/archive/layouts")


def test_shared_payload_is_shown(page, server):
    open_viewer(page, server, "#/archive/layouts/tensor/lin2.weight")
    page.wait_for_selector("[data-testid=detail]:not([hidden])")
    assert "lin1.weight" in page.text_content("[data-testid=detail-shared]")
    assert page.text_content("[data-testid=shared-count]") == "2"  # lin1/lin2 and view_a/view_b


def test_unreadable_tensor_shows_reason(page, server, shots):
    open_viewer(page, server, "#/archive/pickled/tensor/sub")
    page.wait_for_selector("[data-testid=detail-error]:not([hidden])")
    assert page.text_content("[data-testid=detail-error]").startswith("no preview: ")
    assert "pickled" in page.text_content("[data-testid=detail-error]")
    assert page.locator("[data-testid=histogram]").is_hidden()
    assert page.locator("[data-testid=heatmap]").is_hidden()
    screenshot(page, shots, "detail-pickled")


def test_deep_link_and_keyboard(page, server):
    open_viewer(page, server, "#/archive/dtypes/tensor/t_bfloat16")
    page.wait_for_selector("[data-testid=detail]:not([hidden])")
    assert page.text_content("[data-testid=detail-name]") == "t_bfloat16"
    assert page.text_content("[data-testid=detail-dtype]") == "bfloat16"
    assert page.input_value("[data-testid=archive-select]") == "dtypes"
    page.wait_for_selector("[data-testid=histogram]:not([hidden])")
    page.keyboard.press("ArrowDown")  # the panel follows the cursor
    assert page.text_content("[data-testid=detail-name]") == "t_uint16"
    assert page.url.endswith("/tensor/t_uint16")
    page.keyboard.press("Escape")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.dataset.testid") == "search"
    page.keyboard.type("t_int3")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-testid=detail]:not([hidden])")
    assert page.text_content("[data-testid=detail-name]") == "t_int32"
    # changing the hash by hand navigates too
    page.evaluate("location.hash = '#/archive/layouts/tensor/transposed'")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=detail-name]').textContent === 'transposed'"
    )
    assert page.text_content("[data-testid=detail-shape]") == "[6, 4]"


def test_grouping_by_module(page, server, shots):
    open_viewer(page, server, "#/archive/layouts")
    page.check("[data-testid=group-toggle]")
    groups = page.eval_on_selector_all("[data-testid=group-row]", "rows => rows.map(r => r.dataset.prefix)")
    assert {"conv.", "lin1.", "lin2."} <= set(groups)
    page.click("[data-testid=group-row][data-prefix='conv.']")  # collapse
    assert "conv.weight" not in rendered_names(page)
    href = page.get_attribute("[data-testid=download-selection]", "href")
    assert href == f"/archives/{pinned('layouts')}/safetensors?model=model&prefix=conv."
    page.click("[data-testid=group-row][data-prefix='conv.']")  # expand
    assert "conv.weight" in rendered_names(page)
    screenshot(page, shots, "grouped")


def test_ten_thousand_tensors_virtualized(page, server, shots, many_archive):
    if many_archive is None:
        pytest.skip("torch is not installed (CI installs torch==2.13.0): no 10,000-tensor archive")
    open_viewer(page, server, "#/archive/many10k")
    first_rows_ms = page.evaluate("window.__pt2FirstRowsAt")
    print(f"10,000-tensor archive: first rows {first_rows_ms:.0f} ms after navigation start")
    assert first_rows_ms < 20_000
    assert page.text_content("[data-testid=tensor-count]") == "10,000"
    dom_rows = page.locator("[data-testid=tensor-row]").count()
    print(f"10,000-tensor archive: {dom_rows} rows in the DOM")
    assert 0 < dom_rows < 200
    names = set(_many_names())
    assert set(rendered_names(page)) <= names
    screenshot(page, shots, "many10k")
    # the end of the list is reachable and still virtualized
    page.eval_on_selector("[data-testid=table-scroller]", "s => { s.scrollTop = s.scrollHeight; }")
    last = real_names("many10k")[-1]
    page.wait_for_selector(f"[data-testid=tensor-row][data-name='{last}']")
    assert page.locator("[data-testid=tensor-row]").count() < 200
    started = page.evaluate("performance.now()")
    page.fill("[data-testid=search]", "blocks.999.mlp.p8")
    assert rendered_names(page) == ["blocks.999.mlp.p8"]
    print(f"10,000-tensor archive: search to rows {page.evaluate('performance.now()') - started:.0f} ms")
    page.fill("[data-testid=search]", "blocks.12*")
    assert page.text_content("[data-testid=match-count]").startswith("110 of 10,000")
    page.fill("[data-testid=search]", "")
    page.check("[data-testid=group-toggle]")
    assert page.locator("[data-testid=group-row]").count() > 0
    assert page.locator("[data-testid=tensor-row], [data-testid=group-row]").count() < 200


def test_dark_mode(browser, server, shots):
    context = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme="dark")
    page = context.new_page()
    try:
        open_viewer(page, server, "#/archive/layouts/tensor/conv.weight")
        page.wait_for_selector("[data-testid=histogram]:not([hidden])")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background != "rgb(255, 255, 255)"
        screenshot(page, shots, "detail-dark")
    finally:
        context.close()
