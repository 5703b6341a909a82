"""Figures of replicated runs and sweeps (issue 5, items 1–2): the papers' figure types; and an
audit's ROC curves (:func:`draw_roc`: its runs of two neighbouring worlds).

- :func:`draw_band`: ψ against k over replications, median and 25–75 % band (papers 003
  Figures 3 and 8).
- :func:`draw_sweep`: from ``sweep.csv`` / ``sweep_owners.csv`` (the experiments contract),
  ψ against ε and against n on log-log axes with the fitted slope and the forecast line
  (Figures 5, 6, 10); the value-of-collaboration map over (number of owners, ε) (Figure 7);
  each owner's own-data ψ against the collaborative ψ (Figure 11).

Matplotlib's Agg backend and figures without dates in their metadata: the same tables give
the same bytes. The numbers behind the marks (:func:`fit_loglog`, :func:`collaboration_grid`)
are plain functions, so tests check them without reading images.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.axes import (  # noqa: E402
    ZERO_LABEL,
    ZERO_STYLE,
    integer_ticks,
    keep_texts_inside,
    label_log,
    legend_below,
    separate_texts,
    text_colour,
)
from dpmarket.privacy.auditing import claimed_frontier  # noqa: E402

_METADATA = {"Software": None}  # no version or date in the PNG: same input, same bytes
EPSILON_KEY, RECORDS_KEY, OWNERS_KEY = "privacy.epsilon", "data.records", "data.owners"
MAX_BENEFIT_CELLS = 6  # lines in the per-owner benefit figure before it becomes unreadable


@dataclass(frozen=True)
class SlopeFit:
    """Least-squares line through (log x, log y): slope, intercept and the slope's standard error."""

    slope: float
    intercept: float
    se: float  # from the residuals; nan with fewer than 3 points
    points: int

    def label(self) -> str:
        """``slope −2.01 ± 0.03`` (the ± is one standard error; omitted when unknown)."""
        if np.isnan(self.se):
            return f"slope {self.slope:.2f}"
        digits = max(2, 1 - int(np.floor(np.log10(self.se)))) if self.se > 0 else 3
        return f"slope {self.slope:.{digits}f} ± {self.se:.{digits}f}"


def fit_loglog(x: np.ndarray, y: np.ndarray) -> SlopeFit:
    """Ordinary least squares of log y on log x (positive values only)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    lx, ly = np.log(x[keep]), np.log(y[keep])
    if len(lx) < 2 or np.ptp(lx) == 0:
        return SlopeFit(float("nan"), float("nan"), float("nan"), int(len(lx)))
    slope, intercept = np.polyfit(lx, ly, 1)
    se = float("nan")
    if len(lx) > 2:
        residual = ly - (slope * lx + intercept)
        se = float(np.sqrt(np.sum(residual**2) / (len(lx) - 2) / np.sum((lx - lx.mean()) ** 2)))
    return SlopeFit(float(slope), float(intercept), se, int(len(lx)))


def swept_keys(sweep: pd.DataFrame) -> list[str]:
    """The swept keys: the columns between ``cell`` and ``replications`` (contract order)."""
    columns = list(sweep.columns)
    return columns[columns.index("cell") + 1: columns.index("replications")]


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100, metadata=_METADATA)
    return path


def _log_axes(ax) -> None:
    """Both axes logarithmic, each with enough plain labels to read (call once the data are drawn)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    label_log(ax, "x")
    label_log(ax, "y")


# --- convergence bands ----------------------------------------------------------------------

