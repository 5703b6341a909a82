"""The reproducibility contract: its comparison of printed figures, the machine summary.json records,
and the claim it rests on — that last-bit differences (what another CPU's sums give) stay within its
tolerance through a whole run and never change an event. Each check also fails on a wrong input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy
from helpers import MARKET, reproduces, tiny
from threadpoolctl import threadpool_info

from dpmarket.learning.objective import OwnerData
from dpmarket.output.results import run_and_write
from dpmarket.system import reproducibility
from dpmarket.system.reproducibility import (
    ABSOLUTE,
    RELATIVE,
    agree,
    difference,
    differences,
    event_differences,
    exceeds,
    reaches,
    within,
)


def test_integers_are_exact_and_floats_within_the_tolerance():
    assert agree("10", "10") and not agree("10", "11")  # counts: exact
    assert agree("0.014450297393719724", "0.014450297393719502")  # the case: 1.5e-14 relative
    assert not agree("0.014450297393719724", "0.014450298393719724")  # 7e-8 relative: beyond
    assert agree("1.14e-27", "3.04e-29")  # a figure at the rounding level of f/f* (absolute part)
    assert not agree("1.14e-11", "3.04e-12")  # above it


def test_a_printed_figure_may_round_either_way_by_one_unit_of_its_last_digit():
    assert agree("0.01235", "0.01234")  # 0.012345 ± last bits, printed with 4 digits
    assert not agree("0.01235", "0.01233")  # two units: a real change
    assert agree("1.234e-05", "1.235e-05") and not agree("1.234e-05", "1.236e-05")
    assert agree("132.5", "132.4") and not agree("132.5", "132.3")


def test_words_and_shapes_are_exact():
    assert differences("psi 0.5 of 3", "psi 0.5 of 3") == []
    assert differences("psi 0.5 (3 owners)", "psi 0.5 (4 owners)")  # an integer
    assert differences("8 of 86 owners benefit", "8 of 86 owner benefit")  # a word
    assert differences("a\nb", "a")  # a line
    assert differences("nan", "nan") == [] and differences("inf", "-inf")


def test_events_keep_their_schedule_exactly_and_their_figures_within_the_tolerance():
    head = "time,kind,owner,k,epsilon_spent,channel,detail,amount\n"
    here = head + "0.5,response,1,,0.22351795183180614,,,\n0.5,update,1,1,,,,\n"
    assert event_differences(here, here.replace("0.22351795183180614", "0.22351795183180798")) == []
    assert event_differences(here, here.replace("0.22351795183180614", "0.22351695183180614")) != []
    assert event_differences(here, here.replace("0.5,update", "0.5000000000000001,update")) != []  # a time
    assert event_differences(here, here.replace("update,1,1", "update,2,1")) != []  # an owner
    assert event_differences(here, here + "0.7,query,2,,,,,\n") != []  # a row


def test_within_is_relative_plus_absolute():
    assert within(1.0, 1.0 + 0.9 * RELATIVE) and not within(1.0, 1.0 + 2 * RELATIVE)
    assert within(0.0, 0.9 * ABSOLUTE) and not within(0.0, 2 * ABSOLUTE)
    assert within(float("nan"), float("nan")) and not within(float("nan"), 0.0)


def test_a_figure_on_a_threshold_is_on_it_on_every_machine():
    """A stability number a formula puts on 1.5 (auto_stability = 0.75) came out 1.5 on one kernel and
    1.5000000000000002 on another; the plain comparisons (wrong input) split them, these do not."""
    for number in (1.4999999999999998, 1.5, 1.5000000000000002):
        assert reaches(number, 1.5) and not exceeds(number, 1.5)
    assert (1.4999999999999998 >= 1.5) != (1.5 >= 1.5)
    assert not reaches(1.4999, 1.5) and exceeds(1.5001, 1.5)
    assert difference(297.97290000000004, 297.9729) == 0.0 == difference(297.9729, 297.97290000000004)
    assert difference(297.98, 297.9729) == pytest.approx(0.0071)


def test_summary_json_says_what_a_seed_reproduces_and_on_which_machine(tmp_path):
    run_and_write(tiny(), tmp_path / "run")
    statement = json.loads((tmp_path / "run" / "summary.json").read_text())["reproducibility"]
    machine = statement["machine"]
    assert machine["numpy"] == np.__version__ and machine["scipy"] == scipy.__version__
    for package in ("numpy", "scipy"):
        blas = next(m for m in threadpool_info() if f"{package}.libs" in m["filepath"])
        recorded = machine["blas" if package == "numpy" else "scipy_blas"]
        assert recorded == {"library": blas["internal_api"], "version": blas["version"],
                            "core_type": blas["architecture"]}
    assert f"{RELATIVE:g} relative" in statement["other_machines"]


# --- last-bit differences through a whole run ------------------------------------------------------

def nudged(relative: float):
    """``OwnerData.from_block`` with every feature and label moved by ``relative`` in a random
    direction (a fixed stream): with ``relative`` of one unit in the last place, what another CPU's
    sums make of the generated records (their correlated features are matrix products) and of every
    statistic after them."""
    original = OwnerData.from_block.__func__
    gen = np.random.default_rng(2024)

    def from_block(cls, block, intercept, keep_records):
        block = block.copy()
        rows = [*range(block.shape[0] - (2 if intercept else 1)), block.shape[0] - 1]  # not the ones
        block[rows] *= 1.0 + relative * gen.choice([-1.0, 1.0], size=(len(rows), block.shape[1]))
        return original(cls, block, intercept, keep_records)

    return classmethod(from_block)


ULP = np.finfo(float).eps
CASES = {
    "async, request network, clipping": {"network": {"mode": "request", "loss_probability": 0.05},
                                         "privacy": {"sensitivity": "clip", "clip": "auto"}},
    "logistic, a market": {"data": {"kind": "card_fraud"}, "model": {"loss": "logistic"}, "market": MARKET},
    "sync, Gaussian under RDP": {"learner": {"algorithm": "sync", "iterations": 20},
                                 "privacy": {"mechanism": "gaussian", "accountant": "rdp", "delta": 1e-6}},
}


@pytest.mark.parametrize("case", list(CASES))
def test_last_bit_differences_keep_the_events_and_stay_within_the_tolerance(tmp_path, monkeypatch, case):
    """Every record moved by one unit in the last place: events.csv byte for byte, every other file
    within the contract. The wrong input, records moved by 10⁻⁶ (far beyond last bits), is caught."""
    scenario = tiny(**CASES[case])
    run_and_write(scenario, tmp_path / "here")
    monkeypatch.setattr(OwnerData, "from_block", nudged(ULP))
    run_and_write(scenario, tmp_path / "there")
    here, there = tmp_path / "here", tmp_path / "there"
    assert (here / "events.csv").read_bytes() == (there / "events.csv").read_bytes()  # basic composition
    for name in ("metrics.csv", "owners.csv", "summary.json"):
        reproduces((there / name).read_text(), (here / name).read_text(), name)
    monkeypatch.setattr(OwnerData, "from_block", nudged(1e-6))
    run_and_write(scenario, tmp_path / "wrong")
    with pytest.raises(AssertionError, match="does not reproduce"):
        reproduces((tmp_path / "wrong" / "metrics.csv").read_text(), (here / "metrics.csv").read_text(), "m")


def test_the_contract_module_is_what_the_docs_state():
    """The page states the tolerance the code applies."""
    from helpers import ROOT

    page = (ROOT / "docs" / "reference" / "reproducibility.md").read_text(encoding="utf-8")
    assert f"{RELATIVE:g}" in page and f"{ABSOLUTE:g}" in page
    assert reproducibility.__doc__ and "RELATIVE" in reproducibility.__doc__
