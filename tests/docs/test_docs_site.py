"""The documentation site in a real browser: it builds strictly, and its pages render.

The site is built with ``mkdocs build --strict`` into a temporary directory, served on 127.0.0.1,
and opened in headless Chromium (``tests/browser.py``): the home page, the tutorial and the
scenario-key reference open without a console error or a failed request, the navigation is there,
MathJax typesets a formula, and the search finds a scenario key. Skips, saying why, where MkDocs,
Playwright or Chromium is missing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from browser import serve
from harness import ROOT

pytestmark = pytest.mark.slow  # the site built strictly and opened in Chromium


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("no site test: MkDocs is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_site_builds_every_page(site):
    for page in ("index.html", "tutorial/index.html", "reference/scenario-keys/index.html",
                 "reference/commands/index.html", "reference/outputs/index.html", "reference/api/index.html",
                 "background/mathematics/index.html", "javascripts/mathjax/tex-svg.js"):
        assert (site / page).is_file(), page
    keys = (site / "reference/scenario-keys/index.html").read_text(encoding="utf-8")
    assert "network.loss_probability" in keys and "market.pilots.replications" in keys
    commands = (site / "reference/commands/index.html").read_text(encoding="utf-8")
    assert "--replications" in commands and "--policies" in commands


def test_pages_render_in_a_browser(site, chromium_page):
    with serve(site) as base:
        for path, title in [("/", "dpmarket"), ("/tutorial/", "Tutorial"),
                            ("/reference/scenario-keys/", "Scenario keys"),
                            ("/background/mathematics/", "The mathematics"),
                            ("/reference/reproducibility/", "Reproducibility")]:
            page = chromium_page()
            page.goto(base + path, wait_until="networkidle")
            assert title in page.title(), (path, page.title())
            nav = page.locator("nav.md-nav--primary")
            assert nav.count() > 0 and nav.first.locator("a").count() >= 10, f"{path}: no navigation"
            if path == "/background/mathematics/":
                page.wait_for_selector("mjx-container svg", timeout=15000)
                assert page.locator("mjx-container").count() > 20, "MathJax typeset too few formulas"
            assert page.problems == [], f"{path}: {page.problems}"


def test_search_finds_a_scenario_key(site, chromium_page):
    with serve(site) as base:
        page = chromium_page()
        page.goto(base + "/", wait_until="networkidle")
        box = page.locator("input.md-search__input")
        box.click()
        box.press_sequentially("loss_probability", delay=20)
        result = page.locator(".md-search-result__item a").first
        result.wait_for(timeout=15000)
        links = [a.get_attribute("href") for a in page.locator(".md-search-result__item a").all()]
        assert any("scenario-keys" in (href or "") for href in links), links
        assert page.problems == [], page.problems