def band(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per recorded k: median, 25 % and 75 % quantiles of ψ over replications, and their count."""
    grouped = metrics.groupby("k")["psi"]
    return pd.DataFrame({"median": grouped.median(), "q25": grouped.quantile(0.25),
                         "q75": grouped.quantile(0.75), "count": grouped.size()}).reset_index()


def draw_band(metrics: pd.DataFrame, path: Path, title: str) -> Path:
    """ψ against k: the median over replications (black) and the 25–75 % band (grey), log y."""
    return draw_bands({"": metrics}, path, title)


def draw_bands(runs: dict[str, pd.DataFrame], path: Path, title: str) -> Path:
    """Several labelled bands on one axis (e.g. one per ε, as in the papers' Figure 3)."""
    fig = Figure(figsize=(6.4, 4.0))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.9)
    ax = fig.subplots()
    shades = np.linspace(0.0, 0.55, max(len(runs), 1))
    zeros = sorted({float(z) for m in runs.values() for z in m.loc[m["k"] == 0, "psi"] if z > 0})
    for (label, metrics), shade in zip(runs.items(), shades, strict=True):
        b = band(metrics)
        b = b[(b["k"] > 0) & (b["q25"] > 0)]  # log axis: k = 0 is ψ(0), shown by the first point
        colour = str(shade)
        ax.fill_between(b["k"], b["q25"], b["q75"], color="0.8", alpha=0.7, lw=0)
        reps = int(metrics["replication"].nunique()) if "replication" in metrics else 1
        ax.plot(b["k"], b["median"], color=colour, lw=1.4,
                label=f"{label + ': ' if label else ''}median of {reps} runs, middle half shaded")
    for j, zero in enumerate(zeros):  # every run starts at θ = 0: ψ at k = 0 is ψ(0)
        ax.axhline(zero, **ZERO_STYLE, label=ZERO_LABEL if j == 0 else None)
    ax.set_yscale("log")
    label_log(ax, "y")
    ax.set_xlabel("iteration k")
    ax.set_ylabel("ψ of the learner's model")
    ax.set_title(title, fontsize=10)
    legend_below(fig, ax, fontsize=8)
    return _save(fig, Path(path))


# --- sweeps ---------------------------------------------------------------------------------

def draw_sweep(sweep: pd.DataFrame, owners: pd.DataFrame, meta: dict, directory: Path) -> list[Path]:
    """Every sweep figure the swept keys allow, written into ``directory``; returns their paths."""
    directory, keys, paths = Path(directory), swept_keys(sweep), []
    if EPSILON_KEY in keys:
        paths.append(draw_scaling(sweep, meta, "epsilon_harmonic", EPSILON_KEY,
                                  "privacy budget ε (each owner's)", path=directory / "psi_epsilon.png"))
    if RECORDS_KEY in keys:
        paths.append(draw_scaling(sweep, meta, "records", RECORDS_KEY, "total records n",
                                  path=directory / "psi_records.png"))
    if EPSILON_KEY in keys and OWNERS_KEY in keys:
        paths.append(draw_collaboration(sweep, meta, directory / "collaboration.png"))
    if len(owners):
        paths.append(draw_owner_benefit(sweep, owners, meta, directory / "owner_benefit.png"))
    return paths


def _groups(sweep: pd.DataFrame, exclude: tuple[str, ...]) -> Iterator[tuple[str, pd.DataFrame]]:
    """The sweep split by the swept keys other than ``exclude``: (label, rows) pairs, each key named
    by its last part (``mechanism=laplace``), which is unique among a sweep's keys in practice."""
    others = [k for k in swept_keys(sweep) if k not in exclude]
    if not others:
        yield "", sweep
        return
    names = [k.split(".")[-1] for k in others]
    names = names if len(set(names)) == len(names) else others
    for values, rows in sweep.groupby(others, sort=False):
        values = values if isinstance(values, tuple) else (values,)
        yield ", ".join(f"{k}={_short(v)}" for k, v in zip(names, values, strict=True)), rows


def _title(meta: dict, what: str) -> str:
    name = meta.get("scenario") or meta.get("name") or "sweep"
    reps = meta.get("replications")
    return f"{name}: {what}" + (f"\n{reps} replications per point" if reps else "")


def draw_scaling(sweep: pd.DataFrame, meta: dict, x_column: str, key: str, xlabel: str,
                 *, path: Path) -> Path:
    """Mean ψ (markers, 25–75 % whiskers of ψ) against ``x_column``, log-log, per group of the
    other swept keys, with the fitted slope (dashed), the calibrated forecast (solid) and ψ of the
    untrained model θ = 0 (dotted red); the legend sits under the axes, never over the data."""
    fig = Figure(figsize=(6.4, 4.4))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.87)
    ax = fig.subplots()
    groups = list(_groups(sweep, (key,)))
    colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.85, len(groups)))
    for (label, rows), colour in zip(groups, colours, strict=True):
        rows = rows.sort_values(x_column)
        x, y = rows[x_column].to_numpy(float), rows["psi_mean"].to_numpy(float)
        fit = fit_loglog(x, y)
        ax.errorbar(x, y, yerr=_whiskers(rows), fmt="o", ms=4, color=colour, capsize=2,
                    label=f"{label + ': ' if label else ''}{fit.label()}")
        if np.isfinite(fit.slope):
            ax.plot(x, np.exp(fit.intercept) * x**fit.slope, "--", color=colour, lw=1)
        if "forecast" in rows and rows["forecast"].notna().any():
            ax.plot(x, rows["forecast"], "-", color=colour, lw=1, alpha=0.6)
    _draw_zero(ax, sweep, x_column, key)
    _log_axes(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean ψ of the final model")
    ax.set_title(_title(meta, f"ψ against {xlabel}") + "; " + _forecast_note(meta), fontsize=8)
    legend_below(fig, ax, fontsize=7)
    return _save(fig, Path(path))


def _draw_zero(ax, sweep: pd.DataFrame, x_column: str, key: str) -> None:
    """ψ(θ = 0): one dotted line when every cell's data are the same, else dotted through each group's
    cells (sweeping the records changes the data, hence ψ(0))."""
    if "psi_zero" not in sweep or not (sweep["psi_zero"] > 0).any():
        return
    zeros = sweep["psi_zero"].to_numpy(float)
    if np.allclose(zeros, zeros[0], rtol=1e-9):
        ax.axhline(zeros[0], **ZERO_STYLE, label=ZERO_LABEL)
        return
    for j, (_, rows) in enumerate(_groups(sweep, (key,))):
        rows = rows.sort_values(x_column)
        ax.plot(rows[x_column], rows["psi_zero"], **ZERO_STYLE, label=ZERO_LABEL if j == 0 else None)


def _whiskers(rows: pd.DataFrame) -> np.ndarray | None:
    """Asymmetric error bars from the mean down to q25 and up to q75 (clipped at zero length)."""
    if not {"psi_q25", "psi_q75"} <= set(rows.columns):
        return None
    mean = rows["psi_mean"].to_numpy(float)
    return np.vstack([np.clip(mean - rows["psi_q25"], 0, None), np.clip(rows["psi_q75"] - mean, 0, None)])


def _forecast_note(meta: dict) -> str:
    f = meta.get("forecast") or {}
    if not f:
        return "dashed: fit; no forecast"
    return (f"dashed: fit; solid: forecast c₁={f.get('c1', float('nan')):.3g}, "
            f"c₂={f.get('c2', float('nan')):.3g}, R²={f.get('r2', float('nan')):.3f}")


def collaboration_grid(sweep: pd.DataFrame) -> pd.DataFrame:
    """Owners N (rows) × ε (columns) of log10(E ψ / ψ(θ_1*)): negative where the first owner benefits.

    The axes are the grid values as swept (the computed ``epsilon_harmonic`` differs from them
    in the last bits from one N to the next, which would split a column). Cells repeated over
    other swept keys are averaged in log space.
    """
    ratio = np.log10(sweep["psi_mean"] / sweep["own_psi_first"])
    frame = pd.DataFrame({"N": sweep[OWNERS_KEY], "epsilon": sweep[EPSILON_KEY], "ratio": ratio})
    return frame.pivot_table(index="N", columns="epsilon", values="ratio", aggfunc="mean").sort_index()


def draw_collaboration(sweep: pd.DataFrame, meta: dict, path: Path) -> Path:
    """The value-of-collaboration map: where E ψ(θ_L,T) beats the first owner's ψ(θ_1*) (papers'
    Figure 7). Colour: log10 of the ratio; cells marked "benefit" where it is below 0."""
    grid = collaboration_grid(sweep)
    fig = Figure(figsize=(6.4, 4.6))
    fig.subplots_adjust(left=0.12, right=0.95, bottom=0.12, top=0.88)
    ax = fig.subplots()
    limit = max(float(np.nanmax(np.abs(grid.to_numpy()))), 1e-12)
    image = ax.imshow(grid.to_numpy(), origin="lower", aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit)
    for (r, c), value in np.ndenumerate(grid.to_numpy()):
        if np.isfinite(value):  # black on light cells, white on dark ones
            ax.text(c, r, "benefit" if value < 0 else f"{value:+.1f}", ha="center", va="center",
                    fontsize=7, fontweight="bold" if value < 0 else "normal",
                    color=text_colour(image.cmap(image.norm(value))))
    ax.set_xticks(range(grid.shape[1]), [f"{v:g}" for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index])
    ax.set_xlabel("privacy budget ε (each owner's)")
    ax.set_ylabel("number of owners N")
    fig.colorbar(image, ax=ax, label="log10(mean ψ shared / ψ of owner 1 alone)")
    ax.set_title(_title(meta, "value of collaboration for the first owner"), fontsize=9)
    return _save(fig, Path(path))


def draw_owner_benefit(sweep: pd.DataFrame, owners: pd.DataFrame, meta: dict, path: Path) -> Path:
    """Each owner's own-data ψ(θ_i*) (dots) and the collaborative median ψ of each cell (lines):
    owners above a cell's line benefit there (papers' Figure 11), and the figure names them.

    Dots stand at the owner's records, or, when every owner shown holds as many records (where
    records say nothing), at the owner's number. Cells that share their data give each owner one
    own-data ψ, so each owner is one dot; cells whose lines coincide (within COINCIDE) are one line
    naming them all. The legend sits under the axes; ψ(θ = 0) is the dotted red line."""
    cells = _benefit_cells(sweep)
    shown = owners[owners["cell"].isin(cells)]
    by_size = shown["records"].nunique() > 1
    fig = Figure(figsize=(6.4, 4.6))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.87)
    ax = fig.subplots()
    groups = _line_groups(sweep, shown, cells)
    colours = matplotlib.colormaps["viridis"](np.linspace(0, 0.85, len(groups)))
    for (psi_lo, psi_hi, members, benefit, count), colour in zip(groups, colours, strict=True):
        level = f"{psi_lo:.3g}" if psi_hi <= psi_lo * (1 + 1e-12) else f"{psi_lo:.3g}–{psi_hi:.3g}"
        label = f"{_cells_label(sweep, members)}: shared model ψ {level}, {benefit} of {count} benefit"
        ax.axhline(np.sqrt(psi_lo * psi_hi), color=colour, lw=1.2, label=label)
    _owner_dots(ax, shown, cells, colours_of(groups, colours), by_size)
    zeros = sweep.loc[sweep["cell"].isin(cells), "psi_zero"] if "psi_zero" in sweep else []
    for j, zero in enumerate(sorted({float(z) for z in zeros if z > 0})):
        ax.axhline(zero, **ZERO_STYLE, label=ZERO_LABEL if j == 0 else None)
    _owner_axis(ax, shown, by_size)
    ax.set_ylabel("ψ: own model (dots), shared model (lines)")
    ax.set_title(_title(meta, "which owners benefit (dots above a line; named)"), fontsize=9)
    legend_below(fig, ax, fontsize=7)
    names = [t for t in ax.texts if hasattr(t, "xyann")]
    separate_texts(fig, names)
    keep_texts_inside(fig, ax, list(ax.texts))
    return _save(fig, Path(path))


