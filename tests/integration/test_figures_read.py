"""Figures a person reads: enough labels on log axes, legible text on coloured cells, owners
told apart when their sizes are equal, policies told apart when their payments are equal, and a
topology that shows the channels' load. Each figure is drawn for real and its artists inspected."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpmarket.output.figures import market as market_plots
from dpmarket.output.figures import run as plots
from dpmarket.output.figures import sweep as sweep_plots
from dpmarket.output.figures import topology
from dpmarket.output.figures.axes import MIN_LABELS, log_locator, plain, text_colour
from tests.output.figures.test_sweep import synthetic_owners, synthetic_sweep


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
    legend = [t.get_text() for t in drawn[0].legends[0].get_texts()]  # under the axes (issue 25)
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
    """Cells with their own data (each owner's own ψ differs from cell to cell) set each cell's dots
    side by side; cells that share their data are one dot per owner (the next test)."""
    sweep = synthetic_sweep({"data.owners": [3, 5]}, lambda N, eps, n: 1e-3 / N)
    owners = synthetic_owners(sweep).assign(records=10_000)
    owners["own_psi"] *= 1.0 + 0.1 * owners["cell"]
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
    graph = topology.build(["a", "b", "c", "d"], [0, 1, 0, 1], [1.0] * 4, [1.0] * 4, [10, 20, 30, 40],
                           channels=2)
    load = {"exchanges": [5, 7, 0, 9], "collisions": [1, 0, 0, 2], "utilisation": [0.125, 0.5],
            "collided": [3, 4], "transmissions": [30, 40]}
    topology.draw(graph, tmp_path / "t.png", load)
    fig = drawn[0]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]
    assert {"a", "b", "c", "d"} <= set(texts)
    assert any("channel 0: 2 owners, use 12.5%, 3 of 30 transmissions collided" in t for t in texts)
    assert any("exchanges per owner" in (ax.get_ylabel(), ax.get_xlabel()) for ax in fig.axes)  # colour bar
    assert nx.number_of_nodes(graph) == 7


def test_ideal_run_sequence_axis_counts_owners_in_whole_numbers(tmp_path, drawn):
    data = plots.RunFigures("t", [0, 1, 2], [0.5, 0.4, 0.3], 0.1, 0.6, [0, 2, 1], 3)
    plots.owner_sequence(data, tmp_path / "s.png")
    labels = _labels(drawn[0].axes[0].yaxis)
    assert labels and all(float(t).is_integer() for t in labels)


def test_sweep_scaling_figure_labels_both_log_axes(tmp_path, drawn):
    sweep = synthetic_sweep({"privacy.epsilon": [2.0, 5.0, 10.0]}, lambda N, eps, n: 0.02 / eps)
    sweep_plots.draw_scaling(sweep, {"scenario": "t"}, "epsilon_harmonic", "privacy.epsilon", "ε",
                             path=tmp_path / "e.png")
    ax = drawn[0].axes[0]
    assert len(_labels(ax.yaxis)) >= MIN_LABELS
    assert {"2", "5", "10"} <= set(_labels(ax.xaxis))  # plain numbers, not 10^0.3 or none


# --- issue 25: figures a reviewer accepts ------------------------------------------------------

def _renderer(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _data_points(ax) -> np.ndarray:
    """Every drawn data point of ``ax`` in pixels: line vertices and scatter offsets."""
    points = [line.get_transform().transform(line.get_xydata()) for line in ax.lines
              if len(line.get_xydata())]
    points += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections
               if len(c.get_offsets())]
    return np.vstack(points) if points else np.empty((0, 2))


def _covered(fig) -> int:
    """How many data points of the figure's first axes lie under a legend (of the axes or the figure)."""
    renderer = _renderer(fig)
    ax = fig.axes[0]
    legends = [leg for leg in [ax.get_legend(), *fig.legends] if leg is not None]
    points = _data_points(ax)
    inside = ax.get_window_extent(renderer)
    points = points[(points[:, 0] >= inside.x0) & (points[:, 0] <= inside.x1)
                    & (points[:, 1] >= inside.y0) & (points[:, 1] <= inside.y1)]
    hits = 0
    for legend in legends:
        box = legend.get_window_extent(renderer)
        hits += int(np.sum((points[:, 0] >= box.x0) & (points[:, 0] <= box.x1)
                           & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)))
    return hits


