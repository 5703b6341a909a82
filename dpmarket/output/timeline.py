"""Inspecting a run's communication timeline: per-owner figures, channel load, questions, a trace.

Everything is computed from the run directory (``events.csv``, ``spans.csv``, ``owners.csv``,
``channels.csv``, ``scenario.toml``) with vectorised pandas, so a run of millions of events is
summarised in seconds. The picture (:mod:`dpmarket.output.figures.timeline`) is drawn from spans.csv
(:class:`dpmarket.output.views.Lanes`: one lane per owner up to ``views.MAX_LANES`` selected owners,
beyond that lanes of channels or owner groups counted per time bin, so 10,000 owners stay legible);
``--trace`` writes the Chrome trace (:mod:`dpmarket.output.trace`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from dpmarket.errors import TimelineError, one_line
from dpmarket.output import spans, trace, views
from dpmarket.schedule.events import COLUMNS as EVENT_COLUMNS
from dpmarket.schedule.events import MARKET_COLUMNS

T = TypeVar("T")

MAX_ROWS = 40
EVENT_TYPES = {"time": "float64", "kind": "category", "owner": "int64", "k": "float64",
               "epsilon_spent": "float64", "channel": "float64"}


@dataclass
class Run:
    """The tables of one run directory."""

    path: Path
    events: pd.DataFrame
    owners: pd.DataFrame
    channels: pd.DataFrame | None
    scenario: dict

    @property
    def end(self) -> float:
        return float(self.events["time"].max()) if len(self.events) else 0.0


def read_file(path: Path, reader: Callable[[Path], T]) -> T:
    """``reader(path)``, with a file it cannot parse refused in one line naming it: a run directory
    that is damaged, or was not written whole, ends the command, never in a traceback."""
    try:
        return reader(path)
    except FileNotFoundError:
        raise TimelineError(f"{path.parent}: not a run directory (no {path.name})") from None
    except (ValueError, KeyError, OSError) as exc:  # pandas', TOML's and JSON's errors are ValueErrors
        text = str(exc).strip().splitlines()
        reason = text[0] if text and not isinstance(exc, KeyError) else f"no column {exc}"
        raise TimelineError(one_line(f"{path}: cannot be read ({reason}): {spans.DAMAGED}")) from None


def _events(path: Path) -> pd.DataFrame:
    """events.csv, checked to be written whole and to hold events (:func:`check_events`)."""
    check_events(path.parent)
    return pd.read_csv(path, usecols=list(EVENT_TYPES), dtype=EVENT_TYPES)


def _toml(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _names(path: Path) -> list[str]:
    """The owners' names, from owners.csv (its ``name`` column)."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return [row["name"] for row in csv.DictReader(fh)]


def load_run(path: str | Path) -> Run:
    """Read the tables of a run directory; a clear error if it is not one, or a file is damaged."""
    path = Path(path)
    for name in ("events.csv", "owners.csv", "scenario.toml"):
        if not (path / name).is_file():
            raise TimelineError(f"{path}: not a run directory (no {name})")
    events = read_file(path / "events.csv", _events)
    channels = read_file(path / "channels.csv", pd.read_csv) if (path / "channels.csv").is_file() else None
    scenario = read_file(path / "scenario.toml", _toml)
    owners = read_file(path / "owners.csv", pd.read_csv)
    if "name" not in owners:
        raise TimelineError(f"{path / 'owners.csv'}: no column 'name': {spans.DAMAGED}")
    return Run(path, events, owners, channels, scenario)


def settings(path: Path) -> tuple[dict, dict, list[str]]:
    """A run directory's scenario.toml and summary.json as dicts, and its owners' names (owners.csv),
    read without events.csv (which may be large)."""
    for name in ("events.csv", "owners.csv", "scenario.toml"):
        if not (path / name).is_file():
            raise TimelineError(f"{path}: not a run directory (no {name})")
    summary = path / "summary.json"  # a hand-made directory may leave it out: the log's last time ends it
    return (read_file(path / "scenario.toml", _toml),
            read_file(summary, _json) if summary.is_file() else {},
            read_file(path / "owners.csv", _names))