COINCIDE = 0.05  # cells whose shared ψ differ by less than this, relatively, are drawn as one line
MAX_NAMED = 12  # benefiting owners named beside their dots (the most benefiting first)


def _line_groups(sweep: pd.DataFrame, shown: pd.DataFrame, cells: list[int]) -> list[tuple]:
    """(lowest ψ, highest ψ, cells, "owners benefiting", owners) per line: the cells in order of ψ,
    a cell joining the previous line when its ψ is within COINCIDE of that line's lowest."""
    rows = []
    for cell in cells:
        part = shown[shown["cell"] == cell]
        if not part.empty:
            rows.append((float(part["psi_median"].iloc[0]), cell, int(part["benefits"].sum()), len(part)))
    groups: list[list] = []
    for psi, cell, benefit, count in sorted(rows):
        if groups and psi <= groups[-1][0] * (1 + COINCIDE):
            groups[-1][1] = psi
            groups[-1][2].append(cell)
            groups[-1][3].append(benefit)
        else:
            groups.append([psi, psi, [cell], [benefit], count])
    out = []
    for lo, hi, members, benefits, count in groups:
        told = f"{min(benefits)}" if min(benefits) == max(benefits) else f"{min(benefits)}–{max(benefits)}"
        out.append((lo, hi, sorted(members), told, count))
    return out


