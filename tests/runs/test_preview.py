"""The forecast preview (dpmarket/runs/preview.py): the forecast command prints ψ and each owner's verdict."""

from __future__ import annotations

from helpers import budgeted_market_toml

from dpmarket.cli import main

SCENARIO = budgeted_market_toml()


def test_forecast_command_prints_psi_and_each_owners_verdict(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    assert main(["forecast", str(path)]) == 0
    out = capsys.readouterr().out
    assert "predicted psi" in out and "explicit" in out
    assert sum(line.rstrip().endswith(("yes", "no", "(declines)")) for line in out.splitlines()) == 3
