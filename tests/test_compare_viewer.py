"""The viewer's compare view in real headless Chromium, behind a token: summary, module bars, the
table sorted by relative change, a deep link to one tensor's heat maps and their difference, 390 px."""

from __future__ import annotations

import numpy as np
import pytest

from testing.cli import serve
from testing.zipbytes import write_pt2

pytestmark = pytest.mark.browser

TOKEN = "compare-token-7"
FLOAT32 = 7


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare-viewer")
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 100
    small, big = x.copy(), x.copy()
    small[3, 3] += 1  # a small change
    big += 5  # a large one, everywhere
    tensors_a = {"enc.w": x, "dec.w": x, "head.w": x[:2]}
    tensors_b = {"enc.w": small, "dec.w": big, "head.w": x[:2]}
    for name, tensors in (("a", tensors_a), ("b", tensors_b)):
        entries = {key: (FLOAT32, list(value.shape), value.tobytes()) for key, value in tensors.items()}
        if name == "b":
            entries["extra.b"] = (FLOAT32, [2], b"\0" * 8)
        write_pt2(out / f"{name}.pt2", entries)
    return [f"old={out / 'a.pt2'}", f"new={out / 'b.pt2'}"]


def _page(browser, width: int = 1280):
    context = browser.new_context(viewport={"width": width, "height": 860})
    context.add_init_script(f"sessionStorage.setItem('pt2serve.token', '{TOKEN}')")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, errors


def test_compare_view_deep_link_and_difference_heat_map(browser, archives):
    with serve(archives, token=TOKEN) as base:
        context, page, errors = _page(browser)
        try:
            page.goto(f"{base}/#/compare/old/new/tensor/enc.w")
            page.wait_for_selector("[data-testid=compare-row]")
            summary = page.text_content("[data-testid=compare-summary]")
            assert "2 changed" in summary and "1 added" in summary and "1 same" in summary
            # the table, most changed first: dec.w (everything +5) above enc.w (one element)
            names = page.eval_on_selector_all(
                "[data-testid=compare-row]", "rows => rows.map(r => r.dataset.name)"
            )
            assert names[:2] == ["dec.w", "enc.w"]
            page.focus("[data-testid=sort-relative_l2]")
            page.keyboard.press("Enter")  # ascending now, by keyboard
            names = page.eval_on_selector_all(
                "[data-testid=compare-row]", "rows => rows.map(r => r.dataset.name)"
            )
            assert names[:2] == ["enc.w", "dec.w"]
            bars = page.eval_on_selector_all(
                "[data-testid=module-bar]", "rows => rows.map(r => r.textContent)"
            )
            assert bars[0].startswith("extra") and any(b.startswith("dec") for b in bars)
            # the deep-linked tensor: both heat maps and their difference drawn
            page.wait_for_selector("[data-testid=heat-difference]")
            drawn = page.evaluate(
                "() => ['a', 'b', 'difference']"
                ".map(s => document.querySelector(`[data-testid=heat-${s}]`).width)"
            )
            assert all(w > 0 for w in drawn)
            assert page.is_hidden("[data-testid=tensors-pane]")
            # a row's link opens another tensor and the hash follows
            page.click("[data-testid=compare-row][data-name='dec.w'] a")
            page.wait_for_function("() => location.hash.endsWith('/tensor/dec.w')")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=compare-tensor] h3')"
                "?.textContent.startsWith('dec.w')"
            )
            assert not errors, errors
        finally:
            context.close()


def test_compare_view_fits_390_px_and_the_chooser_works(browser, archives):
    with serve(archives, token=TOKEN) as base:
        context, page, errors = _page(browser, width=390)
        try:
            page.goto(f"{base}/#/compare/")
            page.wait_for_selector("[data-testid=compare-a] option", state="attached")
            page.select_option("[data-testid=compare-a]", "old")
            page.select_option("[data-testid=compare-b]", "new")
            page.click("[data-testid=compare-go]")
            page.wait_for_selector("[data-testid=compare-row]")
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            assert not errors, errors
        finally:
            context.close()


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    pytest.importorskip("torch", reason="torch writes the two archive versions (with their graphs)")
    from testing.versioned_archives import write_version

    out = tmp_path_factory.mktemp("graph-colour")
    return [
        f"v1={write_version(out / 'v1' / 'net.pt2', 1)}",
        f"v2={write_version(out / 'v2' / 'net.pt2', 2)}",
    ]


