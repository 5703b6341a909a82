"""``report.html``: one self-contained page per run, sweep or comparison (issue 5, item 5).

A report is a list of blocks (headings, paragraphs, tables, figures) rendered to a single
HTML file a user opens in a browser with no network: CSS inline, figures embedded as base64
PNG. A run's report also holds an interactive timeline (:class:`Interactive`): a small canvas script
of dpmarket's own (``timeline.js``, about 10 kB, inlined), not Bokeh or Plotly, whose inlined
libraries would add 1 to 4 MB to every report and, for Bokeh, random ids that would break same
seed, same bytes. Every text and table cell is HTML-escaped, so names from scenario files
cannot inject markup. The file is written atomically (a temporary sibling renamed into place)
and contains no timestamp or wall time, so the same run gives the same bytes.

Tables are rendered here rather than with ``DataFrame.to_html``: importing pandas costs about
half a second, a third of a whole ``run``, and a hand-rolled renderer fixes the number format.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpmarket.system import files

if TYPE_CHECKING:
    import pandas as pd

    from dpmarket.runs.run import RunResult

REPORT_NAME = "report.html"

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 70em; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; border-bottom: 1px solid #ccc; padding-bottom: .2em; }
h2 { font-size: 1.2em; margin-top: 1.6em; }
div.scroll { overflow-x: auto; max-width: 100%; margin: .4em 0 1em; }
table { border-collapse: collapse; font-size: .85em; }
caption { text-align: left; font-weight: bold; padding: .3em 0; }
th, td { border: 1px solid #ddd; padding: .2em .5em; text-align: right; }
th { background: #f3f3f3; }
td.text { text-align: left; }
table.facts { font-size: 1em; }
table.facts th { text-align: left; font-weight: normal; }
table.facts td { text-align: left; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #555; }
p.note { color: #666; font-size: .9em; }
div.dpm-canvas { position: relative; overflow: hidden; }
div.dpm-tip { display: none; position: absolute; white-space: pre; background: #fff; border: 1px solid #999;
              padding: .3em .5em; font-size: .8em; pointer-events: none; }
span.dpm-key { display: inline-block; width: .9em; height: .9em; margin: 0 .2em 0 .6em;
               vertical-align: middle; }
div.dpm-controls select { vertical-align: top; min-width: 16em; }
""".strip()


