"""Figures a person reads: enough labels on log axes, legible text on coloured cells, owners
told apart when their sizes are equal, policies told apart when their payments are equal, and a
topology that shows the channels' load. Each figure is drawn for real and its artists inspected."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.figure import Figure

from dpmarket.output.figures import market as market_plots
from dpmarket.output.figures import run as plots
from dpmarket.output.figures import sweep as sweep_plots
from dpmarket.output.figures import topology
from dpmarket.output.figures.axes import MIN_LABELS, log_locator, plain, text_colour
from tests.output.figures.test_sweep import synthetic_owners, synthetic_sweep


@pytest.fixture
def drawn(monkeypatch):
    """Every figure saved during the test, kept for inspection (the file is still written)."""
    figures: list[Figure] = []
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _labels(axis) -> list[str]:
    """The labels of the major ticks inside the axis' limits, as drawn."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = [t for t in axis.get_major_locator()() if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    formatter = axis.get_major_formatter()
    return [formatter(t, k) for k, t in enumerate(ticks)]


@given(st.floats(-12, 6), st.floats(0.05, 8))
def test_every_log_range_gets_enough_labels(log_lo, decades):
    """Decades, then 1-2-5, then finer, then linear steps: never fewer than MIN_LABELS inside."""
    lo, hi = 10.0**log_lo, 10.0 ** (log_lo + decades)
    ticks = np.asarray(log_locator(lo, hi).tick_values(lo, hi))
    inside = ticks[(ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
    assert MIN_LABELS <= len(inside) <= 12


def test_plain_labels_read_as_numbers():
    assert [plain(v) for v in (0.02, 1e-5, 1.0, 1000.0, 20000.0, 2e6)] == [
        "0.02", "1e-05", "1", "1,000", "20,000", "2e+06"]


def test_psi_within_one_decade_still_has_labels(tmp_path, drawn):
    """ψ between 0.012 and 0.03 (a decade's fraction) used to show no label on the log axis."""
    data = plots.RunFigures("t", [0, 10, 20, 30], [0.03, 0.02, 0.015, 0.012], 0.014, 0.025, [], 2)
    plots.psi_against_k(data, tmp_path / "psi.png")
    ax = drawn[0].axes[0]
    assert len(_labels(ax.yaxis)) >= MIN_LABELS
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any("θ_L" in t or "θ_i*" in t for t in legend), legend


def test_epsilons_between_two_and_thirty_are_labelled(tmp_path, drawn):
    market_plots.epsilon_distribution([("a", [2.0, 5.0, 30.0]), ("b", [3.0, 10.0])], "t", tmp_path / "e.png")
    assert len(_labels(drawn[0].axes[0].yaxis)) >= MIN_LABELS


def test_text_colour_follows_the_background():
    assert text_colour((0.4, 0.0, 0.12, 1.0)) == "white"  # RdBu_r's dark red
    assert text_colour((0.03, 0.19, 0.38, 1.0)) == "white"  # its dark blue
    assert text_colour((0.97, 0.97, 0.97, 1.0)) == "black"  # its white middle
    assert text_colour((0.99, 0.86, 0.78, 1.0)) == "black"  # a light red


def test_collaboration_numbers_are_white_on_dark_cells(tmp_path, drawn):
    sweep = synthetic_sweep({"data.owners": [2, 10], "privacy.epsilon": [0.1, 1.0, 10.0]},
                            lambda N, eps, n: 0.5 / eps**2 / N, own_first=1e-3)
    sweep_plots.draw_collaboration(sweep, {"scenario": "t"}, tmp_path / "c.png")
    ax = drawn[0].axes[0]
    image = ax.images[0]
    for text in ax.texts:
        r, c = round(text.get_position()[1]), round(text.get_position()[0])
        background = image.cmap(image.norm(image.get_array()[r, c]))
        assert text.get_color() == text_colour(background)
    assert {t.get_color() for t in ax.texts} == {"black", "white"}  # this grid has both


def test_owner_benefit_with_equal_sizes_spreads_owners_by_number(tmp_path, drawn):
    sweep = synthetic_sweep({"data.owners": [3, 5]}, lambda N, eps, n: 1e-3 / N)
    owners = synthetic_owners(sweep).assign(records=10_000)
    sweep_plots.draw_owner_benefit(sweep, owners, {"scenario": "t"}, tmp_path / "b.png")
    ax = drawn[0].axes[0]
    xs = np.concatenate([c.get_offsets()[:, 0] for c in ax.collections])
    assert len(np.unique(np.round(xs, 6))) == len(owners)  # no two dots share an x
    assert "every owner holds 10,000 records" in ax.get_xlabel() and ax.get_xscale() == "linear"
    drawn.clear()
    sweep_plots.draw_owner_benefit(sweep, synthetic_owners(sweep), {"scenario": "t"}, tmp_path / "s.png")
    assert drawn[0].axes[0].get_xscale() == "log"  # sizes that differ stay the x axis


def test_policies_with_equal_payments_are_set_apart(tmp_path, drawn):
    rows = [{"policy": p, "participants": 3, "total_payment": pay, "replications": 2, "psi_mean": 0.01,
             "psi_min": 0.008, "psi_max": 0.012, "psi_forecast": 0.011}
            for p, pay in (("a", 60.0), ("b", 60.0), ("c", 20.0), ("d", 60.0))]
    market_plots.psi_against_payment(rows, "t", tmp_path / "p.png")
    ax = drawn[0].axes[0]
    xs = [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "None" and
          len(line.get_xdata()) == 1 and line.get_markerfacecolor() != "none"]
    assert len(set(xs)) == 4 and sorted(xs)[1:] != [60.0] * 3
    markers = {line.get_marker() for line in ax.lines if line.get_marker() in market_plots.MARKERS}
    assert len(markers) == 4
    assert market_plots.dodge([1.0, 2.0, 3.0], 0.025) == [0.0, 0.0, 0.0]


def test_topology_shows_names_and_the_channels_load(tmp_path, drawn):
    graph = topology.build(["a", "b", "c", "d"], [0, 1, 0, 1], [1.0] * 4, [1.0] * 4, [10, 20, 30, 40], 2)
    load = {"exchanges": [5, 7, 0, 9], "collisions": [1, 0, 0, 2], "utilisation": [0.125, 0.5],
            "collided": [3, 4], "transmissions": [30, 40]}
    topology.draw(graph, tmp_path / "t.png", load)
    fig = drawn[0]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]
    assert {"a", "b", "c", "d"} <= set(texts)
    assert any("channel 0: 2 owners, use 12.5%, 3 of 30 transmissions collided" in t for t in texts)
    assert any(ax.get_ylabel() == "exchanges per owner" for ax in fig.axes)  # the colour bar
    assert nx.number_of_nodes(graph) == 7


def test_ideal_run_sequence_axis_counts_owners_in_whole_numbers(tmp_path, drawn):
    data = plots.RunFigures("t", [0, 1, 2], [0.5, 0.4, 0.3], 0.1, 0.6, [0, 2, 1], 3)
    plots.owner_sequence(data, tmp_path / "s.png")
    labels = _labels(drawn[0].axes[0].yaxis)
    assert labels and all(float(t).is_integer() for t in labels)


def test_sweep_scaling_figure_labels_both_log_axes(tmp_path, drawn):
    sweep = synthetic_sweep({"privacy.epsilon": [2.0, 5.0, 10.0]}, lambda N, eps, n: 0.02 / eps)
    sweep_plots.draw_scaling(sweep, {"scenario": "t"}, "epsilon_harmonic", "privacy.epsilon", "ε",
                             tmp_path / "e.png")
    ax = drawn[0].axes[0]
    assert len(_labels(ax.yaxis)) >= MIN_LABELS
    assert {"2", "5", "10"} <= set(_labels(ax.xaxis))  # plain numbers, not 10^0.3 or none
