"""Fuzzing the notebook API's arguments: any Python value, for any argument of ``load``, ``run``,
``replicate``, ``sweep`` and ``market``, is either taken (and reaches the body as the type it
expects) or refused at the boundary by the project's error that is also the builtin a Python user
catches (``TypeError`` or ``ValueError``), naming the function and the argument in one line —
never a bare Python error from deep inside, never accepted silently as something else (issue 24).

The boundary is tested on the real check layer (:func:`dpmarket.api.checked`) wrapped around probes
with the API's own signatures, so that a value it lets through is not run; values reaching a real
call are then fuzzed end to end where that is cheap (``load``: the overrides and the seed through
the scenario's own validation), and sizes that cannot fit are refused before any work.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import tiny_toml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpmarket
from dpmarket import api
from dpmarket.errors import ArgumentError, ArgumentTypeError, ArgumentValueError, DPMarketError, ScenarioError
from dpmarket.scenario.schema import Scenario

FUNCTIONS = {f.__name__: f for f in (api.load, api.run, api.replicate, api.sweep, api.market, api.audit)}
# Any Python value a notebook might pass: scalars of every kind (bools, huge and negative integers,
# non-finite floats, numpy scalars), text and bytes, containers, paths, arbitrary objects.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-2, 3),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.binary(max_size=4),
    st.sampled_from([np.int64(3), np.float64(2.0), np.bool_(True), np.int8(-1), 10**9, 2**70, "2", "", " ",
                     "process", "serial", "posted_price", Path("."), object()]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner), st.dictionaries(st.text(max_size=6), inner, max_size=3),
    st.dictionaries(st.integers(), inner, max_size=2), st.frozensets(st.integers(), max_size=2)),
    max_leaves=6)
FUZZ = settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
EXPECTED = {  # the type a checked value reaches the body as
    "scenario": (str, os.PathLike, Scenario), "seed": int, "overrides": list, "out": Path,
    "replications": int, "workers": int, "events": bool, "progress": bool, "executor": str,
    "grid": list, "policies": str, "properties": bool, "oracle": bool, "owner": int, "runs": int,
    "view": str, "method": str, "confidence": float,
}


def probe(function):
    """``function``'s signature behind the real check layer, with a body that only returns what it got."""
    def body(*args, **kwargs):
        return signature.bind(*args, **kwargs).arguments

    signature = inspect.signature(function)
    body.__signature__, body.__name__ = signature, function.__name__
    return api.checked(body)


VALID = {"scenario": "tiny.toml", "replications": 2, "grid": {"privacy.epsilon": [1, 10]},
         "policies": ["posted_price"]}


def call_with(name: str, argument: str, value):
    """The probe of function ``name`` called with its required arguments valid and ``argument`` = value."""
    parameters = inspect.signature(FUNCTIONS[name]).parameters
    kwargs = {p: VALID[p] for p, spec in parameters.items() if spec.default is inspect.Parameter.empty}
    kwargs[argument] = value
    return probe(FUNCTIONS[name])(**kwargs)


def refused_properly(exc: BaseException, name: str, argument: str) -> None:
    """A refusal as the API promises it: ours, a TypeError or a ValueError, naming function and argument."""
    assert isinstance(exc, ArgumentError) and isinstance(exc, DPMarketError), repr(exc)
    assert isinstance(exc, ArgumentTypeError) == isinstance(exc, TypeError)
    assert isinstance(exc, ArgumentValueError) == isinstance(exc, ValueError)
    assert isinstance(exc, TypeError) != isinstance(exc, ValueError)
    text = str(exc)
    assert text.startswith(f"dpmarket.{name}(): {argument}") and "\n" not in text, text


ARGUMENTS = [(name, argument) for name, f in FUNCTIONS.items()
             for argument in inspect.signature(f).parameters]


@pytest.mark.parametrize("name, argument", ARGUMENTS, ids=[f"{n}-{a}" for n, a in ARGUMENTS])
@FUZZ
@given(value=VALUES)
def test_any_value_of_any_argument_is_taken_as_its_type_or_refused_naming_it(name, argument, value):
    default = inspect.signature(FUNCTIONS[name]).parameters[argument].default
    try:
        got = call_with(name, argument, value)
    except ArgumentError as exc:
        refused_properly(exc, name, argument)
        return
    taken = got[argument]
    if value is None and default is None:
        assert taken is None
        return
    assert isinstance(taken, EXPECTED[argument]), (value, taken)
    # an integer as given: never a bool, float or text
    if argument in ("seed", "replications", "workers", "owner", "runs"):
        assert not isinstance(value, bool) and isinstance(value, (int, np.integer)) and taken == value
        assert taken >= (0 if argument in ("seed", "owner") else 1)
    if argument in ("events", "progress", "properties", "oracle"):
        assert isinstance(value, (bool, np.bool_))


