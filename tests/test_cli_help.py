"""Command-line conventions: every command's --help describes its SCENARIO argument and gives
examples that parse and validate; ``market`` has --quiet and --workers (same bytes on any count)."""

from __future__ import annotations

import filecmp
import shlex

import pytest
from helpers import market_toml

from dpmarket.cli import EXAMPLES, _parser, main
from dpmarket.scenario.bundled import find
from dpmarket.scenario.loading import load

COMMANDS = ("run", "sweep", "validate", "explain", "timeline", "forecast", "market", "scenarios")
TAKES_SCENARIO = ("run", "sweep", "validate", "forecast", "market")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_describes_the_command_and_gives_examples(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "examples:\n  dpmarket " + command in out
    if command in TAKES_SCENARIO:
        words = " ".join(out.split())  # the help is wrapped to the terminal's width
        assert "SCENARIO a scenario file (TOML), or the name of a bundled example" in words


def example_lines() -> list[list[str]]:
    """Every example command of every --help, as arguments (the comment after it dropped)."""
    lines = []
    for text in EXAMPLES.values():
        for line in text.splitlines()[1:]:
            args = shlex.split(line.split("  ", 2)[1] if "  " in line.strip() else line)
            lines.append(args)
    return lines


@pytest.mark.parametrize("args", example_lines(), ids=" ".join)
def test_every_example_parses_and_its_scenario_validates(args):
    args = args[: args.index(">")] if ">" in args else args  # a shell redirection
    args = args[: args.index("&&")] if "&&" in args else args
    assert args[0] == "dpmarket"
    if args[1] == "COMMAND":
        return
    parsed = _parser().parse_args(args[1:])
    if parsed.command in TAKES_SCENARIO and parsed.scenario != "my.toml":
        load(find(parsed.scenario), parsed.overrides)  # raises on a bad name or override


MARKET_TOML = market_toml(offer_epsilon=2.0)


def test_market_workers_change_nothing_but_the_speed_and_quiet_is_quiet(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MARKET_TOML)
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        assert main(["market", str(path), "--policies", "posted_price,take_it_or_leave_it,auction",
                     "--replications", "3", "--out", str(out), "--workers", workers, "--quiet"]) == 0
        assert capsys.readouterr().err == ""
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir())
    _, mismatch, errors = filecmp.cmpfiles(outs[0], outs[1], names, shallow=False)
    assert mismatch == [] and errors == [] and "policies.csv" in names


def test_market_workers_must_be_positive(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MARKET_TOML)
    with pytest.raises(SystemExit) as done:
        main(["market", str(path), "--policies", "auction", "--workers", "0"])
    assert done.value.code == 2 and "--workers" in capsys.readouterr().err
