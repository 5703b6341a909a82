"""Publishing an experiment (dpmarket/experiment/publish.py): tables, figures and report appear together or
not at all, and without plots the report says so."""

from __future__ import annotations

import json

import pytest
from helpers import plan, published, saved_replications, tiny

from dpmarket.cli import main
from dpmarket.experiment.study import Execution, run_sweep
from dpmarket.output.figures import sweep as sweep_plots


def test_an_interrupt_while_drawing_publishes_nothing_and_resume_redraws(tmp_path, monkeypatch):
    """Tables, figures and report appear together or not at all; tasks/ survives; a killed
    process's staging directory is cleared by the next run."""
    p = plan(grid=["privacy.epsilon=1,10"], replications=2, output={"plots": True})
    out, real = tmp_path / "out", sweep_plots.draw_sweep

    def interrupted(*args):
        real(*args)  # every figure drawn (into the staging directory) ...
        raise KeyboardInterrupt  # ... then Ctrl-C before the report

    monkeypatch.setattr(sweep_plots, "draw_sweep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(p, out, Execution("serial"))
    assert sorted(f.name for f in out.iterdir()) == ["experiment.json", "tasks"]
    assert len(saved_replications(out)) == 4
    monkeypatch.setattr(sweep_plots, "draw_sweep", real)
    assert run_sweep(p, out, Execution("serial"))["reused_replications"] == 4
    before = published(out)
    assert {"psi_epsilon.png", "owner_benefit.png", "report.html", "sweep.csv"} <= set(before)
    monkeypatch.setattr(sweep_plots, "draw_sweep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(p, out, Execution("serial"))
    assert published(out) == before and not list(out.glob(".*"))  # the earlier results stand
    monkeypatch.setattr(sweep_plots, "draw_sweep", real)
    (out / ".staging.killed.tmp").mkdir()
    (out / ".staging.killed.tmp" / "psi_epsilon.png").write_bytes(b"half")
    run_sweep(p, out, Execution("serial"))
    assert not list(out.glob(".*"))
    run_sweep(p, tmp_path / "clean", Execution("serial"))
    assert published(out) == published(tmp_path / "clean") == before


def test_without_plots_the_report_says_so_and_no_figure_is_drawn(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--replications", "2",
                 "--out", str(out), "--quiet", "--executor", "serial"]) == 0
    assert not list(out.glob("*.png")) and json.loads((out / "sweep.json").read_text())["figures"] == []
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "output.plots = false" in page and "base64," not in page
    assert "figures       none (output.plots = false); report.html" in capsys.readouterr().out
