"""The viewer's Open box in real headless Chromium (Debian's chromium via playwright) against uvicorn on
loopback started with --allow-open: open a location and see its tensors, where it came from and its
version; follow the shareable link in a new page; compare two opened locations; see why a location is
refused; no Open box without --allow-open."""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.service import threaded_server
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.browser

FLOAT32 = 7


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A folder an --allow-open pattern names, with two versions of a small model."""
    folder = tmp_path_factory.mktemp("open-viewer") / "models"
    folder.mkdir()
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    for name, values in (("v1", x), ("v2", x + 1)):
        write_pt2(folder / f"{name}.pt2", {"enc.w": (FLOAT32, [16, 8], values.tobytes()),
                                           "enc.b": (FLOAT32, [8], x[0].tobytes())})  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def server(models):
    settings = Settings(
        archives=parse_archive_specs([f"layouts={ARCHIVES / 'layouts.pt2'}"]),
        revalidate_seconds=0,
        allow_open=(f"{models}/*", "hf://pt2serve-test/*"),
    )
    with threaded_server(create_app(settings)) as url:
        yield url


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    yield page
    context.close()
    assert not errors, errors


def open_in_box(page, location: str) -> None:
    page.fill("[data-testid=open-input]", location)
    page.click("[data-testid=open-go]")


def row_names(page) -> list[str]:
    return page.eval_on_selector_all("[data-testid=tensor-row]", "rows => rows.map(r => r.dataset.name)")


def test_open_box_shows_the_tensors_their_origin_and_version(page, server, models):
    page.goto(f"{server}/")
    page.wait_for_selector("[data-testid=tensor-row]")
    patterns = page.text_content("[data-testid=open-patterns]")
    assert f"{models}/*" in patterns and "hf://pt2serve-test/*" in patterns
    open_in_box(page, str(models / "v1.pt2"))
    page.wait_for_function("() => location.hash.startsWith('#/archive/v1-')")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=tensor-row]').length === 2")
    assert sorted(row_names(page)) == ["enc.b", "enc.w"]
    assert page.text_content("[data-testid=archive-location]") == str(models / "v1.pt2")
    archive_id = urllib.parse.unquote(page.evaluate("location.hash").split("/")[2])
    import httpx

    version = httpx.get(f"{server}/archives/{archive_id}/tensors").json()["version"]
    assert page.text_content("[data-testid=archive-version]") == f"@{version}"
    assert page.is_visible("[data-testid=open-share]")


def test_shareable_link_opens_the_location_in_a_new_page(browser, page, server, models):
    page.goto(f"{server}/")
    page.wait_for_selector("[data-testid=tensor-row]")
    open_in_box(page, str(models / "v2.pt2"))
    page.wait_for_function("() => location.hash.startsWith('#/archive/v2-')")
    link = page.get_attribute("[data-testid=open-share]", "href")
    assert link == "#/open/" + urllib.parse.quote(str(models / "v2.pt2"), safe="")
    fresh = browser.new_context(viewport={"width": 1024, "height": 800})
    try:
        other = fresh.new_page()
        other.goto(f"{server}/{link}")
        other.wait_for_function("() => location.hash.startsWith('#/archive/v2-')")
        other.wait_for_function("() => document.querySelectorAll('[data-testid=tensor-row]').length === 2")
        assert other.text_content("[data-testid=archive-location]") == str(models / "v2.pt2")
    finally:
        fresh.close()


def test_compare_two_opened_locations(page, server, models):
    a, b = (urllib.parse.quote(str(models / name), safe="") for name in ("v1.pt2", "v2.pt2"))
    page.goto(f"{server}/#/open/{a}/{b}")
    page.wait_for_function("() => location.hash.startsWith('#/compare/v1-')")
    page.wait_for_selector("[data-testid=compare-row]")
    names = page.eval_on_selector_all("[data-testid=compare-row]", "rows => rows.map(r => r.dataset.name)")
    assert names == ["enc.w"]  # enc.b is the same on both sides
    assert "1 changed" in page.text_content("[data-testid=compare-summary]")
    choices = page.eval_on_selector_all("[data-testid=compare-a] option", "o => o.map(x => x.value)")
    assert any(c.startswith("v1-") for c in choices) and any(c.startswith("v2-") for c in choices)


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("/etc/passwd", "outside every folder an --allow-open pattern names"),
        ("https://example.com/model.pt2", "matches no --allow-open pattern"),
        ("{models}/../v1.pt2", "a path with '..' is refused"),
    ],
)
def test_a_refused_location_shows_the_reason(page, server, models, location, reason):
    page.goto(f"{server}/")
    page.wait_for_selector("[data-testid=tensor-row]")
    open_in_box(page, location.format(models=models))
    page.wait_for_selector("[data-testid=open-error]:visible")
    message = page.text_content("[data-testid=open-error]")
    assert reason in message, message
    assert page.evaluate("location.hash").startswith("#/archive/layouts")  # still where it was


def test_no_open_box_without_allow_open(page):
    settings = Settings(
        archives=parse_archive_specs([f"layouts={ARCHIVES / 'layouts.pt2'}"]), revalidate_seconds=0
    )
    with threaded_server(create_app(settings)) as url:
        page.goto(f"{url}/")
        page.wait_for_selector("[data-testid=tensor-row]")
        assert page.is_hidden("[data-testid=open-form]")
        page.goto(f"{url}/#/open/{urllib.parse.quote(str(ARCHIVES / 'dtypes.pt2'), safe='')}")
        page.wait_for_selector("[data-testid=open-error]:visible")
        assert "opening is off" in page.text_content("[data-testid=open-error]")
