"""Fuzzing the command line's overrides: any ``--set`` or ``--grid`` text gives either a valid
scenario (exit 0) or the one-line error (exit 2) — never a traceback, never two lines.

Keys mix the scenario's real names with arbitrary text, list indices in every script's digits
(``١``, ``²``, fullwidth ``０``) and numbers far beyond 64 bits; values mix arbitrary text with
TOML fragments (unbalanced quotes and brackets, inline tables, huge and non-finite numbers).
"""

from __future__ import annotations

import re
import tomllib

import pytest
from helpers import tiny_toml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dpmarket.cli import main
from dpmarket.experiment import command

NAMES = ["privacy", "epsilon", "split", "cap", "data", "owners", "records", "features", "learner",
         "iterations", "rho", "network", "mode", "channels", "availability", "model", "loss",
         "theta_max", "output", "plots", "market", "policy", "seed", "name", "path", "table"]
INDICES = ["0", "1", "2", "-1", "99999999999999999999999", "١", "²", "٣", "０", "1.5", " 1"]
FRAGMENTS = ['"x', "'", "[1,2", "]", "{a=1}", "{", '"a,b"', "1e999", "-1e999", "nan", "inf", "-0",
             "[[]]", '{distribution="pareto", alpha=1.5}', "[1, 2, 3]", "true", "0x1F", "1_000",
             str(10 ** 400), "-" + str(10 ** 30), "5e-324", "1e308", "ideal,request", "=", ",,"]

SEGMENT = st.one_of(st.sampled_from(NAMES), st.sampled_from(INDICES), st.text(max_size=6))
KEY = st.one_of(st.lists(SEGMENT, min_size=1, max_size=4).map(".".join), st.text(max_size=12))
VALUE = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=16), st.integers().map(str),
                  st.floats().map(repr), st.lists(st.sampled_from(FRAGMENTS), max_size=3).map(",".join))
# a whole "--set" text: key=value most of the time, anything at all sometimes
OVERRIDE = st.one_of(st.tuples(KEY, VALUE).map("=".join), st.text(max_size=24))
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "s.toml"
    path.write_text(tiny_toml() + '[[owners]]\nname = "a"\n[[owners]]\nname = "b"\n')
    return path


def outcome(capsys, argv: list[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of the CLI on ``argv``, run in this process."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_or_valid(code: int, out: str, err: str) -> None:
    event(f"exit {code}")  # --hypothesis-show-statistics: how many examples were valid
    assert "Traceback" not in out + err
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dpmarket: error: "), err
    else:  # a valid scenario: at most validate's pre-run diagnostics, one line each
        assert all(re.fullmatch(r"dpmarket: warning: .* \[[a-z_]+\]", line) for line in err.splitlines()), err


@FUZZ
@given(overrides=st.lists(OVERRIDE, min_size=1, max_size=3))
def test_any_set_is_a_valid_scenario_or_one_line(scenario, capsys, overrides):
    code, out, err = outcome(capsys, ["validate", str(scenario), *(f"--set={o}" for o in overrides)])
    assert_one_line_or_valid(code, out, err)
    if code == 0:
        tomllib.loads(out)  # the resolved scenario it printed is TOML


@FUZZ
@given(axes=st.lists(st.tuples(KEY, st.lists(VALUE, min_size=1, max_size=3).map(",".join)),
                     min_size=1, max_size=2))
def test_any_grid_is_valid_cells_or_one_line(scenario, capsys, tmp_path_factory, axes):
    """The whole ``sweep`` command up to the work (every cell resolved and validated), which is
    replaced by a stub: a valid grid reaches it, anything else is the one line."""
    reached = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(command, "run", lambda plan, out, how: reached.append(plan) or "")
        grid = [f"--grid={key}={values}" for key, values in axes]
        code, out, err = outcome(capsys, ["sweep", str(scenario), *grid, "--executor", "serial",
                                          "--out", str(tmp_path_factory.mktemp("o") / "out")])
    assert_one_line_or_valid(code, out, err)
    assert (code == 0) == bool(reached)
    if reached:
        assert all(cell.scenario.learner.iterations >= 1 for cell in reached[0].cells)
