"""report.html: one self-contained, escaped, atomically written, deterministic page."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import tiny

from dpmarket.output import report
from dpmarket.output.report import Figure, Heading, Table, Text, render, run_report, write_report
from dpmarket.output.results import run_and_write

# One real PNG (1x1, black) so figures can be embedded without drawing anything.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQ"
                       "AAAABJRU5ErkJggg==")


def _png(tmp_path: Path, name: str = "f.png") -> Path:
    path = tmp_path / name
    path.write_bytes(PNG)
    return path


def _external_references(page: str) -> list[str]:
    """Anything a browser would fetch: URLs, src/href not pointing at embedded data, scripts from
    elsewhere (the interactive timeline's own script is inline)."""
    found = re.findall(r"(?:https?:|ftp:)//", page)
    found += [m for m in re.findall(r'(?:src|href)="([^"]*)"', page) if not m.startswith("data:")]
    found += re.findall(r"<script[^>]*\bsrc\b|<link|@import|url\(|import\(|fetch\(|XMLHttpRequest", page,
                        flags=re.IGNORECASE)
    return found


def test_page_is_self_contained_with_figures_embedded(tmp_path):
    a, b = _png(tmp_path, "a.png"), _png(tmp_path, "b.png")
    page = render("t", [Heading("h"), Figure("first", a), Text("x"), Figure("second", b)])
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 2 and all(base64.b64decode(i) == PNG for i in images)
    assert _external_references(page) == []
    assert "<style>" in page and page.startswith("<!DOCTYPE html>")


def test_the_self_containment_check_rejects_an_external_reference():
    """The detector above is not vacuous: a page with a remote image or a script fails it."""
    assert _external_references('<img src="https://example.org/x.png">')
    assert _external_references('<script src="lib.js"></script>')
    assert _external_references('<script>fetch("x.json")</script>')
    assert _external_references('<img src="psi.png">')


def test_text_and_tables_are_escaped():
    evil = '<script>alert("x")</script> & <b>'
    frame = pd.DataFrame({"name <i>": [evil], "psi": [0.123456789]})
    page = render(evil, [Heading(evil), Text(evil), Table(evil, frame),
                         Table("dicts", [{"owner": evil, "ok": True}])])
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;"
    assert page.count(escaped) == 7  # title, h1, h2, p, caption, two cells
    assert "<td>0.123457</td>" in page  # numbers: 6 significant digits, right-aligned cells


def test_long_tables_are_cut_with_a_note():
    page = render("t", [Table("c", [{"i": i} for i in range(30)], max_rows=10)])
    assert page.count("<tr>") == 11 and "First 10 of 30 rows shown." in page
    assert "rows shown" not in render("t", [Table("c", [{"i": i} for i in range(10)], max_rows=10)])


def test_write_is_atomic(tmp_path):
    """A failing render (missing figure) leaves the previous report untouched and no temp file."""
    good = write_report(tmp_path, "first", [Text("kept")])
    before = good.read_bytes()
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path, "second", [Text("new"), Figure("gone", tmp_path / "missing.png")])
    assert good.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def _run(tmp_path: Path, name: str, plots: bool) -> Path:
    out = tmp_path / name
    run_and_write(tiny(output={"metric_points": 10, "plots": plots}), out)
    return out


def test_every_run_writes_a_report_with_its_figures(tmp_path):
    out = _run(tmp_path, "run", plots=True)
    page = (out / "report.html").read_text(encoding="utf-8")
    images = [base64.b64decode(i) for i in re.findall(r"base64,([A-Za-z0-9+/=]+)", page)]
    assert images == [(out / "psi.png").read_bytes(), (out / "timeline.png").read_bytes()]
    assert _external_references(page) == []
    assert "psi_final" in page and "wall_seconds" not in page
    names = [line.split(",")[1] for line in (out / "owners.csv").read_text().splitlines()[1:]]
    assert len(names) == 3 and all(f'<td class="text">{n}</td>' in page for n in names)


def test_run_without_plots_says_tables_only(tmp_path):
    out = _run(tmp_path, "run", plots=False)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "base64" not in page and "output.plots = false" in page and "psi_final" in page


def test_report_is_deterministic(tmp_path):
    """Same seed, same bytes (the run's wall time is not in the page)."""
    a, b = _run(tmp_path, "a", plots=True), _run(tmp_path, "b", plots=True)
    assert (a / "report.html").read_bytes() == (b / "report.html").read_bytes()
    other = tmp_path / "c"
    run_and_write(tiny(seed=4, output={"metric_points": 10, "plots": True}), other)
    assert (other / "report.html").read_bytes() != (a / "report.html").read_bytes()


def test_run_report_can_be_redone_from_python(tmp_path):
    """run_report is usable alone: it rewrites the page in place from a result."""
    out = tmp_path / "run"
    result = run_and_write(tiny(), out)
    before = (out / "report.html").read_bytes()
    assert run_report(result, out).read_bytes() == before