def _inside_figure(fig) -> list[str]:
    """The texts (tick labels, names, legend entries) that end outside the figure: clipped."""
    renderer = _renderer(fig)
    frame = fig.bbox
    out = []
    texts = [t for ax in fig.axes for t in ax.texts] + list(fig.texts)
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    texts += [t for leg in legends if leg for t in leg.get_texts()]
    for text in texts:
        if not text.get_text() or not text.get_visible():
            continue
        box = text.get_window_extent(renderer)
        if (box.x0 < frame.x0 - 0.5 or box.x1 > frame.x1 + 0.5
                or box.y0 < frame.y0 - 0.5 or box.y1 > frame.y1 + 0.5):
            out.append(text.get_text())
    return out


def _accounting_sweep():
    """The accounting study's shape: six (mechanism, accountant) lines over five budgets, ψ from far
    above ψ(0) at ε = 1 down four decades (where the old legend hid ε = 1)."""
    grid = {"privacy.mechanism": ["laplace", "gaussian"], "privacy.accountant": ["basic", "rdp", "pld"],
            "privacy.epsilon": [1.0, 3.0, 10.0, 30.0, 100.0]}
    gain = {"basic": 1.0, "rdp": 0.05, "pld": 0.04}
    sweep = synthetic_sweep(grid, lambda N, eps, n: 5.0 / eps**2)
    pairs = zip(sweep["privacy.mechanism"], sweep["privacy.accountant"], strict=True)
    sweep["psi_mean"] *= [gain[a] * (0.05 if m == "gaussian" and a != "basic" else 1.0) for m, a in pairs]
    return sweep.assign(psi_zero=1.54)


def test_the_accounting_sweeps_legend_covers_no_point_and_the_old_one_did(tmp_path, drawn, monkeypatch):
    sweep = _accounting_sweep()
    sweep_plots.draw_scaling(sweep, {"scenario": "t"}, "epsilon_harmonic", "privacy.epsilon", "ε",
                             path=tmp_path / "e.png")
    assert _covered(drawn[0]) == 0 and _inside_figure(drawn[0]) == []
    legend = drawn[0].legends[0]
    renderer = _renderer(drawn[0])
    assert legend.get_window_extent(renderer).y1 < drawn[0].axes[0].get_window_extent(renderer).y0
    # The deliberately wrong input: the legend in the axes, where it was, hides points at ε = 1.
    from dpmarket.output.figures import axes as axes_module

    monkeypatch.setattr(sweep_plots, "legend_below", lambda fig, ax, **kw: ax.legend(fontsize=7))
    drawn.clear()
    sweep_plots.draw_scaling(sweep, {"scenario": "t"}, "epsilon_harmonic", "privacy.epsilon", "ε",
                             path=tmp_path / "old.png")
    assert _covered(drawn[0]) > 0
    assert axes_module.legend_below is not sweep_plots.legend_below


@pytest.mark.parametrize("figure", ["psi", "band", "epsilon", "records", "benefit", "payment"])
def test_every_psi_figure_draws_psi_of_the_untrained_model_and_keeps_its_legend_off_the_data(
        tmp_path, drawn, figure):
    import pandas as pd

    from dpmarket.output.figures.axes import ZERO_LABEL

    zero = 0.8
    if figure == "psi":
        plots.psi_against_k(plots.RunFigures("t", [0, 10, 20, 30], [zero, 0.02, 0.015, 0.012], 0.014, zero,
                                             [], 2), tmp_path / "p.png")
    elif figure == "band":
        metrics = pd.DataFrame({"replication": [0, 0, 0, 1, 1, 1], "k": [0, 10, 20, 0, 10, 20],
                                "psi": [zero, 0.1, 0.05, zero, 0.2, 0.04]})
        sweep_plots.draw_band(metrics, tmp_path / "b.png", "t")
    elif figure in ("epsilon", "records", "benefit"):
        sweep = synthetic_sweep({"privacy.epsilon": [1.0, 10.0], "data.records": [1000, 4000]},
                                lambda N, eps, n: 50.0 / (eps * n) ** 2 * 1e6).assign(psi_zero=zero)
        if figure == "benefit":
            sweep_plots.draw_owner_benefit(sweep, synthetic_owners(sweep), {"scenario": "t"},
                                           tmp_path / "o.png")
        else:
            key, column = (("privacy.epsilon", "epsilon_harmonic") if figure == "epsilon"
                           else ("data.records", "records"))
            sweep_plots.draw_scaling(sweep, {"scenario": "t"}, column, key, key, path=tmp_path / "s.png")
    else:
        rows = [{"policy": p, "participants": 3, "total_payment": pay, "replications": 2, "psi_mean": 0.01,
                 "psi_min": 0.008, "psi_max": 0.012, "psi_forecast": 0.011}
                for p, pay in (("a", 6.0), ("b", 9.0))]
        market_plots.psi_against_payment(rows, "t", tmp_path / "m.png", zero)
    fig = drawn[0]
    ax = fig.axes[0]
    zeros = [line for line in ax.lines if line.get_label() == ZERO_LABEL]
    assert zeros and all(np.allclose(line.get_ydata(), zero) for line in zeros)
    assert _covered(fig) == 0 and _inside_figure(fig) == []