@pytest.mark.parametrize("name, argument, value, builtin", [
    ("run", "seed", "abc", TypeError), ("run", "seed", math.nan, TypeError), ("run", "seed", [1], TypeError),
    ("run", "seed", 1.7, TypeError), ("run", "seed", True, TypeError), ("run", "seed", -1, ValueError),
    ("run", "overrides", 42, TypeError), ("run", "overrides", b"privacy.epsilon=1", TypeError),
    ("run", "overrides", {"data.records": object()}, TypeError), ("run", "overrides", {3: 1}, TypeError),
    ("run", "scenario", None, TypeError), ("run", "scenario", 123, TypeError),
    ("run", "scenario", {}, TypeError),
    ("run", "scenario", "", ValueError), ("run", "out", 5, TypeError), ("run", "out", "", ValueError),
    ("run", "replications", 2.5, TypeError), ("run", "replications", "x", TypeError),
    ("run", "replications", True, TypeError), ("run", "replications", 0, ValueError),
    ("run", "workers", "2", TypeError), ("run", "workers", 2.5, TypeError), ("run", "workers", 0, ValueError),
    ("run", "executor", "threads", ValueError), ("run", "events", "no", TypeError),
    ("sweep", "grid", None, TypeError), ("sweep", "grid", 5, TypeError), ("sweep", "grid", {}, ValueError),
    ("sweep", "grid", [], ValueError), ("sweep", "grid", {"privacy.epsilon": []}, ValueError),
    ("sweep", "grid", {"privacy.epsilon": "1,10"}, TypeError),
    ("sweep", "grid", {"privacy.epsilon": range(10**9)}, ValueError),
    ("sweep", "grid", {"privacy.epsilon": range(1000), "data.owners": range(1, 1000)}, ValueError),
    ("market", "policies", [], ValueError), ("market", "policies", 7, TypeError),
    ("market", "workers", 0, ValueError),
])
def test_the_red_teams_cases_are_refused_as_the_builtin_a_user_catches(name, argument, value, builtin):
    """Issue 24's list: each was a bare TypeError, ValueError or UFuncTypeError from deep inside, a
    MemoryError, or accepted silently (seed = 1.7, True; replications = True; workers = 2.5; grid = {})."""
    with pytest.raises(builtin) as caught:
        call_with(name, argument, value)
    refused_properly(caught.value, name, argument)


# --- end to end: load, through the scenario's own validation --------------------------------------

@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("api") / "tiny.toml"
    path.write_text(tiny_toml())
    return path


KEYS = st.sampled_from(["privacy.epsilon", "data.owners", "data.records", "learner.iterations", "seed",
                        "network.mode", "model.loss", "output.plots", "nope", "data", "privacy.epsilon.x"])
OVERRIDES = st.one_of(VALUES, st.dictionaries(KEYS, VALUES, max_size=3),
                      st.lists(st.tuples(KEYS, st.text(max_size=6)).map("=".join), max_size=3))


@FUZZ
@given(seed=VALUES, overrides=OVERRIDES)
def test_load_gives_a_scenario_or_a_value_or_type_error_of_ours(tiny_file, seed, overrides):
    """Whatever the seed and overrides, load returns a Scenario, or raises one of the project's errors
    that is a TypeError or a ValueError (an argument's, or the scenario's naming the key)."""
    try:
        scenario = dpmarket.load(tiny_file, seed=seed, overrides=overrides)
    except DPMarketError as exc:
        assert isinstance(exc, (TypeError, ValueError)) and "\n" not in str(exc), repr(exc)
        if isinstance(exc, ArgumentError):
            assert exc.argument.split("[")[0] in ("seed", "overrides")
        else:
            assert isinstance(exc, ScenarioError)
        return
    assert isinstance(scenario, Scenario)
    if seed is not None:
        assert scenario.seed == seed


# --- sizes that cannot fit ------------------------------------------------------------------------

@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(replications=st.integers(1, 10**12), cells=st.sampled_from([1, 2, 7]))
def test_an_experiment_that_cannot_fit_is_refused_before_any_work_with_the_size_it_needs(
        tiny_file, monkeypatch, replications, cells):
    """With 1 GiB allowed (DPMARKET_MEMORY), replications × cells whose records need more are refused
    at once, naming ``replications`` and the size; what fits goes on to the plan (here stopped)."""
    from dpmarket.experiment import study

    monkeypatch.setenv("DPMARKET_MEMORY", "1G")
    monkeypatch.setattr(study, "make_plan", _stop)
    needed = replications * (study.SEED_BYTES + cells * (study.RECORD_BYTES + 3 * study.OWNER_BYTES))
    grid = {"privacy.epsilon": list(range(1, cells + 1))}
    start = time.process_time()
    with pytest.raises((ArgumentValueError, _StoppedError)) as caught:
        dpmarket.sweep(tiny_file, grid, replications, executor="serial")
    assert time.process_time() - start < 2.0
    if needed > 2**30:
        refused_properly(caught.value, "sweep", "replications")
        assert "would need at least" in str(caught.value)
        assert "DPMARKET_MEMORY allows 1 GiB" in str(caught.value)
    else:
        assert isinstance(caught.value, _StoppedError)


class _StoppedError(Exception):
    pass


def _stop(*args, **kwargs):
    raise _StoppedError


def test_a_billion_replications_are_refused_at_once_on_this_machine(tiny_file):
    start = time.process_time()
    with pytest.raises(ValueError, match=r"replications = 1000000000: .* would need at least .* of memory"):
        dpmarket.replicate(tiny_file, 10**9, executor="serial")
    assert time.process_time() - start < 2.0
