"""The viewer's ExecuTorch downloads in real Chromium: the .ptd link follows the safetensors
selection, and an archive carrying programs offers each one; the links fetch the right bytes."""

from __future__ import annotations

import pathlib

import httpx
import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.service import threaded_server
from testing.torch_oracle import needs_torch
from testing.viewer_page import open_viewer

pytestmark = pytest.mark.browser

PROGRAM = b"\x00pte" * 5000


@pytest.fixture(scope="module")
def carrying(tmp_path_factory) -> pathlib.Path:
    import torch
    from torch.export.pt2_archive._package import package_pt2

    path = tmp_path_factory.mktemp("viewer_executorch") / "carrying.pt2"
    package_pt2(
        str(path),
        exported_programs={"model": torch.export.load(str(ARCHIVES / "layouts.pt2"))},
        executorch_files={"model.pte": PROGRAM},
    )
    return path


@pytest.fixture(scope="module")
def server(carrying):
    specs = [f"carry={carrying}", f"layouts={ARCHIVES / 'layouts.pt2'}"]
    app = create_app(Settings(archives=parse_archive_specs(specs), revalidate_seconds=0))
    with threaded_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def page(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    yield page
    page.close()


@needs_torch
def test_ptd_link_follows_the_selection_and_programs_are_offered(page, server) -> None:
    open_viewer(page, server, "#/archive/carry")
    carry = (
        f"carry@{httpx.get(server + '/archives/carry/tensors').json()['version']}"  # links name the version
    )
    ptd = page.locator("[data-testid=download-ptd]")
    assert ptd.get_attribute("href") == f"/archives/{carry}/ptd?model=model"
    assert ptd.text_content() == ".ptd of all"
    page.locator("[data-testid=search]").fill("lin?.b*")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=download-ptd]').href.includes('name=')"
    )
    href = ptd.get_attribute("href")
    assert href == f"/archives/{carry}/ptd?model=model&name=lin1.bias&name=lin2.bias"
    fetched = httpx.get(server + href)
    assert fetched.status_code == 200 and fetched.content[4:8] == b"FT01"

    programs = page.locator("[data-testid=executorch-program]")
    assert programs.count() == 1 and programs.text_content() == "model.pte"
    assert programs.get_attribute("href") == f"/archives/{carry}/executorch/model.pte"
    assert httpx.get(server + programs.get_attribute("href")).content == PROGRAM

    open_viewer(page, server, "#/archive/layouts")  # an archive without programs shows none
    page.wait_for_function("() => document.querySelectorAll('[data-testid=executorch-program]').length === 0")
    assert page.locator("[data-testid=executorch-programs]").is_hidden()