def window(t0: float | None, t1: float | None, end: float) -> tuple[float, float]:
    """The window [--from, --to] (the run's start, 0, and its ``end`` for what is not given), checked:
    finite numbers (``--from nan`` and ``--to 1e309`` reached matplotlib's axis error), the second after
    the first, and room in floating point for an axis around them (``--from 1e307 --to 1.7e308`` was
    the same error); a refusal names only the options given."""
    for option, value in (("--from", t0), ("--to", t1)):
        if value is not None and not math.isfinite(value):
            raise TimelineError(f"{option} {value}: not a finite time")
    start, stop = (0.0 if t0 is None else t0), (end if t1 is None else t1)
    if stop <= start:
        raise TimelineError(f"{_given(t0, t1, end)}: the window is empty")
    width = stop - start
    if not (math.isfinite(width) and math.isfinite(stop + width) and math.isfinite(start - width)):
        raise TimelineError(f"{_given(t0, t1, end)}: too large for 64-bit floats (an axis needs the window's "
                            "width again beyond each end)")
    return start, stop


def _given(t0: float | None, t1: float | None, end: float) -> str:
    """The window's options as the user gave them, with what stands for the missing one."""
    if t0 is not None and t1 is not None:
        return f"--from {t0:g} --to {t1:g}"
    if t0 is not None:
        return f"--from {t0:g} (the run ends at t = {end:g})"
    return f"--to {t1:g} (from 0)" if t1 is not None else f"the run (from 0 to its end, t = {end:g})"


def last_time(events: Path) -> float:
    """The time of the log's last event (the log is in time order): the end of a run whose directory
    has no summary.json to say it (one made by hand), read from the file's last line."""
    with open(events, "rb") as fh:
        fh.seek(max(fh.seek(0, 2) - 4096, 0))
        lines = fh.read().splitlines()
    try:
        time = float(lines[-1].split(b",")[0])
    except (IndexError, ValueError):
        return 0.0
    return time if math.isfinite(time) else 0.0


def check_events(path: Path) -> None:
    """Refuse a run whose events.csv was not written whole (:func:`dpmarket.output.spans.check_written`)
    or holds no event: there is then no timeline, whatever the window (a header-only log said
    "--from 0 --to 0: the window is empty" though no window was given)."""
    events = path / "events.csv"
    spans.check_written(events, EVENT_COLUMNS, MARKET_COLUMNS)
    with open(events, "rb") as fh:
        fh.readline()
        if not fh.readline().strip():
            raise TimelineError(f"{events}: no events (only its header): nothing happened in the run, or it "
                                "was not written whole; there is no timeline to show")


def spans_of(path: Path) -> Path:
    """The run's spans.csv, paired from its events.csv first if the run was written without it."""
    from dpmarket.system import files

    target = path / "spans.csv"
    if not target.is_file():
        scenario, summary, names = settings(path)
        timing = spans.timing_of(scenario, summary)
        files.write_atomic(target, lambda temp: spans.write(path / "events.csv", temp, names, timing))
    return target


def write_trace(run_dir: str | Path, target: str | Path, owners: str | None = None, t0: float | None = None,
                t1: float | None = None) -> str:
    """``timeline --trace``: the run as a Chrome Trace Event Format file (:mod:`dpmarket.output.trace`);
    returns what was written, in a few lines."""
    from dpmarket.system import files

    path, target = Path(run_dir), Path(target)
    with files.writing(target):
        files.destination(target)  # a device, a FIFO or a directory is refused before any work
    scenario, summary, names = settings(path)
    check_events(path)
    timing = spans.timing_of(scenario, summary)
    start, stop = window(t0, t1, timing.end or last_time(path / "events.csv"))
    if max(abs(start), abs(stop)) > trace.MAX_TIME:
        raise TimelineError(f"{_given(t0, t1, timing.end)}: beyond t = ±{trace.MAX_TIME:.3g}, the times a "
                            "trace holds (whole nanoseconds in 64 bits)")
    chosen = select_owners(owners, names) if owners is not None else None
    metrics = read_file(path / "metrics.csv", pd.read_csv)
    if not {"time", "psi"} <= set(metrics):
        raise TimelineError(f"{path / 'metrics.csv'}: no columns time and psi: {spans.DAMAGED}")
    source = spans_of(path)
    other: dict = {}

    def write(temp: Path) -> None:
        other.update(trace.write_trace(path, temp, names, timing, source,
                                       metrics=(metrics["time"].tolist(), metrics["psi"].tolist()),
                                       chosen=chosen, t0=start, t1=stop, title=path.name))

    with files.writing(target):
        files.write_atomic(target, write)
    counts = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in other["counts"].items())
    return (f"trace written to {target} ({target.stat().st_size / 1e6:.1f} MB, {other['trace_events']:,} "
            f"events): {other['owners']}; detail {other['detail']}\n{counts}\n"
            f"open it at https://ui.perfetto.dev (Open trace file) or in chrome://tracing (Load)")


