"""The viewer's page as the browser tests open it.

The page's Content-Security-Policy has no 'unsafe-eval': Playwright's `wait_for_function` must be
given a function (`"() => ..."`), since a bare expression is eval'ed in the page and refused."""

from __future__ import annotations


def open_viewer(page, server: str, fragment: str = "") -> None:
    """Go to the viewer at `server` (with `fragment`) and wait until its tensor list is drawn."""
    page.goto(f"{server}/{fragment}")
    page.wait_for_selector("[data-testid=tensor-row]")