def colours_of(groups: list[tuple], colours) -> dict[int, object]:
    """Each cell's line colour."""
    return {cell: colour for g, colour in zip(groups, colours, strict=True) for cell in g[2]}


def _cells_label(sweep: pd.DataFrame, cells: list[int]) -> str:
    """``epsilon=10, 100, 1000`` for cells that differ in one key, else each cell's label."""
    keys = swept_keys(sweep)
    rows = sweep.set_index("cell").loc[cells]
    varying = [k for k in keys if rows[k].nunique() > 1]
    if len(cells) > 1 and len(varying) == 1:
        fixed = [f"{k.split('.')[-1]}={_short(rows[k].iloc[0])}" for k in keys if k not in varying]
        values = ", ".join(_short(v) for v in rows[varying[0]])
        return ", ".join([*fixed, f"{varying[0].split('.')[-1]}={values}"])
    return "; ".join(_cell_label(sweep, c) for c in cells)


def _owner_dots(ax, shown: pd.DataFrame, cells: list[int], colour_of: dict, by_size: bool) -> None:
    """One dot per owner when every cell gives it the same own-data ψ (the cells share their data),
    else one per owner and cell in the cell's colour; owners that benefit in some cell ringed and
    named (MAX_NAMED at most, the largest own ψ over shared ψ first)."""
    same = shown.groupby("owner")["own_psi"].nunique().max() <= 1 if len(shown) else True
    per_owner = shown.sort_values("cell").groupby("owner", sort=True)
    first = per_owner.first()
    benefit = per_owner["benefits"].any()
    margin = (shown.assign(m=shown["own_psi"] / shown["psi_median"]).groupby("owner")["m"].max())
    x_of = (lambda rows, j: rows["records"]) if by_size else \
        (lambda rows, j: rows["owner"] + 1 + (0.0 if same else 0.6 * ((j + 0.5) / len(cells) - 0.5)))
    if same:
        x = x_of(first.reset_index(), 0).to_numpy(float)
        gains = benefit.to_numpy()
        ax.scatter(x[~gains], first["own_psi"].to_numpy()[~gains], s=12, color="0.55", lw=0,
                   label="an owner's own-data model")
        ax.scatter(x[gains], first["own_psi"].to_numpy()[gains], s=22, color="tab:orange",
                   edgecolors="black", linewidths=0.6, zorder=3, label="an owner that benefits (named)")
    else:
        for j, cell in enumerate(cells):
            rows = shown[shown["cell"] == cell]
            ax.scatter(x_of(rows, j), rows["own_psi"], s=12, color=colour_of.get(cell, "0.5"), lw=0)
            gains = rows[rows["benefits"]]
            ax.scatter(x_of(gains, j), gains["own_psi"], s=22, facecolors="none", edgecolors="black",
                       linewidths=0.6, zorder=3, label="an owner that benefits (named)" if j == 0 else None)
    named = margin[benefit].sort_values(ascending=False).index[:MAX_NAMED]
    for owner in named:
        row = first.loc[owner]
        x = row["records"] if by_size else owner + 1
        ax.annotate(str(row["name"]), (x, row["own_psi"]), xytext=(4, 3), textcoords="offset points",
                    fontsize=6.5, ha="left", va="bottom", zorder=4)
    if int(benefit.sum()) > len(named):
        ax.text(0.99, 0.01, f"+{int(benefit.sum()) - len(named)} more benefit (sweep_owners.csv)",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=6.5)


