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
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpmarket.errors import TimelineError
from dpmarket.output import spans, trace, views

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


def load_run(path: str | Path) -> Run:
    """Read the tables of a run directory; a clear error if it is not one."""
    path = Path(path)
    for name in ("events.csv", "owners.csv", "scenario.toml"):
        if not (path / name).is_file():
            raise TimelineError(f"{path}: not a run directory (no {name})")
    events = pd.read_csv(path / "events.csv", usecols=list(EVENT_TYPES), dtype=EVENT_TYPES)
    channels = pd.read_csv(path / "channels.csv") if (path / "channels.csv").is_file() else None
    scenario = tomllib.loads((path / "scenario.toml").read_text(encoding="utf-8"))
    return Run(path, events, pd.read_csv(path / "owners.csv"), channels, scenario)


def settings(path: Path) -> tuple[dict, dict, list[str]]:
    """A run directory's scenario.toml and summary.json as dicts, and its owners' names (owners.csv),
    read without events.csv (which may be large)."""
    import csv
    import json

    for name in ("events.csv", "owners.csv", "scenario.toml"):
        if not (path / name).is_file():
            raise TimelineError(f"{path}: not a run directory (no {name})")
    with open(path / "owners.csv", newline="", encoding="utf-8") as fh:
        names = [row["name"] for row in csv.DictReader(fh)]
    summary = path / "summary.json"  # a hand-made directory may leave it out: the log's last time ends it
    return (tomllib.loads((path / "scenario.toml").read_text(encoding="utf-8")),
            json.loads(summary.read_text(encoding="utf-8")) if summary.is_file() else {}, names)


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
    scenario, summary, names = settings(path)
    timing = spans.timing_of(scenario, summary)
    start, stop = (0.0 if t0 is None else t0), (timing.end if t1 is None else t1)
    if stop <= start:
        raise TimelineError(f"--from {start:g} --to {stop:g}: the window is empty")
    chosen = select_owners(owners, names) if owners else None
    metrics = pd.read_csv(path / "metrics.csv")
    source = spans_of(path)
    other: dict = {}

    def write(temp: Path) -> None:
        other.update(trace.write_trace(path, temp, names, timing, source,
                                       (metrics["time"].tolist(), metrics["psi"].tolist()),
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


def select_owners(spec: str | None, names: list[str]) -> np.ndarray:
    """Owner indices from ``"0-9,crouse,12"`` (indices, names, inclusive ranges); all if None."""
    if not spec:
        return np.arange(len(names))
    index, chosen = {name: i for i, name in enumerate(names)}, []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part in index:
            chosen.append(index[part])
        elif re.fullmatch(r"[0-9]+(-[0-9]*)?", part):  # ASCII digits only ('٣' or '²' are not)
            lo, _, hi = part.partition("-")
            chosen.extend(range(int(lo), int(hi or lo) + 1))
        else:
            raise TimelineError(f"--owners: {part!r} is neither an owner name, an index nor a range")
    bad = [i for i in chosen if not 0 <= i < len(names)]
    if bad:
        raise TimelineError(f"--owners: index {bad[0]} out of range (the run has {len(names)} owners)")
    return np.unique(chosen)


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