@dataclass(frozen=True)
class Heading:
    """A section title."""

    text: str


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text (escaped; blank lines separate paragraphs)."""

    text: str


@dataclass(frozen=True)
class Table:
    """A table: a pandas DataFrame or a sequence of dicts sharing their keys (one per row)."""

    caption: str
    frame: pd.DataFrame | Sequence[Mapping[str, Any]]
    max_rows: int = 60


@dataclass(frozen=True)
class Figure:
    """A PNG figure embedded in the page as base64: a file's path, or the PNG's bytes (a figure
    drawn in memory, e.g. ``fig.savefig(buffer, format="png")``)."""

    caption: str
    path: Path | str | bytes


@dataclass(frozen=True)
class Facts:
    """A short two-column table of labelled values (a page's key figures), every row shown."""

    caption: str
    rows: Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Interactive:
    """The interactive timeline: ``data`` from :meth:`dpmarket.output.views.Interactive.data`."""

    data: dict


Block = Heading | Text | Table | Figure | Facts | Interactive

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_report(directory: Path, title: str, blocks: list[Block]) -> Path:
    """Render ``blocks`` into ``directory/report.html`` atomically (the one writer,
    :func:`dpmarket.system.files.write_atomic`); return its path."""
    page = render(title, blocks)
    target = Path(directory) / REPORT_NAME
    files.write_atomic(target, lambda temp: temp.write_text(page, encoding="utf-8", newline="\n"))
    return target


def render(title: str, blocks: Iterable[Block]) -> str:
    """The whole HTML page for ``blocks`` (pure: no file is written)."""
    body = "\n".join(_render_block(b) for b in blocks)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{_esc(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n<body>\n"
            f"<h1>{_esc(title)}</h1>\n{body}\n</body>\n</html>\n")


def _render_block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h2>{_esc(block.text)}</h2>"
    if isinstance(block, Text):
        return "\n".join(f"<p>{_esc(p.strip())}</p>" for p in block.text.split("\n\n") if p.strip())
    if isinstance(block, Table):
        return _render_table(block)
    if isinstance(block, Figure):
        return _render_figure(block)
    if isinstance(block, Facts):
        return _render_facts(block)
    if isinstance(block, Interactive):
        return _render_interactive(block)
    raise TypeError(f"not a report block: {block!r}")


def _render_table(table: Table) -> str:
    """An HTML table of at most ``max_rows`` rows, with a note saying how many were left out."""
    columns, rows = _columns_and_rows(table.frame)
    shown = rows[: table.max_rows]
    head = "".join(f"<th>{_esc(str(c))}</th>" for c in columns)
    # The box scrolls sideways, not the page: an 86-row, 25-column owners table stays inside it.
    lines = ['<div class="scroll"><table>', f"<caption>{_esc(table.caption)}</caption>", f"<tr>{head}</tr>"]
    lines += ["<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in shown]
    lines.append("</table></div>")
    if len(rows) > len(shown):
        lines.append(f'<p class="note">First {len(shown)} of {len(rows)} rows shown.</p>')
    return "\n".join(lines)


def _columns_and_rows(frame) -> tuple[list, list[tuple]]:
    """Column names and row tuples of a DataFrame or of a sequence of dicts."""
    if hasattr(frame, "itertuples"):
        return list(frame.columns), list(frame.itertuples(index=False, name=None))
    rows = list(frame)
    columns = list(rows[0]) if rows else []
    return columns, [tuple(r[c] for c in columns) for r in rows]


def _cell(value: Any) -> str:
    """A ``<td>``: numbers right-aligned in a fixed short format, text left-aligned and escaped."""
    text = format_value(value)
    numeric = isinstance(value, int | float) and not isinstance(value, bool) or _is_numpy_number(value)
    return f"<td>{_esc(text)}</td>" if numeric else f'<td class="text">{_esc(text)}</td>'


def _is_numpy_number(value: Any) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iuf"


def format_value(value: Any) -> str:
    """A short, deterministic text form: 6 significant digits for floats, lists abbreviated; a
    missing value (None, NaN: an empty CSV field, a statistic of one sample) is an empty cell."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, float) or (_is_numpy_number(value) and value.dtype.kind == "f"):
        v = float(value)
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(value, list | tuple):
        items = [format_value(v) for v in value[:8]]
        return "[" + ", ".join(items) + (", …" if len(value) > 8 else "") + "]"
    return str(value)


def _render_figure(figure: Figure) -> str:
    png = figure.path if isinstance(figure.path, bytes) else Path(figure.path).read_bytes()
    if not png.startswith(PNG_SIGNATURE):
        where = "the bytes given" if isinstance(figure.path, bytes) else str(figure.path)
        raise ValueError(f"figure {figure.caption!r}: {where} are not a PNG image")
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img alt="{_esc(figure.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_esc(figure.caption)}</figcaption></figure>")


def _render_facts(facts: Facts) -> str:
    rows = "".join(f'<tr><th scope="row">{_esc(k)}</th><td>{_esc(v)}</td></tr>' for k, v in facts.rows)
    caption = f"<caption>{_esc(facts.caption)}</caption>"
    return f'<div class="scroll"><table class="facts">{caption}{rows}</table></div>'


_LEGEND = (("applied", "#2ca02c"), ("lost to collision", "#d62728"), ("lost to loss", "#ff7f0e"),
           ("refused", "#9467bd"), ("dropped offline", "#8c564b"), ("offline", "#dddddd"),
           ("budget exhausted", "#f1e6f7"), ("collision window", "#d62728"))


def _render_interactive(block: Interactive) -> str:
    """The timeline's controls, canvas and data, and its script (inline: the page stays offline)."""
    script = (Path(__file__).with_name("timeline.js")).read_text(encoding="utf-8")
    # JSON inside <script>: no "<", ">" or "&" can end the element or open a comment
    data = json.dumps(block.data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    legend = " ".join(f'<span class="dpm-key" style="background:{c}"></span>{_esc(n)}' for n, c in _LEGEND)
    note = block.data.get("note")
    return "\n".join([
        '<div id="dpm-timeline" class="dpm-timeline">',
        '<div class="dpm-controls"><button type="button" class="dpm-in">zoom in</button> '
        '<button type="button" class="dpm-out">zoom out</button> '
        '<button type="button" class="dpm-reset">whole run</button> '
        '<label>owners (none chosen: all) <select multiple size="3"></select></label></div>',
        f'<p class="note">Wheel: zoom; drag: pan; double click: the whole run; hover: details. {legend}</p>',
        '<div class="dpm-canvas"><canvas></canvas><div class="dpm-tip"></div></div>',
        *([f'<p class="note">Shown: {_esc(note)}.</p>'] if note else []),
        "</div>",
        f'<script type="application/json" id="dpm-timeline-data">{data}</script>',
        f"<script>\n{script}</script>"])


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


# --- the report of a single run -------------------------------------------------------------

# Run figures, in the order shown, with their captions (drawn by dpmarket.output.figures.run / topology).
RUN_FIGURES = (
    ("psi.png", "ψ of the learner's model against the iteration k (log scale), with the median ψ of "
                "the owners' own-data models (dashed) and ψ of the untrained model θ = 0 (dotted); "
                "every ψ is an oracle measurement."),
    ("timeline.png", "The communication timeline: each owner's exchanges over simulated time coloured "
                     "by outcome (or counted per time bin for many owners), outages shaded, collisions "
                     "marked; below, the owner served at each update (the papers' Figures 4 and 9)."),
    ("market_timeline.png", "The market in time (market.mode = \"dynamic\"): the posted price, the owners "
                            "taking part, what the learner has paid so far and ψ of its model (log scale), "
                            "against simulated time; read from the market rows of events.csv."),
    ("topology.png", "The network: learner, channels and owners (dot area: records; colour: exchanges), "
                     "with each channel's utilisation and collisions."),
)


def run_report(result: RunResult, directory: Path, plots: bool | None = None,
               timeline: dict | None = None, oracle: bool = True) -> Path:
    """``report.html`` of one run: the headline, the figures already in ``directory``, the owners,
    then every value of summary.json, with a note naming its oracle measurements (none of which is
    shown with ``oracle=False``: ``run --no-oracle``).

    ``plots`` says whether figures were drawn (default: the scenario's ``output.plots``);
    ``timeline``, the interactive timeline's data (:class:`Interactive`), if it is to be shown.
    ``wall_seconds`` is left out so that the page, like every other file but
    ``summary.json``, is byte-identical for the same seed.
    """
    from dpmarket.output.summary import owner_rows, summary

    directory = Path(directory)
    facts = {k: v for k, v in summary(result, oracle).items() if k != "wall_seconds"}
    owners = owner_rows(result, oracle)
    budgets = sorted({o.epsilon for o in result.owners})
    caption = (f"owners.csv: {facts['owners_benefiting']} of {len(owners)} owners benefit (ψ of the "
               "collaborative model below their own-data ψ; oracle columns own_psi, benefits)" if oracle
               else f"owners.csv: {len(owners)} owners (no oracle column: --no-oracle)")
    blocks: list[Block] = [
        *diagnostic_blocks(facts.get("diagnostics", [])),
        Text(yardstick_text(facts) if oracle else "Written with --no-oracle: no oracle measurement (ψ, "
             "own-data ψ, who benefits, θ*) is in this directory."),
        Text(result.scenario.description or ""),
        Facts("Key figures", key_figures(facts, budgets)),
        Text(oracle_text(facts["oracle"])),
        Heading("Figures"),
        *run_figure_blocks(directory, result.scenario.output.plots if plots is None else plots),
        *([Heading("Timeline"), Interactive(timeline)] if timeline is not None else []),
        Heading("Owners"),
        Table(caption, owners, max_rows=100),
        Heading("Summary"),
        _facts_table("summary.json (wall time left out)", facts),
    ]
    return write_report(directory, f"dpmarket run: {result.scenario.name} (seed {result.scenario.seed})",
                        blocks)


def oracle_text(oracle: Mapping[str, Any]) -> str:
    """The report's note on oracle measurements: what they are and which figures of which file."""
    listed = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in oracle.items()
                       if name not in ("note", "written") and keys)
    if not oracle.get("written", True):
        return f"Oracle measurements: {oracle['note']} ({listed})."
    return (f"Oracle measurements ({oracle['note']}): {listed}. The ε of summary.json and owners.csv "
            "bounds what the protocol publishes (the answers, hence the model), not these.")


def key_figures(facts: Mapping[str, Any], budgets: Sequence[float]) -> list[tuple[str, str]]:
    """The run's headline as (label, value) rows: ψ against ψ(θ = 0), who benefits, ε spent against
    the budgets, iterations, and the network's and the market's figures when there are any
    (``facts``: summary.json; ``budgets``: the participants' distinct ε)."""
    eps = f"{budgets[0]:g}" if len(budgets) == 1 else f"{budgets[0]:g}…{budgets[-1]:g}"
    rows = [
        ("ψ final (the trained model; oracle)", f"{facts['psi_final']:.4g}"),
        ("ψ(θ = 0) (the untrained model, the yardstick; oracle)", f"{facts['psi_zero']:.4g}"),
        ("owners benefiting (oracle)",
         f"{facts['owners_benefiting']} of {facts['owners']} (collaborative ψ below their own-data ψ; "
         f"median own-data ψ {facts['own_psi_median']:.4g})"),
    ] if "psi_final" in facts else []
    rows += [
        ("ε spent", f"at most {facts['epsilon_spent_max']:.4g} by any owner (budgets ε = {eps})"),
        ("iterations", f"{facts['iterations']} of {facts['iterations_planned']} (stopped by "
                       f"{facts['stop_reason']}); {facts['queries']} queries, {facts['refusals']} refusals"),
        ("network", _network_figures(facts)),
    ]
    if "policy" in facts:
        simulated = f" against {facts['psi_simulated']:.4g} simulated" if "psi_simulated" in facts else ""
        rows.append(("market", f"{facts['policy']}: {facts['participants']} of {facts['owners']} owners "
                               f"take part; total payment {facts['total_payment']:.4g}; ψ forecast "
                               f"{facts['psi_forecast']:.4g}{simulated}"))
    return rows


def _network_figures(facts: Mapping[str, Any]) -> str:
    """Collisions, losses, dropouts (and idle slots, channel use) of a network run."""
    if facts["network_mode"] == "ideal":
        return "ideal: every clock tick is an instant, lossless exchange"
    use = ", ".join(f"{u:.1%}" for u in facts["channel_utilisation"][:8])
    more = " …" if len(facts["channel_utilisation"]) > 8 else ""
    return (f"{facts['network_mode']}: {facts['collisions']} collisions, {facts['losses']} losses, "
            f"{facts['dropouts']} dropouts, {facts['idle_slots']} idle slots; channel use {use}{more}")


def diagnostic_blocks(diagnostics: Sequence[Mapping[str, Any]]) -> list[Block]:
    """The page's first block: what makes this run's answer weak or misleading, one row each (nothing
    when the run found nothing to say)."""
    if not diagnostics:
        return []
    rows = [{"severity": d["severity"], "what is wrong, and what to change": d["message"], "code": d["code"],
             "figures": "oracle (the owners' records)" if d["oracle"] else "public"} for d in diagnostics]
    return [Table("Diagnostics: read these before the figures", rows, max_rows=len(rows))]


def yardstick_text(facts: Mapping[str, Any]) -> str:
    """The page's headline: final ψ against ψ of the untrained model θ = 0 and how many owners
    benefit, with the warning when training did not beat θ = 0 (``facts``: summary.json)."""
    from dpmarket.output.console import yardstick_warning

    text = (f"ψ final {facts['psi_final']:.4g} against {facts['psi_zero']:.4g} for the untrained "
            f"model θ = 0; {facts['owners_benefiting']} of {facts['owners']} owners benefit.")
    if "diagnostics" in facts:  # the diagnostics' table above says it, with what to change
        return text
    warning = yardstick_warning(facts["psi_final"], facts["psi_zero"], facts.get("policy"))
    return text if warning is None else f"{text}\n\nWarning: {warning}."


def run_figure_blocks(directory: Path, plots: bool) -> list[Block]:
    """Figure blocks for the run figures present in ``directory``, or a note when none were drawn."""
    if not plots:
        return [Text("No figures: output.plots = false in the scenario, so this report has "
                     "tables only. Run again with --set output.plots=true to draw them.")]
    return [Figure(caption, directory / name) for name, caption in RUN_FIGURES
            if (directory / name).exists()]


# --- the reports of sweeps and replicated runs ----------------------------------------------

def sweep_report(directory: Path, title: str, sweep: pd.DataFrame, owners: pd.DataFrame, meta: dict,
                 *, figures: list[Path], note: str = "") -> Path:
    """``report.html`` of a sweep: the forecast fit, the figures, sweep.csv, sweep_owners.csv, then
    sweep.json (as given, minus ``wall_seconds``); ``note`` says what else was left out.
    """
    fit = meta.get("forecast") or {}
    blocks: list[Block] = [
        *([Text(guarantees_text(meta["privacy"]))] if meta.get("privacy") else []),
        *([Text(oracle_text(meta["oracle"]))] if meta.get("oracle") else []),
        Text(_forecast_text(fit)),
        Heading("Figures"),
        *_figure_blocks(figures),
        Heading("Cells"),
        Table("sweep.csv: one row per cell", sweep, max_rows=200),
        Heading("Owners"),
        Table("sweep_owners.csv: own-data ψ of every owner against its cell's median ψ", owners,
              max_rows=200),
        Heading("Set-up"),
        _facts_table("sweep.json", {k: v for k, v in meta.items() if k != "wall_seconds"}),
        *([Text(note)] if note else []),
    ]
    return write_report(directory, title, blocks)


def replications_report(directory: Path, title: str, replications: pd.DataFrame,
                        figures: list[Path], summary: dict | None = None,
                        *, owners: pd.DataFrame | None = None, note: str = "") -> Path:
    """``report.html`` of ``run --replications``: ψ at the end, the band figure, replications.csv,
    owners.csv, then summary.json (minus ``wall_seconds``)."""
    psi = replications["psi_final"]
    facts = {k: v for k, v in (summary or {}).items() if k != "wall_seconds"}
    blocks: list[Block] = [
        Text(f"{len(replications)} replications; final ψ median {psi.median():.4g}, "
             f"25–75 % {psi.quantile(0.25):.4g}–{psi.quantile(0.75):.4g}, mean {psi.mean():.4g}."),
        *([Text(guarantees_text([facts]))] if "guarantee" in facts else []),
        *([Text(oracle_text(facts["oracle"]))] if "oracle" in facts else []),
        *_figure_blocks(figures),
        Heading("Replications"),
        Table("replications.csv: one row per replication", replications, max_rows=200),
        *([Heading("Owners"), Table("owners.csv: own-data ψ and the share of replications in which the "
                                    "owner benefits", owners, max_rows=100)] if owners is not None else []),
        *([Heading("Summary"), _facts_table("summary.json", facts)] if facts else []),
        *([Text(note)] if note else []),
    ]
    return write_report(directory, title, blocks)


def guarantees_text(guarantees: Sequence[Mapping[str, Any]]) -> str:
    """The privacy guarantee of a replicated run or a sweep (one sentence per distinct guarantee,
    naming its cells, when a sweep's grid varies the mechanism, the accountant or δ)."""
    def one(g: Mapping[str, Any]) -> str:
        return g["guarantee"] + (f", δ = {g['delta']:g}" if g["delta"] else "")

    if len(guarantees) == 1:
        return f"Privacy: {one(guarantees[0])}."
    return " ".join(f"Privacy of cells {', '.join(map(str, g['cells']))}: {one(g)}." for g in guarantees)


def _facts_table(caption: str, facts: Mapping[str, Any]) -> Table:
    """A JSON document as a table of every value: nested objects flattened to dotted keys
    (``forecast.c0``), values as the strict JSON file holds them (``null`` for a number that is
    not finite, ``true``/``false``), long lists abbreviated."""
    rows = [{"key": k, "value": v} for k, v in flatten(facts)]
    return Table(caption, rows, max_rows=len(rows))


def flatten(document: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, JSON text) for every leaf of ``document``; lists stay one value each."""
    rows: list[tuple[str, str]] = []
    for key, value in document.items():
        if isinstance(value, Mapping) and value:
            rows += flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", json_text(value)))
    return rows


def json_text(value: Any) -> str:
    """``value`` as strict JSON would show it, numbers to 6 significant digits, lists cut at 8."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if _is_numpy_number(value):
        value = value.item()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else "null"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        items = [json_text(v) for v in value[:8]]
        return "[" + ", ".join(items) + (", …" if len(value) > 8 else "") + "]"
    return str(value)


def _figure_blocks(figures: list[Path]) -> list[Block]:
    """One block per figure, or a note saying why there are none."""
    if not figures:
        return [Text("No figures: output.plots = false in the scenario, so this report has tables only.")]
    return [Figure(_caption(p), p) for p in figures]


def market_report(directory: Path, title: str, summary: dict, policies: Sequence[Mapping[str, Any]],
                  market: Sequence[Mapping[str, Any]], *, figures: list[Path],
                  owners_per_policy: int = 25, properties: dict | None = None) -> Path:
    """``report.html`` of a policy comparison: policies.csv, both figures, market.csv trimmed to the
    first ``owners_per_policy`` owners of every policy (the full table is in the file), summary.json;
    with ``properties`` (rows, owners, figures, method of ``market --properties``) a section of the
    property table, its figures and owner_properties.csv trimmed likewise."""
    shown = [r for r in market if r["owner"] < owners_per_policy]
    owners = len({r["owner"] for r in market})
    caption = ("market.csv: every owner under every policy" if len(shown) == len(market) else
               f"market.csv, first {owners_per_policy} of {owners} owners under each policy "
               f"(all {len(market)} rows are in market.csv)")
    blocks: list[Block] = [
        *([Text(guarantees_text([summary]))] if "guarantee" in summary else []),
        *([Text(oracle_text(summary["oracle"]))] if "oracle" in summary else []),
        Heading("Policies"),
        Table("policies.csv: one row per policy (learner_surplus is the forecast's, "
              "learner_surplus_simulated the simulated ψ's)", policies, max_rows=len(policies)),
        Heading("Figures"),
        *_figure_blocks(figures),
        Heading("Owners"),
        Table(caption, shown, max_rows=len(shown)),
        *(_property_blocks(properties, owners_per_policy) if properties else []),
        Heading("Summary"),
        _facts_table("summary.json", summary),
    ]
    return write_report(directory, title, blocks)


def _property_blocks(properties: dict, owners_per_policy: int) -> list[Block]:
    """The mechanism lab's section: definitions in one paragraph, the table, figures, owners."""
    owners = properties["owners"]
    shown = [r for r in owners if r["owner"] < owners_per_policy]
    return [
        Heading("Properties"),
        Text("Individual rationality: share of owners with negative realised utility (payment − cost + "
             "model gain at each replication's simulated ψ) and the worst utility, ± standard error over "
             "replications. Truthfulness: each owner's best gain from reporting its cost coefficient times "
             "¼ … 4, the others truthful (on the forecast). Welfare: value − costs, forecast and simulated, "
             "over the best any coalition and budgets reach under the forecast (" + properties["method"]
             + "). Fairness: Shapley values of the learner's value over each policy's participants at "
             "the ε they sold, and the correlation of payments with them. Replication: an owner's gain "
             "from splitting its records into k = 2, 4 fake owners. Definitions: "
             "docs/how-to/mechanism-lab.md."),
        Table("properties.csv: one row per policy", properties["rows"], max_rows=len(properties["rows"])),
        *_figure_blocks(properties["figures"]),
        Table(f"owner_properties.csv, owners below {owners_per_policy} under each policy "
              f"({len(owners)} rows in the file)", shown, max_rows=len(shown)),
    ]


# Captions of the experiment and market figures (output.sweep_plots, output.market_plots), by file name.
FIGURE_CAPTIONS = {
    "psi_epsilon.png": "Mean ψ of the final model against ε on log-log axes (whiskers: 25–75 %), with the "
                       "least-squares slope (dashed) and the calibrated forecast (solid).",
    "psi_records.png": "Mean ψ of the final model against the total records n on log-log axes, with "
                       "the fitted slope (dashed) and the forecast (solid).",
    "collaboration.png": "Value of collaboration: log10 of the shared model's mean ψ over the first "
                         "owner's own-data ψ, over (N, ε); 'benefit' where the shared model is better.",
    "owner_benefit.png": "Each owner's own-data ψ against its records (or its number, when all hold "
                         "as many); lines: the cell's median shared-model ψ. Owners above their line "
                         "benefit.",
    "convergence.png": "ψ of the learner's model against k: median over replications and the 25–75 % band.",
    "psi_band.png": "ψ of the learner's model against k: median over the replications (line) and the "
                    "25–75 % band.",
    "psi_payment.png": "Simulated ψ (filled: mean, bar: min–max over replications) and forecast ψ̂ "
                       "(hollow) against each policy's total payment; one marker shape per policy, "
                       "policies that paid the same side by side.",
    "epsilons.png": "The ε chosen by the participating owners under each policy.",
    "welfare_payment.png": "Welfare (learner's value − owners' costs; filled: simulated ± one standard "
                           "error, hollow: forecast) against each policy's total payment; dashed: the "
                           "best welfare under the forecast (dotted: the first best without a budget).",
    "payment_shapley.png": "Each participant's payment against its Shapley value of the learner's value "
                           "among the policy's participants; dashed: payment = Shapley value.",
    "misreport_gain.png": "Each owner's best gain from misreporting its cost coefficient (¼ … 4 times "
                          "the truth), per policy; white: no gain.",
}


def _caption(path: Path) -> str:
    return FIGURE_CAPTIONS.get(Path(path).name, Path(path).name)


def _forecast_text(fit: dict) -> str:
    if not fit:
        return "No forecast was calibrated."
    if "c1" not in fit:
        return f"The forecast was not fitted: {fit.get('error', 'no cells to fit')}."
    return (f"Forecast ψ̂ = c₁/n·sqrt(Σε_i⁻²) + c₂/n²·Σε_i⁻² fitted to the cells' mean ψ: "
            f"c₁ = {fit.get('c1', float('nan')):.4g}, c₂ = {fit.get('c2', float('nan')):.4g}, "
            f"R² of log ψ = {fit.get('r2', float('nan')):.4f}, RMS relative error "
            f"{fit.get('rms_relative_error', float('nan')):.3g} over {fit.get('points', 0)} cells.")