def _owner_axis(ax, shown: pd.DataFrame, by_size: bool) -> None:
    """Log records on x, or owner numbers when every owner holds as many records; log ψ on y."""
    if by_size:
        _log_axes(ax)
        ax.set_xlabel("owner's records n_i")
        return
    ax.set_yscale("log")
    label_log(ax, "y")
    integer_ticks(ax.xaxis)
    ax.set_xlim(0.5, max(int(shown["owner"].max()) + 1.5, 1.5) if len(shown) else 1.5)
    records = int(shown["records"].iloc[0]) if len(shown) else 0
    ax.set_xlabel(f"owner (every owner holds {records:,} records)")


def _benefit_cells(sweep: pd.DataFrame) -> list[int]:
    """At most MAX_BENEFIT_CELLS cells, spread evenly over the sweep, first and last included."""
    cells = sweep["cell"].tolist()
    if len(cells) <= MAX_BENEFIT_CELLS:
        return cells
    picks = np.unique(np.linspace(0, len(cells) - 1, MAX_BENEFIT_CELLS).round().astype(int))
    return [cells[i] for i in picks]


def _cell_label(sweep: pd.DataFrame, cell: int) -> str:
    row = sweep[sweep["cell"] == cell].iloc[0]
    return ", ".join(f"{k.split('.')[-1]}={_short(row[k])}" for k in swept_keys(sweep)) or f"cell {cell}"


