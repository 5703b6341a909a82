"""report.html's interactive timeline in a real browser (headless Chromium, tests/browser.py): it loads
offline within seconds for ny_hospitals, with no console error or request; every owner has a track;
the wheel zooms; hovering an exchange reads back its details; the list picks owners; outages and
collision windows are drawn where spans.csv puts them."""

from __future__ import annotations

import time

import pandas as pd
import pytest
from browser import chromium_page  # noqa: F401  (the fixture)

from dpmarket.output.results import run_and_write
from dpmarket.scenario.bundled import find
from dpmarket.scenario.loading import load

pytestmark = pytest.mark.slow  # report.html opened in Chromium

LOAD_SECONDS = 5.0


@pytest.fixture(scope="module")
def ny(tmp_path_factory):
    out = tmp_path_factory.mktemp("ny") / "run"
    run_and_write(load(find("ny_hospitals")), out)
    return out


@pytest.fixture(scope="module")
def page(chromium_page, ny):  # noqa: F811
    page = chromium_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    start = time.perf_counter()
    page.goto((ny / "report.html").as_uri())
    page.wait_for_function("window.dpmarketTimeline && window.dpmarketTimeline.ready", timeout=30_000)
    page.loaded_in = time.perf_counter() - start
    page.requests = requests
    page.locator("#dpm-timeline canvas").scroll_into_view_if_needed()
    return page


def canvas_point(page, t: float, lane: int) -> tuple[float, float]:
    """The page coordinates of time ``t`` in the middle of ``lane``."""
    return page.evaluate(
        """([t, lane]) => {
        const r = document.querySelector('#dpm-timeline canvas').getBoundingClientRect();
        const api = window.dpmarketTimeline;
        return [r.left + api.xOf(t), r.top + api.yOf(lane)];
    }""",
        [t, lane],
    )


def pixel(page, t: float, lane: int) -> list[int]:
    return page.evaluate(
        """([t, lane]) => {
        const c = document.querySelector('#dpm-timeline canvas'), api = window.dpmarketTimeline;
        const ratio = window.devicePixelRatio || 1;
        return Array.from(c.getContext('2d').getImageData(Math.round(api.xOf(t) * ratio),
                          Math.round(api.yOf(lane) * ratio), 1, 1).data);
    }""",
        [t, lane],
    )


def test_the_report_loads_offline_quickly_without_errors(page, ny):
    assert page.problems == []
    assert all(url.startswith(("file:", "data:")) for url in page.requests), page.requests
    assert page.loaded_in < LOAD_SECONDS, page.loaded_in
    names = pd.read_csv(ny / "owners.csv")["name"].tolist()
    lanes = page.evaluate("window.dpmarketTimeline.lanes()")
    assert lanes == ["channel 0", *names]  # a track per owner, named after it


def test_outages_and_collision_windows_are_drawn(page, ny):
    table = pd.read_csv(ny / "spans.csv", keep_default_na=False)
    lanes = page.evaluate("window.dpmarketTimeline.lanes()")
    outage = (
        table[table["kind"] == "outage"].assign(length=lambda f: f["end"] - f["start"]).nlargest(1, "length")
    )
    row = outage.iloc[0]
    assert pixel(page, (row.start + row.end) / 2, lanes.index(row["name"]))[:3] == [221, 221, 221]
    window = table[table["kind"] == "collision_window"].iloc[0]
    page.evaluate(
        "([a, b]) => window.dpmarketTimeline.show(a, b)",
        [float(window.start) - 0.01, float(window.end) + 0.01],
    )
    assert pixel(page, (window.start + window.end) / 2, 0)[:3] == [214, 39, 40]


def test_the_wheel_zooms_and_a_hovered_exchange_reads_back(page, ny):
    page.evaluate("window.dpmarketTimeline.show(0, 1e9)")
    before = page.evaluate("window.dpmarketTimeline.view()")
    table = pd.read_csv(ny / "spans.csv", keep_default_na=False)
    lanes = page.evaluate("window.dpmarketTimeline.lanes()")
    chosen = table[(table["kind"] == "exchange") & (table["outcome"] == "applied")].iloc[40]
    mid, lane = (chosen.start + chosen.end) / 2, lanes.index(chosen["name"])
    for _ in range(60):  # zoom with the wheel on the exchange until it is a few pixels wide
        x, y = canvas_point(page, mid, lane)
        page.mouse.move(x, y)
        page.mouse.wheel(0, -400)
        view = page.evaluate("window.dpmarketTimeline.view()")
        if (chosen.end - chosen.start) / (view[1] - view[0]) * 1000 > 8:
            break
    assert view[1] - view[0] < (before[1] - before[0]) / 10 and view[0] <= mid <= view[1]
    x, y = canvas_point(page, mid, lane)
    page.mouse.move(x, y + 1)
    page.mouse.move(x, y)
    text = page.locator("#dpm-timeline .dpm-tip").inner_text()
    assert text == page.evaluate("window.dpmarketTimeline.hovered")
    assert f"exchange: applied\nowner {chosen['name']}" in text and f"update k = {int(chosen.k)}" in text
    assert page.problems == []


def test_the_list_picks_owners(page):
    page.locator("#dpm-timeline select").select_option(label="crouse")
    assert page.evaluate("window.dpmarketTimeline.lanes()") == ["channel 0", "crouse"]
    page.locator("#dpm-timeline select").select_option([])
    assert len(page.evaluate("window.dpmarketTimeline.lanes()")) == 87
    assert page.problems == []
