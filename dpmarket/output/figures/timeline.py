"""The ``timeline`` command: a selection's table and picture (:mod:`dpmarket.output.figures.lanes`)."""

from __future__ import annotations

from pathlib import Path

from dpmarket.output.figures.lanes import draw_lanes
from dpmarket.system import files


def _atomic(path: Path, write) -> None:
    """Write ``path`` through a temporary sibling, so it is never seen half-written."""
    files.write_atomic(path, lambda temp: write(str(temp)))


def write(run_dir: str | Path, owners: str | None = None, t0: float | None = None,
          t1: float | None = None, form: str = "text", *, table: str | None = None) -> str:
    """The timeline command: summarise and draw a run's timeline; writes ``timeline-TAG.csv`` (the
    per-owner table) and ``timeline-TAG.png`` into the run directory (:func:`output_name`). ``form``
    ``csv`` or ``markdown`` prints the answers' tables (:func:`dpmarket.output.timeline.questions`;
    only ``table`` if given) instead of the text summary."""
    from dpmarket.output.timeline import (
        channel_table,
        format_tables,
        lanes_of,
        load_run,
        output_name,
        owner_table,
        questions,
        render_tables,
        select_owners,
        summary_of,
        window,
    )

    run = load_run(run_dir)
    start, stop = window(t0, t1, run.end)
    selected = select_owners(owners, list(run.owners["name"]))
    owner_rows = owner_table(run, selected, start, stop)
    name = output_name(owners, t0, t1)
    csv_path, png_path = run.path / f"{name}.csv", run.path / f"{name}.png"
    title = f"{run.path.name}: {len(selected)} owners, t in [{start:.4g}, {stop:.4g}]"
    data = lanes_of(run, selected, start, stop).data(title)
    with files.writing(png_path):
        _atomic(csv_path, lambda p: owner_rows.to_csv(p, index=False))
        _atomic(png_path, lambda p: draw_lanes(data, p))
    answers = questions(run, selected, start, stop)
    if form != "text":
        return render_tables({table: answers[table]} if table else answers, form)
    text = format_tables(owner_rows, channel_table(run, start, stop), start, stop, csv_path.name)
    text += "\n\n" + summary_of(answers, start, stop)
    text = f"{text}\nwritten to {png_path} and {csv_path.name}"
    if run.scenario.get("market", {}).get("mode") == "dynamic":  # a market in time
        text += "\n" + _market(run, name, start, stop)
    return text


def _market(run, name: str, start: float, stop: float) -> str:
    """Draw ``market_TAG.png`` (the run's market_timeline.png over the window) and say what it shows."""
    from dpmarket.output.figures import market_timeline
    from dpmarket.output.results import market_timeline_data

    data = market_timeline_data(run.path, run.path.name)
    path = run.path / f"market_{name}.png"
    with files.writing(path):
        _atomic(path, lambda p: market_timeline.draw(data, p, (start, stop)))
    inside = [i for i, t in enumerate(data["time"]) if t <= stop]
    last = inside[-1] if inside else 0
    return (f"market in time (to t = {stop:.4g}): price {data['price'][0]:.4g} -> {data['price'][last]:.4g}, "
            f"{data['participants'][last]} owners taking part, paid {data['spend'][last]:.4g}; "
            f"price, participants, spend and ψ against time drawn in {path.name}")
