"""A headless Chromium for tests that look at pages as a person would.

Debian's ``chromium`` (``apt-get install chromium``) driven by Playwright for Python, launched with
the system browser (``executable_path``; never ``playwright install``). Use it from any test package:
register the fixture in that package's ``conftest.py`` (``from browser import chromium_page``, with
``tests/`` on ``sys.path``), then::

    from browser import serve

    def test_page(chromium_page, tmp_path):
        with serve(directory) as base_url:
            page = chromium_page()
            page.goto(base_url + "/")

``chromium_page`` skips the test, saying why, where Playwright or the browser is missing. Every page
it opens records its console errors and failed requests in ``page.problems`` (a list of strings).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("DPMARKET_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def chromium_missing() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[docs]')"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set $DPMARKET_CHROMIUM)"
    return None


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """``directory`` served over HTTP on 127.0.0.1 (a free port) while the block runs; yields its URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def chromium_page():
    """A factory of new pages in one headless Chromium (per test module), closed at the end."""
    why = chromium_missing()
    if why:
        pytest.skip(f"no browser test: {why}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(Path(CHROMIUM)), args=FLAGS, headless=True)
        pages = []

        def new_page():
            page = browser.new_page()
            page.problems = []
            page.on("console", lambda m: m.type == "error" and page.problems.append(f"console: {m.text}"))
            page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: page.problems.append(f"request failed: {r.url}"))
            pages.append(page)
            return page

        try:
            yield new_page
        finally:
            for page in pages:
                page.close()
            browser.close()
