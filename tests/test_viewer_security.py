"""The viewer under its Content-Security-Policy, in real headless Chromium: the page works and the
browser reports no violation; the copyable curl line is one shell word per argument whatever the
tensor's name holds (quotes, parentheses, `$`)."""

from __future__ import annotations

import shlex
import struct
from urllib.parse import quote

import httpx
import pytest

from app.main import create_app
from app.settings import Settings, parse_archive_specs
from testing.paths import ARCHIVES
from testing.service import threaded_server
from testing.viewer_page import open_viewer
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.browser

FLOAT = 7  # torch's serialized ScalarType of float32
ODD_NAMES = ["it's.weight", "odd'(name)!*$(touch x)"]
VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = tmp_path_factory.mktemp("quoted") / "quoted.pt2"
    payload = struct.pack("<4f", 1, 2, 3, 4)
    write_pt2(path, {name: (FLOAT, [4], payload) for name in ODD_NAMES})
    specs = [f"layouts={ARCHIVES / 'layouts.pt2'}", f"quoted={path}"]
    app = create_app(Settings(archives=parse_archive_specs(specs), revalidate_seconds=0))
    with threaded_server(app) as url:
        yield url


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.add_init_script(VIOLATIONS)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    yield page
    context.close()


def test_the_viewer_works_under_its_csp(page, server) -> None:
    answer = page.goto(f"{server}/#/archive/layouts")
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-content-type-options"] == "nosniff"
    page.wait_for_selector("[data-testid=tensor-row]")
    page.click("[data-testid=tensor-row][data-name='conv.weight']")
    page.wait_for_selector("[data-testid=histogram]:not([hidden])")
    page.wait_for_selector("[data-testid=heatmap]:not([hidden])")
    page.keyboard.press("Escape")
    assert page.evaluate("window.cspViolations") == []
    assert not [e for e in page.errors if "Content Security Policy" in e or "Refused" in e], page.errors


@pytest.mark.parametrize("name", ODD_NAMES)
def test_the_curl_line_quotes_every_character_of_a_name(page, server, name) -> None:
    open_viewer(page, server, f"#/archive/quoted/tensor/{quote(name, safe='')}")
    page.wait_for_function("() => document.querySelector('[data-testid=curl]').textContent.includes('/data')")
    words = shlex.split(page.text_content("[data-testid=curl]"))
    assert words[:3] == ["curl", "-H", "Range: bytes=0-1023"] and words[4] == "-o" and len(words) == 6, words
    url = words[3]
    assert "'" not in url and "(" not in url and "$" not in url, url
    answer = httpx.get(url, headers={"Range": "bytes=0-1023"})
    assert answer.status_code in (200, 206) and answer.content == struct.pack("<4f", 1, 2, 3, 4)
    assert page.evaluate("window.cspViolations") == []
