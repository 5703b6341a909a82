"""timeline.png read back from its artists: a lane per owner named in full, a bar per exchange in its
outcome's colour, outages and collisions where spans.csv puts them, the update sequence below; a
selection shows only its owners; 3 to 10,000 owners stay legible (lanes of owner groups beyond 100)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import tiny
from matplotlib.colors import to_hex

from dpmarket.cli import main
from dpmarket.output import spans as sp
from dpmarket.output import views
from dpmarket.output.figures.lanes import COLOURS, draw_lanes
from dpmarket.output.results import run_and_write

LONG = "a-hospital-with-a-very-long-name-that-a-fixed-margin-would-clip-on-the-left"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lanes") / "run"
    network = {
        "mode": "request",
        "transmission_time": 0.02,
        "latency": 0.005,
        "loss_probability": 0.05,
        "dropout": {"mean_online": 4.0, "mean_offline": 1.0},
    }
    owners = [{"name": LONG}, {"name": "b"}, {"name": "c"}]
    run_and_write(
        tiny(network=network, owners=owners, learner={"iterations": 150}, output={"plots": True}), out
    )
    return out


def bars_by_colour(ax) -> dict[str, int]:
    """Exchanges drawn per colour (broken_barh collections of the exchange bars)."""
    out: dict[str, int] = {}
    for c in ax.collections:
        if c.get_label().startswith("exchange "):
            colour = to_hex(c.get_facecolor()[0])
            out[colour] = out.get(colour, 0) + len(c.get_paths())
    return out


def test_lanes_show_each_owner_its_exchanges_outages_and_collisions(run, tmp_path, drawn):
    assert main(["timeline", str(run)]) == 0
    fig = drawn[-1]
    top, bottom = fig.axes[0], fig.axes[1]
    table = pd.read_csv(run / "spans.csv", keep_default_na=False)
    labels = [t.get_text() for t in top.get_yticklabels()]
    assert labels == [LONG, "b", "c"]  # in full
    renderer = fig.canvas.get_renderer()
    for label in top.get_yticklabels():  # and inside the picture: never clipped
        box = label.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width
    exchanges = table[table["kind"] == "exchange"]
    expected = {COLOURS[o]: n for o, n in exchanges["outcome"].value_counts().items()}
    assert bars_by_colour(top) == expected
    grey = [c for c in top.collections if to_hex(c.get_facecolor()[0]) == to_hex("0.82")]
    drawn_outages = sum(p.get_extents().width for c in grey for p in c.get_paths())
    outages = table[table["kind"] == "outage"]
    assert drawn_outages == pytest.approx((outages["end"] - outages["start"]).sum(), rel=1e-9)
    marks = [c for c in top.collections if c.get_label() == "collision"]
    collided = table[(table["kind"] == "transmission") & (table["outcome"] == "lost_collision")]
    assert len(marks[0].get_offsets()) == len(collided) > 0
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert "lost to collision" in legend and "offline" in legend
    dots = bottom.collections[0].get_offsets()
    assert len(dots) == 150 and "Figures 4 and 9" in bottom.get_title()


def test_a_selection_shows_only_its_owners(run, drawn):
    assert main(["timeline", str(run), "--owners", "b,c"]) == 0
    top, bottom = drawn[-1].axes[0], drawn[-1].axes[1]
    assert [t.get_text() for t in top.get_yticklabels()] == ["b", "c"]
    table = pd.read_csv(run / "spans.csv", keep_default_na=False)
    mine = table[(table["kind"] == "exchange") & table["owner"].isin([1, 2])]
    assert sum(bars_by_colour(top).values()) == len(mine)
    applied = mine[mine["outcome"] == "applied"]
    assert sorted(bottom.collections[0].get_offsets()[:, 1].tolist()) == sorted(
        (applied["owner"] + 1).tolist()
    )


@pytest.mark.parametrize("owners", [3, 100, 101, 10_000])
def test_three_to_ten_thousand_owners_stay_legible(owners, tmp_path, drawn):
    """One lane per owner up to MAX_LANES, then lanes of consecutive owners (at most 40), every owner
    counted; the figure's height stays within a page."""
    gen = np.random.default_rng(1)
    n = 3000
    start = np.sort(gen.uniform(0, 100, n))
    block = sp._spans(
        n,
        start=start,
        end=start + 0.5,
        kind=sp.EXCHANGE,
        owner=gen.integers(0, owners, n),
        outcome=gen.choice([sp.APPLIED, sp.LOST_COLLISION], n),
        k=np.arange(1.0, n + 1),
    )
    lanes = views.Lanes(
        [f"owner-{i}" for i in range(owners)], [0] * owners, 0.0, 100.0, exchanges=n, iterations=n
    )
    lanes.add(block)
    draw_lanes(lanes.data("t"), tmp_path / "t.png")
    top = drawn[-1].axes[0]
    rows = len(top.get_yticklabels())
    assert rows == (owners if owners <= views.MAX_LANES else 40)
    assert drawn[-1].get_size_inches()[1] < 25
    if owners > views.MAX_LANES:
        assert np.asarray(lanes.counts).sum() == n  # every exchange counted in some lane
        assert "group of consecutive owners" in drawn[-1]._suptitle.get_text()