def test_graph_coloured_by_relative_change_and_by_a_statistic(browser, versions):
    with serve(versions, token=TOKEN) as base:
        context, page, errors = _page(browser)
        try:
            page.goto(f"{base}/#/archive/v2/graph")
            page.wait_for_selector("[data-testid=graph-node], [data-testid=graph-group]")
            page.select_option("[data-testid=graph-colour]", "change")  # from v1, the first choice
            page.wait_for_function(
                "() => document.querySelector('[data-testid=graph-legend]')"
                ".textContent.includes('relative change')"
            )
            values = page.eval_on_selector_all(
                "[data-module]",
                "els => Object.fromEntries(els.map(e => [e.dataset.module, e.dataset.colourValue]))",
            )
            # head.bias changed (head), norm did not: coloured by their figures
            assert float(values["head"]) > 0 and float(values["norm"]) == 0, values
            fills = page.eval_on_selector_all(
                "[data-module=head] > rect, [data-module=norm] > rect", "els => els.map(e => e.style.fill)"
            )
            assert len(set(fills)) == 2 and all(fills), fills
            page.select_option("[data-testid=graph-colour]", "std")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=graph-legend]').textContent.startsWith('std')"
            )
            coloured = page.eval_on_selector_all(
                "[data-module]", "els => els.filter(e => e.dataset.colourValue).length"
            )
            assert coloured > 0
            assert not errors, errors
        finally:
            context.close()


@pytest.fixture(scope="module")
def from_zero(tmp_path_factory):
    """Two modules whose old values are all zero (no relative change) beside one that scales by 1.1."""
    out = tmp_path_factory.mktemp("compare-from-zero")
    w = np.linspace(1, 2, 64, dtype=np.float32).reshape(8, 8)
    zeros = np.zeros(8, dtype=np.float32)
    bias, gate = np.full(8, 0.5, dtype=np.float32), np.array([0, 0, 0, 3, 0, 0, 0, 0], dtype=np.float32)
    sides = {
        "a": {"w.w": w, "bias.b": zeros, "gate.b": zeros},
        "b": {"w.w": w * 1.1, "bias.b": bias, "gate.b": gate},
    }
    for name, tensors in sides.items():
        write_pt2(out / f"{name}.pt2", {k: (FLOAT32, list(v.shape), v.tobytes()) for k, v in tensors.items()})
    return [f"old={out / 'a.pt2'}", f"new={out / 'b.pt2'}"]


def test_a_module_from_all_zeros_shows_its_absolute_change(browser, from_zero):
    with serve(from_zero, token=TOKEN) as base:
        context, page, errors = _page(browser)
        try:
            page.goto(f"{base}/#/compare/old/new")
            page.wait_for_selector("[data-testid=module-bar]")
            bars = page.eval_on_selector_all(
                "[data-testid=module-bar]",
                """rows => rows.map(r => ({
                    module: r.firstChild.textContent, measure: r.dataset.measure, title: r.title,
                    value: r.lastChild.textContent,
                    width: r.querySelector('.bar').getBoundingClientRect().width,
                }))""",
            )
            # the modules from zero first (their relative change has no value), the larger change first
            assert [b["module"] for b in bars] == ["gate", "bias", "w"], bars
            gate, bias, w = bars
            assert gate["measure"] == bias["measure"] == "absolute" and w["measure"] == "relative"
            assert gate["value"] == "abs 3" and bias["value"] == "abs 1.414", (
                bars
            )  # ||a-b||: 3, sqrt(8 * 0.25)
            assert "all zero" in bias["title"] and "absolute change" in bias["title"]
            # drawn, not 0-length: the larger absolute change full width, the other in proportion
            assert bias["width"] == pytest.approx(gate["width"] * 2**0.5 / 3, rel=0.02) and bias["width"] > 20
            assert w["value"] == "0.1" and w["width"] > 20
            assert not errors, errors
        finally:
            context.close()