def test_owner_benefit_merges_coinciding_cells_and_names_the_owners_that_benefit(tmp_path, drawn):
    """Cells that share their data (ε varies) give one dot per owner; lines within 5 % are one line
    naming both cells; the owners above a line are named, inside the figure, without overlapping."""
    sweep = synthetic_sweep({"privacy.epsilon": [1.0, 10.0, 100.0]},
                            lambda N, eps, n: 0.004 if eps > 1 else 0.5).assign(psi_zero=0.9, owners=30)
    sweep.loc[sweep["privacy.epsilon"] == 100.0, "psi_median"] = 0.004 * 0.9 * 1.02  # within 5 %
    owners = synthetic_owners(sweep)
    owners["name"] = [f"hospital-with-a-long-name-{i}" for i in owners["owner"]]
    owners["psi_median"] = owners["cell"].map(sweep.set_index("cell")["psi_median"])
    owners["benefits"] = owners["psi_median"] < owners["own_psi"]
    sweep_plots.draw_owner_benefit(sweep, owners, {"scenario": "t"}, tmp_path / "o.png")
    fig = drawn[0]
    ax = fig.axes[0]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(label.startswith("epsilon=10, 100: shared model ψ") for label in labels), labels
    assert sum("shared model ψ" in label for label in labels) == 2  # three cells, two lines
    gaining = sorted(owners.loc[owners["benefits"], "name"].unique())
    names = sorted(t.get_text() for t in ax.texts if t.get_text().startswith("hospital"))
    assert names == gaining[: sweep_plots.MAX_NAMED] or set(names) <= set(gaining) and len(names) == 12
    assert _inside_figure(fig) == [] and _covered(fig) == 0
    renderer = _renderer(fig)
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().startswith("hospital")]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    from matplotlib.collections import PathCollection

    dots = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    assert dots == 30  # one dot per owner, not one per owner and cell


@pytest.mark.parametrize("owners, channels", [(20, 1), (1000, 1), (2000, 4)])
def test_topology_names_stay_inside_and_counts_have_whole_number_colours(tmp_path, drawn, owners, channels):
    gen = np.random.default_rng(owners)
    names = [f"westchester-medical-center-{i}" for i in range(owners)]
    graph = topology.build(names, [i % channels for i in range(owners)], [1.0] * owners, [1.0] * owners,
                           [int(v) for v in gen.integers(10_000, 200_000, owners)], channels=channels)
    load = {"exchanges": [int(v) for v in gen.poisson(3, owners)], "collisions": [0] * owners,
            "utilisation": [0.5] * channels, "collided": [6] * channels, "transmissions": [10] * channels}
    topology.draw(graph, tmp_path / "t.png", load)
    fig = drawn[0]
    assert _inside_figure(fig) == []
    bar = next(ax for ax in fig.axes if "exchanges per" in ax.get_xlabel())
    ticks = [t.get_text().replace(",", "") for t in bar.get_xticklabels() if t.get_text()]
    assert ticks and all(t.lstrip("−-").isdigit() for t in ticks), ticks
    from matplotlib.collections import PathCollection

    main = fig.axes[0]
    dots = sum(len(c.get_offsets()) for c in main.collections if isinstance(c, PathCollection))
    if owners > topology.DRAW_EACH_OWNER_UP_TO:
        assert dots <= topology.GROUPS + channels + 1
    else:
        assert dots == owners + channels + 1
    if owners > topology.DRAW_EACH_OWNER_UP_TO:  # every owner is in one labelled group
        labels = [t.get_text() for t in main.texts if "–" in t.get_text()]
        covered = sum(int(b) - int(a) + 1 for a, b in (label.split("–") for label in labels))
        assert covered >= owners