def test_sweep_and_replication_reports_embed_their_figures(tmp_path):
    """The sweep page shows the fit, every figure given and both tables, escaped, self-contained."""
    from dpmarket.output.report import replications_report, sweep_report

    png = _png(tmp_path, "psi_epsilon.png")
    sweep = pd.DataFrame({"cell": [0, 1], "privacy.epsilon": [1.0, 10.0], "replications": [5, 5],
                          "psi_mean": [0.5, 0.005]})
    owners = pd.DataFrame({"cell": [0, 1], "owner": [0, 0], "name": ["<b>bank</b>", "<b>bank</b>"]})
    meta = {"grid": {"privacy.epsilon": [1.0, 10.0]}, "replications": 5, "wall_seconds": 3.2,
            "forecast": {"c1": 0.0, "c2": 2.1e9, "r2": 0.98, "rms_relative_error": 0.1, "points": 2}}
    page = sweep_report(tmp_path, "sweep", sweep, owners, meta, figures=[png]).read_text(encoding="utf-8")
    assert page.count("base64,") == 1 and _external_references(page) == []
    assert "c₂ = 2.1e+09" in page and "&lt;b&gt;bank&lt;/b&gt;" in page and "<b>" not in page
    assert "wall_seconds" not in page  # a re-run gives the same page
    reps = pd.DataFrame({"replication": [0, 1, 2], "psi_final": [0.1, 0.2, 0.4]})
    page = replications_report(tmp_path, "reps", reps, [png]).read_text(encoding="utf-8")
    assert "median 0.2" in page and page.count("base64,") == 1


def test_market_report_trims_the_owner_table_per_policy(tmp_path):
    """Every policy keeps its first owners in the page; the caption says how many were left out."""
    from dpmarket.output.report import market_report

    market = [{"policy": pol, "owner": i, "name": f"o{i}", "epsilon": 1.0}
              for pol in ("posted_price", "auction") for i in range(40)]
    policies = [{"policy": "posted_price", "psi_mean": 0.1}, {"policy": "auction", "psi_mean": 0.2}]
    png = _png(tmp_path, "psi_payment.png")
    page = market_report(tmp_path, "m", {"scenario": "m", "seeds": list(range(20))}, policies, market,
                         figures=[png], owners_per_policy=25).read_text(encoding="utf-8")
    assert "first 25 of 40 owners under each policy (all 80 rows are in market.csv)" in page
    assert page.count('<td class="text">o24</td>') == 2 and "o25<" not in page
    assert page.count("base64,") == 1 and _external_references(page) == []


def test_run_report_leads_with_the_key_figures_then_the_figures(tmp_path):
    """Headline (ψ, ψ(0), owners benefiting, ε spent, network figures) first, figures next, the
    owners table and summary.json after them; every table scrolls inside its own box."""
    out = tmp_path / "run"
    run_and_write(tiny(network={"mode": "request", "dropout": {"mean_online": 5.0, "mean_offline": 1.0}},
                       output={"metric_points": 10, "plots": True}), out)
    page = (out / "report.html").read_text(encoding="utf-8")
    info = json.loads((out / "summary.json").read_text())
    order = [page.index(s) for s in ("Key figures", "<figure>", "<h2>Owners</h2>", "<h2>Summary</h2>")]
    assert order == sorted(order)
    key = page[order[0]:order[1]]
    for needle in (f"{info['psi_final']:.4g}", f"{info['psi_zero']:.4g}",
                   f"{info['owners_benefiting']} of 3", f"at most {info['epsilon_spent_max']:.4g}",
                   f"{info['collisions']} collisions, {info['losses']} losses, {info['dropouts']} dropouts"):
        assert needle in key, needle
    assert "overflow-x: auto" in page
    assert page.count("<table") == page.count('<div class="scroll"><table')


def test_summary_table_shows_strict_json_values():
    """Nested objects become dotted keys; a NaN is null as in the file, never Python's nan or a dict."""
    facts = {"psi": 0.5, "forecast": {"form": "law", "r2": float("nan"), "by_size": []},
             "ok": True, "none": None, "theta": [1.0, float("inf")]}
    page = render("t", [report._facts_table("summary.json", facts)])
    for key, value in (("forecast.form", "law"), ("forecast.r2", "null"), ("forecast.by_size", "[]"),
                       ("ok", "true"), ("none", "null"), ("theta", "[1, null]")):
        assert f'<td class="text">{key}</td><td class="text">{value}</td>' in page
    assert "nan" not in page and "{" not in page.split("</style>")[1]


def test_figures_accept_png_bytes_and_refuse_anything_else(tmp_path):
    page = render("t", [Figure("drawn in memory", PNG)])
    assert base64.b64encode(PNG).decode() in page
    with pytest.raises(ValueError, match="'not a png': the bytes given are not a PNG image"):
        render("t", [Figure("not a png", b"GIF89a...")])
    text = tmp_path / "x.png"
    text.write_text("hello")
    with pytest.raises(ValueError, match="x.png are not a PNG image"):
        render("t", [Figure("text file", text)])


def test_missing_values_are_empty_cells():
    page = render("t", [Table("c", [{"psi_sd": float("nan"), "psi": 0.25}])])
    assert "<td></td><td>0.25</td>" in page and "nan" not in page
