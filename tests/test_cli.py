"""The command line: validate, run, one-line errors with exit 2, atomic run directories, determinism;
every command's --help describes its SCENARIO argument and gives examples that parse and validate;
``market`` has --quiet and --workers (same bytes on any count)."""

from __future__ import annotations

import filecmp
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import market_toml, tiny_toml

from dpmarket.cli import EXAMPLES, _parser, main
from dpmarket.scenario.bundled import find
from dpmarket.scenario.loading import load

NETWORK = """
[network]
mode = "request"
transmission_time = 0.01
latency = 0.001
loss_probability = 0.05
dropout = { mean_online = 5.0, mean_offline = 1.0 }
"""


def scenario(tmp_path: Path, plots: bool = False, extra: str = "", name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(tiny_toml(output={"plots": plots}) + extra)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpmarket", *args], capture_output=True, text=True,
                          timeout=120)


def test_validate_prints_the_resolved_scenario(tmp_path, capsys):
    assert main(["validate", str(scenario(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "[privacy]" in out and "epsilon = 1.0" in out and "seed = 5" in out


@pytest.mark.parametrize("content,override,expected", [
    (None, [], "no such file"),
    ("name = 'x'\n[data\n", [], "malformed TOML"),
    ("name = 'x'\n[data]\nowners = 3\nbogus = 1\n", [], "data.bogus"),
    ("name = 'x'\n[privacy]\nepsilon = -1.0\n", [], "privacy.epsilon = -1.0"),
    ("name = 'x'\n", ["--set", "learner.iterations=zero"], "learner.iterations = 'zero'"),
    ("name = 'x'\n", ["--set", "network.clock_rate=-2"], "network.clock_rate"),
    ("name = 'x'\n[learner]\nalgorithm = 'sync'\n", [], "learner.rho = 'auto'"),
    ("name = 'x'\n", ["--set", "privacy.sensitivity='clip'", "--set", "privacy.clip=0"], "privacy.clip = 0"),
    # derived quantities that would not be finite name the key that made them so
    ("name = 'x'\n[learner]\nrho = 3.0\n", ["--set", "model.theta_max=1e308"], "model.theta_max = 1e+308"),
    ("name = 'x'\n[learner]\nrho = 3.0\n", ["--set", "data.feature_bound=1e308"],
     "data.feature_bound = 1e+308"),
    ("name = 'x'\n[learner]\nrho = 3.0\n", ["--set", "privacy.epsilon=5e-324"], "privacy.epsilon = 5e-324"),
    ("name = 'x'\n[learner]\nrho = 3.0\n", ["--set", "learner.rho=1e308"], "learner.rho = 1e+308"),
    ("name = 'x'\n[learner]\nrho = 3.0\n", ["--set", "model.regularization=1e-320"],
     "model.regularization = 1e-320"),
    ("name = 'x'\n", ["--set", "model.regularization=1e-320"], "model.regularization = 1e-320"),
])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(tmp_path, content, override, expected):
    path = tmp_path / "bad.toml"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out" / "run"
    done = run_cli("run", str(path), "--out", str(out), *override)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpmarket: error:"), done.stderr
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    assert not out.exists() and not (out.parent.exists() and any(out.parent.iterdir()))


@pytest.mark.parametrize("override,expected", [
    ("data.feature_bound=1e100", "data.feature_bound = 1e+100: makes the sensitivity"),  # Ξ² overflows
    ("market.epsilon_max=1e300", "market.epsilon_max = 1e+300: lets a cost or payment reach inf"),
])
def test_a_market_whose_derived_quantities_overflow_is_one_line(tmp_path, override, expected):
    path = Path(__file__).resolve().parent.parent / "scenarios" / "banks_market.toml"
    out = tmp_path / "out" / "run"
    done = run_cli("run", str(path), "--out", str(out), "--set", override)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpmarket: error:"), done.stderr
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in done.stderr + done.stdout and "Warning" not in done.stderr
    assert not out.exists() and not (out.parent.exists() and any(out.parent.iterdir()))


def test_run_writes_the_contract_files(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(scenario(tmp_path, plots=True)), "--out", str(out), "--seed", "9"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"scenario.toml", "events.csv", "metrics.csv", "owners.csv", "summary.json", "psi.png",
            "timeline.png"} <= names
    summary = json.loads((out / "summary.json").read_text())
    for key in ("scenario", "seed", "owners", "records", "iterations", "psi_final", "collisions",
                "dropouts", "wall_seconds"):
        assert key in summary
    assert summary["seed"] == 9 and "seed = 9" in (out / "scenario.toml").read_text()
    header = (out / "events.csv").read_text().splitlines()[0].split(",")
    assert header[:4] == ["time", "kind", "owner", "k"]
    assert (out / "metrics.csv").read_text().splitlines()[-1].startswith("80,")
    owners = (out / "owners.csv").read_text().splitlines()[0].split(",")
    assert owners[:5] == ["owner", "name", "records", "epsilon", "queries"] and "epsilon_spent" in owners


def test_rerun_replaces_a_run_directory_but_not_a_foreign_one(tmp_path, capsys):
    out = tmp_path / "run"
    path = scenario(tmp_path)
    assert main(["run", str(path), "--out", str(out)]) == 0
    assert main(["run", str(path), "--out", str(out)]) == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert main(["run", str(path), "--out", str(foreign)]) == 2
    assert (foreign / "notes.txt").read_text() == "keep me" and len(list(foreign.iterdir())) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("extra", ["", NETWORK])
def test_same_seed_same_bytes(tmp_path, extra):
    """Every file identical byte for byte, except wall_seconds in summary.json (wall-clock time)."""
    path = scenario(tmp_path, plots=True, extra=extra)
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli("run", str(path), "--out", str(a)).returncode == 0
    assert run_cli("run", str(path), "--out", str(b)).returncode == 0
    fa, fb = _files(a), _files(b)
    assert fa.keys() == fb.keys()
    for name in fa:
        if name != "summary.json":
            assert fa[name] == fb[name], name
    sa, sb = (json.loads(f["summary.json"]) for f in (fa, fb))
    sa.pop("wall_seconds"), sb.pop("wall_seconds")
    assert sa == sb


def test_resolved_scenario_reproduces_the_run(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(scenario(tmp_path, extra=NETWORK)), "--out", str(a), "--seed", "4"]) == 0
    assert main(["run", str(a / "scenario.toml"), "--out", str(b)]) == 0
    assert (a / "events.csv").read_bytes() == (b / "events.csv").read_bytes()
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()


def test_another_seed_changes_the_run(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    path = scenario(tmp_path)
    assert main(["run", str(path), "--out", str(a), "--seed", "1"]) == 0
    assert main(["run", str(path), "--out", str(b), "--seed", "2"]) == 0
    assert (a / "events.csv").read_bytes() != (b / "events.csv").read_bytes()


def test_a_public_proxy_that_cannot_be_built_is_one_line_naming_the_hold_out(tmp_path):
    """learner.rho = "auto" on a table whose hold-out has fewer rows than features: exit 2, no run."""
    data = tmp_path / "t.csv"
    data.write_text("site,a,b,c,y\n" + "\n".join(f"{'AB'[i % 2]},{i % 7},{i % 5},{i % 3},{i % 4}"
                                                  for i in range(200)) + "\n")
    path = tmp_path / "t.toml"
    path.write_text(f"name = 't'\n[data]\nsource = 'table'\npath = '{data}'\n[data.table]\ntarget = 'y'\n"
                    "numeric = ['a', 'b', 'c']\npartition = 'site'\nholdout = 3\n[output]\nplots = false\n")
    out = tmp_path / "out"
    done = run_cli("run", str(path), "--out", str(out))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(path) in done.stderr and "data.table.holdout = 3" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_version_is_the_packages():
    from dpmarket import __version__

    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"dpmarket {__version__}"


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


ARGUMENT_ERRORS = [
    ([], "dpmarket: error: the following arguments are required: command (see `dpmarket --help`)"),
    (["run"], "dpmarket: error: run: the following arguments are required: SCENARIO "
              "(see `dpmarket run --help`)"),
    (["frobnicate"], "dpmarket: error: argument command: invalid choice: 'frobnicate' (choose from "),
    (["run", "x.toml", "--seed", "abc"], "dpmarket: error: run: argument --seed: invalid int value: 'abc' "
                                         "(see `dpmarket run --help`)"),
    (["market", "x.toml", "--policies", "a", "--workers", "0"],
     "dpmarket: error: market: argument --workers: must be >= 1, got 0 (see `dpmarket market --help`)"),
    (["timeline", "r", "--format", "pdf"],
     "dpmarket: error: timeline: argument --format: invalid choice: 'pdf'"),
    (["run", "x.toml", "--bogus"], "dpmarket: error: run: unrecognized arguments: --bogus "
                                   "(see `dpmarket run --help`)"),
    (["run", "x.toml", "--out"], "dpmarket: error: run: argument --out: expected one argument"),
]


@pytest.mark.parametrize("args,expected", ARGUMENT_ERRORS,
                         ids=[" ".join(args) or "(none)" for args, _ in ARGUMENT_ERRORS])
def test_an_argument_error_is_one_line_naming_the_command_and_its_help(args, expected, capsys):
    """argparse printed a usage block of up to five lines before its error line, and reported an
    unknown option of a command from the top level (``dpmarket --help``)."""
    with pytest.raises(SystemExit) as done:
        main(args)
    captured = capsys.readouterr()
    assert done.value.code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(expected), captured.err
    assert "usage:" not in captured.err and captured.err.rstrip().endswith("--help`)")