def lanes_of(run: Run, selected: np.ndarray, t0: float, t1: float) -> views.Lanes:
    """The timeline figure's data for ``selected`` owners over [t0, t1], gathered from spans.csv."""
    names = list(run.owners["name"])
    channels = run.owners["channel"] if "channel" in run.owners else pd.Series(0, index=run.owners.index)
    channel_of = channels.fillna(0).astype(int).tolist()
    events = run.events
    mine = events[events["owner"].isin(selected) & (events["time"] >= t0) & (events["time"] <= t1)]
    starts = "request" if (run.events["kind"] == "request").any() else "query"
    iterations = int(run.scenario.get("learner", {}).get("iterations", 0)) or int(run.events["k"].max() or 0)
    lanes = views.Lanes(names, channel_of, t0, t1, selected, exchanges=int((mine["kind"] == starts).sum()),
                        iterations=iterations)
    for block in spans.read(spans_of(run.path)):
        lanes.add(block)
    return lanes


QUESTIONS = ("shares", "channels", "gaps", "waits", "happened", "spans")
TOP = 10  # rows of the gaps table
WINDOW_ROWS = 100  # spans listed for a window (all are counted in "happened")


def questions(run: Run, selected: np.ndarray, t0: float, t1: float) -> dict[str, pd.DataFrame]:
    """The timeline's answers over [t0, t1], from spans.csv, as tables:

    - ``shares``: per owner, the share of the window online, in an exchange, and with a message of
      its colliding, and its exchanges by outcome;
    - ``channels``: per channel, its owners' mean shares online and in exchange, and the share of
      the window inside collision windows;
    - ``gaps``: the longest gaps between consecutive updates of the learner, with who was served
      before and after;
    - ``waits``: who waited longest: each owner's longest time without an applied exchange (the
      window's ends count as bounds), longest first;
    - ``happened`` and ``spans``: what happened in the window: spans per kind and outcome, and the
      first WINDOW_ROWS of them by start.
    """
    names = list(run.owners["name"])
    table = spans.read_all(spans_of(run.path))
    width = t1 - t0
    table = table[(table["end"] >= t0) & (table["start"] <= t1)]
    inside = (table["end"].clip(t0, t1) - table["start"].clip(t0, t1)).to_numpy()
    kind, outcome, owner = table["kind"].to_numpy(), table["outcome"].to_numpy(), table["owner"].to_numpy()
    n = len(names)

    def per_owner(mask: np.ndarray) -> np.ndarray:
        return np.bincount(owner[mask & (owner >= 0)], weights=inside[mask & (owner >= 0)], minlength=n)[:n]

    exchange = kind == spans.EXCHANGE
    shares = pd.DataFrame({
        "owner": np.arange(n), "name": names,
        "channel": run.owners.get("channel", 0),
        "online": 1 - per_owner(kind == spans.OUTAGE) / width, "in_exchange": per_owner(exchange) / width,
        "colliding": per_owner((kind == spans.TRANSMISSION) & (outcome == spans.LOST_COLLISION)) / width,
        **{spans.OUTCOMES[o]: np.bincount(owner[exchange & (outcome == o) & (owner >= 0)], minlength=n)[:n]
           for o in (spans.APPLIED, spans.LOST_COLLISION, spans.LOST_LOSS, spans.REFUSED, spans.DROPPED,
                     spans.UNFINISHED)}})
    chosen = shares.iloc[selected].reset_index(drop=True)
    windows = kind == spans.WINDOW
    channel = table["channel"].to_numpy()
    by_channel = chosen.groupby("channel").agg(owners=("owner", "size"), online=("online", "mean"),
                                               in_exchange=("in_exchange", "mean")).reset_index()
    by_channel["colliding"] = [inside[windows & (channel == c)].sum() / width for c in by_channel["channel"]]
    updates = table[exchange & (outcome == spans.APPLIED)].sort_values("end", kind="stable")
    return {"shares": chosen, "channels": by_channel, "gaps": _gaps(updates, names),
            "waits": _waits(updates, selected, names, t0, t1),
            **_happened(table, selected, names)}