def _short(value) -> str:
    """A grid value as a user typed it: 2 rather than 2.0 (pandas widens mixed rows to float)."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float | np.floating) else str(value)


# --- an audit's ROC curves ------------------------------------------------------------------------

ROC_NAME = "audit_roc.png"
ROC_COLOURS = {"answers": "tab:blue", "model": "tab:orange"}


def draw_roc(data: dict, path: str | Path) -> None:
    """An audit's ROC curves against the region its claimed (ε, δ) allows (``audit_roc.png``, from
    :func:`dpmarket.output.results.roc_data`): each adversary's curve on the runs its error rates were
    counted on, log-log so that the low false-positive rates where ε shows are visible; the claimed
    frontier min(e^ε α + δ, 1 − e^−ε(1 − δ − α)), the most any test may reach; the point each bound
    was proved at, with its confidence box. ``data``: title, epsilon, delta, and per adversary
    (``curves``) its view, fpr, tpr, the proved point (fpr, tpr), the rates' upper bounds, ε lower."""
    fig = Figure(figsize=(6.0, 5.2))
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.11, top=0.9)
    ax = fig.subplots()
    floor = min([1e-4] + [1.0 / max(2, c["runs"]) for c in data["curves"]])
    grid = np.geomspace(floor / 2, 1.0, 400)
    bound = claimed_frontier(grid, data["epsilon"], data["delta"])
    ax.loglog(grid, bound, color="black", lw=1.4,
              label=f"claimed (ε = {data['epsilon']:g}, δ = {data['delta']:g}): the most any test may reach")
    ax.fill_between(grid, bound, 1.0, color="0.9", lw=0)
    ax.loglog(grid, grid, color="0.6", lw=0.8, ls=":", label="guessing")
    for c in data["curves"]:
        colour = ROC_COLOURS.get(c["view"], "tab:green")
        fpr, tpr = np.maximum(c["fpr"], floor / 2), np.maximum(c["tpr"], floor / 2)
        ax.step(fpr, tpr, where="post", color=colour, lw=1.2,
                label=f"adversary sees {c['view']}: ε ≥ {c['epsilon_lower']:.3g}")
        x, y = max(c["point"][0], floor / 2), max(c["point"][1], floor / 2)
        ax.plot([x], [y], "o", color=colour, ms=5)
        ax.plot([x, max(c["fpr_upper"], floor / 2)], [y, y], color=colour, lw=0.8)  # α up to ᾱ
        low = max(1.0 - c["fnr_upper"], floor / 2)
        ax.plot([x, x], [y, low], color=colour, lw=0.8)  # 1 − β down to 1 − β̄
    ax.set_xlim(floor / 2, 1.0)
    ax.set_ylim(floor / 2, 1.05)
    ax.set_xlabel("false-positive rate (world 0 said world 1)")
    ax.set_ylabel("true-positive rate")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(data["title"], fontsize=9)
    fig.savefig(path, format="png", dpi=100, metadata=_METADATA)