def _gaps(updates: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """The TOP longest gaps between consecutive updates, longest first."""
    t, k, who = updates["end"].to_numpy(), updates["k"].to_numpy(), updates["owner"].to_numpy()
    if len(t) < 2:
        return pd.DataFrame(columns=["from", "to", "length", "k_before", "owner_before", "k_after",
                                     "owner_after"])
    lengths = np.diff(t)
    order = np.argsort(-lengths, kind="stable")[:TOP]
    return pd.DataFrame({"from": t[order], "to": t[order + 1], "length": lengths[order],
                         "k_before": k[order].astype(int), "owner_before": [names[i] for i in who[order]],
                         "k_after": k[order + 1].astype(int),
                         "owner_after": [names[i] for i in who[order + 1]]})


def _waits(updates: pd.DataFrame, selected: np.ndarray, names: list[str], t0: float,
           t1: float) -> pd.DataFrame:
    """Each selected owner's longest time without an applied exchange in [t0, t1], longest first."""
    rows = []
    served = updates.groupby("owner")["end"]
    groups = {o: g.to_numpy() for o, g in served}
    for i in selected.tolist():
        times = np.concatenate([[t0], groups.get(i, np.zeros(0)), [t1]])
        gaps = np.diff(times)
        at = int(np.argmax(gaps))
        rows.append({"owner": i, "name": names[i], "longest_wait": gaps[at], "from": times[at],
                     "to": times[at + 1], "updates": len(times) - 2})
    waits = pd.DataFrame(rows, columns=["owner", "name", "longest_wait", "from", "to", "updates"])
    waits = waits.sort_values(["longest_wait", "owner"], ascending=[False, True], kind="stable")
    return waits.reset_index(drop=True)


def _happened(table: pd.DataFrame, selected: np.ndarray, names: list[str]) -> dict[str, pd.DataFrame]:
    """Spans of the window per kind and outcome, and the first WINDOW_ROWS by start (the selected
    owners', and the channels' and market's)."""
    mine = table[table["owner"].isin(selected) | (table["owner"] < 0)]
    readable = mine.assign(kind=np.array(spans.KINDS, dtype=object)[mine["kind"]],
                           outcome=np.array(spans.OUTCOMES, dtype=object)[mine["outcome"]])
    counts = readable.groupby(["kind", "outcome"], sort=True).size().rename("spans").reset_index()
    first = readable.sort_values(["start", "end"], kind="stable").head(WINDOW_ROWS)
    listed = pd.DataFrame({"start": first["start"], "end": first["end"], "kind": first["kind"],
                           "name": [names[o] if o >= 0 else "" for o in first["owner"]],
                           "channel": first["channel"].where(first["channel"] >= 0),
                           "k": first["k"], "outcome": first["outcome"]}).reset_index(drop=True)
    return {"happened": counts, "spans": listed}


def summary_of(answers: dict[str, pd.DataFrame], t0: float, t1: float) -> str:
    """The answers in a few sentences (the text form; ``--format csv|markdown`` prints the tables)."""
    lines = [f"questions over [{t0:.6g}, {t1:.6g}] (all tables: --format csv or markdown)"]
    gaps, waits, shares = answers["gaps"], answers["waits"], answers["shares"]
    if len(gaps):
        g = gaps.iloc[0]
        lines.append(f"longest gap between updates: {g['length']:.4g}, from {g['from']:.6g} "
                     f"(k = {g['k_before']}, {g['owner_before']}) to {g['to']:.6g} "
                     f"(k = {g['k_after']}, {g['owner_after']})")
    if len(waits):
        w = waits.iloc[0]
        lines.append(f"waited longest: {w['name']}, {w['longest_wait']:.4g} without an update "
                     f"(from {w['from']:.6g} to {w['to']:.6g}; {w['updates']} updates in the window)")
    if len(shares):
        low, busy = shares.loc[shares["online"].idxmin()], shares.loc[shares["colliding"].idxmax()]
        lines.append(f"least online: {low['name']} ({low['online']:.1%}); most time colliding: "
                     f"{busy['name']} ({busy['colliding']:.2%}); "
                     f"mean share in exchange {shares['in_exchange'].mean():.2%}")
    return "\n".join(lines)


def render_tables(tables: dict[str, pd.DataFrame], form: str) -> str:
    """Tables as CSV (each after a ``# name`` line when there are several) or Markdown."""
    parts = []
    for name, frame in tables.items():
        if form == "csv":
            body = frame.to_csv(index=False, lineterminator="\n").rstrip("\n")
            parts.append(body if len(tables) == 1 else f"# {name}\n{body}")
        else:
            parts.append(f"### {name}\n\n{markdown(frame)}")
    return "\n\n".join(parts)


def markdown(frame: pd.DataFrame) -> str:
    """A Markdown table (numbers to 6 significant digits, '|' in text escaped)."""
    def cell(value) -> str:
        if isinstance(value, float | np.floating):
            return "" if value != value else f"{value:.6g}"
        return str(value).replace("|", "\\|")

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def select_owners(spec: str | None, names: list[str]) -> np.ndarray:
    """Owner indices from ``"0-9,crouse,12"`` (indices, names, inclusive ranges); all if None. Each
    index and range is checked against the run's owners before it is expanded, so a range is never
    longer than the run has owners (``0-1000000000`` on 3 owners built a list of 10^9 first)."""
    if spec is None:
        return np.arange(len(names))
    index, chosen = {name: i for i, name in enumerate(names)}, []
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise TimelineError(f"--owners {spec!r}: names no owner (indices, names or ranges such as 0-9)")
    for part in parts:
        if part in index:
            chosen.append(np.array([index[part]]))
        elif re.fullmatch(r"[0-9]+(-[0-9]+)?", part):  # ASCII digits only ('٣' or '²' are not)
            chosen.append(_range(part, len(names)))
        elif re.fullmatch(r"[0-9]+-|-[0-9]+", part):
            missing = "start" if part.startswith("-") else "end"
            raise TimelineError(f"--owners: {part!r} is a range without its {missing} (such as 0-9)")
        else:
            raise TimelineError(one_line(f"--owners: {part!r} is neither an owner name, an index nor a "
                                         "range (such as 0-9)"))
    return np.unique(np.concatenate(chosen))


def _range(part: str, owners: int) -> np.ndarray:
    """The indices of ``"lo-hi"`` or ``"i"``, checked against the run's ``owners`` before any is made."""
    lo, _, hi = part.partition("-")
    first, last = int(lo), int(hi or lo)
    if last < first:
        raise TimelineError(f"--owners: {part!r} is an empty range (from the smaller index: {hi}-{lo})")
    if last >= owners:
        what = f"index {first}" if first == last else f"range {part}"
        raise TimelineError(f"--owners: {what} is beyond the run's {owners} owners (0-{owners - 1})")
    return np.arange(first, last + 1)


def offline_intervals(events: pd.DataFrame, end: float) -> pd.DataFrame:
    """Per owner, the [start, stop) spans offline, from alternating dropout/reconnect events."""
    changes = events[events["kind"].isin(["dropout", "reconnect"])].sort_values(
        ["owner", "time"], kind="stable")
    stop = changes.groupby("owner")["time"].shift(-1).fillna(end)
    spans = changes.assign(stop=stop)
    spans = spans[spans["kind"] == "dropout"]
    return spans[["owner", "time", "stop"]].rename(columns={"time": "start"})


def downtime(events: pd.DataFrame, n_owners: int, t0: float, t1: float, end: float) -> np.ndarray:
    """Time each owner spent offline inside [t0, t1] (an outage running at t0 counts)."""
    spans = offline_intervals(events, end)
    inside = (spans["stop"].clip(upper=t1) - spans["start"].clip(lower=t0)).clip(lower=0)
    return np.bincount(spans["owner"], weights=inside, minlength=n_owners)[:n_owners]


def tick_kind(run: Run) -> str:
    """The event that marks an owner's clock tick. The ideal network logs no ``tick``: there every
    tick is an exchange, begun by the learner's ``query`` (a refusal included), so queries count
    (a network run, whose owners act only on ticks, always logs some)."""
    return "tick" if (run.events["kind"] == "tick").any() else "query"


def owner_table(run: Run, selected: np.ndarray, t0: float, t1: float) -> pd.DataFrame:
    """Ticks, exchanges, collisions, losses, downtime, share of exchanges and ε spent per owner."""
    n = len(run.owners)
    window = run.events[(run.events["time"] >= t0) & (run.events["time"] <= t1)]
    mine = window[window["owner"] >= 0]

    def count(kind: str) -> np.ndarray:
        return np.bincount(mine.loc[mine["kind"] == kind, "owner"], minlength=n)[:n]

    exchanges = count("update")
    spent = _epsilon_spent(run.events, n, t1)
    table = pd.DataFrame({
        "owner": np.arange(n), "name": run.owners["name"], "ticks": count(tick_kind(run)),
        "exchanges": exchanges, "collisions": count("collision"), "losses": count("loss"),
        "downtime": downtime(run.events, n, t0, t1, run.end),
        "share": exchanges / max(int(exchanges.sum()), 1), "epsilon_spent": spent,
        "epsilon": run.owners["epsilon"]})
    return table.iloc[selected].reset_index(drop=True)


def _epsilon_spent(events: pd.DataFrame, n: int, t1: float) -> np.ndarray:
    answered = events[events["kind"].isin(["response", "refusal"]) & (events["time"] <= t1)]
    last = answered.groupby("owner")["epsilon_spent"].last()
    spent = np.zeros(n)
    spent[last.index.to_numpy()] = last.to_numpy()
    return spent


def channel_table(run: Run, t0: float, t1: float) -> pd.DataFrame | None:
    """Channel load: exact for the whole run (channels.csv); an estimate inside a window."""
    if run.channels is None:
        return None
    table = run.channels.copy()
    if t0 > 0 or t1 < run.end:
        tau = float(run.scenario.get("network", {}).get("transmission_time", 0.0))
        sent = run.events[run.events["kind"].isin(["request", "response"])
                          & (run.events["time"] >= t0) & (run.events["time"] <= t1)]
        per = np.bincount(sent["channel"].fillna(0).astype(int), minlength=len(table))
        table["window_estimate"] = per[:len(table)] * tau / max(t1 - t0, 1e-300)
    return table


def format_tables(owners: pd.DataFrame, channels: pd.DataFrame | None, t0: float, t1: float,
                  csv_name: str = "the CSV") -> str:
    """The printed report: owners (busiest first, at most MAX_ROWS) and channels."""
    shown = owners.sort_values(["exchanges", "owner"], ascending=[False, True], kind="stable")
    lines = [f"owners in [{t0:.6g}, {t1:.6g}] ({len(owners)} selected)"]
    rest = shown.iloc[MAX_ROWS:]
    shown = shown.iloc[:MAX_ROWS]
    lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if len(rest):
        lines.append(f"... and {len(rest)} more owners: {int(rest['exchanges'].sum())} exchanges, "
                     f"{int(rest['collisions'].sum())} collisions, downtime {rest['downtime'].sum():.4g} "
                     f"(all rows in {csv_name})")
    if channels is not None:
        lines += ["", "channels (utilisation over the whole run"
                  + ("; window_estimate = transmissions in the window x transmission_time / window, "
                     "ignoring overlaps)" if "window_estimate" in channels else ")"),
                  channels.to_string(index=False, float_format=lambda v: f"{v:.4g}")]
    return "\n".join(lines)


def output_name(owners: str | None, t0: float | None, t1: float | None) -> str:
    """``timeline-TAG``, TAG naming the selection (``all``, ``owners-0-9,crouse``, ``from-1-to-5``…):
    the command never replaces the run's own ``timeline.png`` (which report.html shows), and
    different selections never replace each other. A tag that is long, or had characters a file
    name should not carry, is shortened and made unique by a hash of the selection."""
    parts = ([f"owners-{owners}"] if owners else []) + ([f"from-{t0:g}"] if t0 is not None else []) \
        + ([f"to-{t1:g}"] if t1 is not None else [])
    tag = "-".join(parts) or "all"
    safe = re.sub(r"[^A-Za-z0-9.,_-]+", "_", tag)
    if safe != tag or len(safe) > 60:
        safe = f"{safe[:48]}-{hashlib.sha256(tag.encode()).hexdigest()[:10]}"
    return f"timeline-{safe}"
