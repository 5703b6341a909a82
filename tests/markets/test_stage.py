"""The market stage decides from public information only (issue 28, F1): two tables with the same
hold-out and sizes that differ only in one owner's private rows give the same published outcome.

Owners value the shared model (``market.model_value``): each weighs its own-data ψ against the
forecast. Decided on ψ(θ_i*) of its private records (the old behaviour, a wrong input here) the outcome
told the two tables apart — owner A's rows replaced by labels of pure noise made everyone join and be
paid — which publishes a function of the records outside any ε. Decided on the public proxy's
estimate (the hold-out split into owners of the same sizes), or on a value the owner declares, it
cannot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpmarket.data.problem import prepare
from dpmarket.errors import ScenarioError
from dpmarket.markets.sellers import build_sellers
from dpmarket.runs import pilots
from dpmarket.scenario.loading import load

SITES, HOLDOUT = ("A", "B", "C", "D"), 8000


def table(path: Path, noisy: bool) -> Path:
    """Four sites of 2,000 private rows, then 8,000 public hold-out rows; ``noisy``: site A's labels
    (its private rows only) are replaced by noise."""
    gen = np.random.default_rng(0)
    n = 2000 * len(SITES) + HOLDOUT
    a, b = gen.normal(0, 1, n), gen.normal(0, 1, n)
    y = 0.8 * a - 0.5 * b + gen.normal(0, 0.3, n)
    if noisy:
        y[:2000] = np.random.default_rng(9).normal(0, 2, 2000)
    sites = np.concatenate([np.repeat(SITES, 2000), np.full(HOLDOUT, "H")])
    pd.DataFrame({"site": sites, "a": a, "b": b, "y": y}).to_csv(path, index=False)
    return path


def scenario(directory: Path, noisy: bool, owners: str = ""):
    """A posted price of 0.05 to owners of quadratic cost 0.6 (money alone: −0.05 at ε_min = 0.5) who
    value the model at 100 per unit of ψ below their own (Theorem 2's forecast with fixed constants)."""
    data = table(directory / f"t{int(noisy)}.csv", noisy)
    path = directory / f"s{int(noisy)}.toml"
    path.write_text(
        f'name = "f1"\nseed = 1\n[data]\nsource = "table"\npath = "{data}"\n'
        f'[data.table]\ntarget = "y"\nnumeric = ["a", "b"]\npartition = "site"\nholdout = {HOLDOUT}\n'
        '[model]\ntheta_max = 10.0\n[learner]\niterations = 40\nrho = 1.0\n[output]\nplots = false\n'
        '[market]\npolicy = "posted_price"\nprice = 0.05\nvalue = 10.0\nmodel_value = 100.0\n'
        'epsilon_min = 0.5\nepsilon_max = 100.0\nforecast = { c0 = 1e-5, c1 = 0.0, c2 = 10.0 }\n'
        f'costs = {{ kind = "quadratic", coef = 0.6 }}\n{owners}')
    return load(path)


def published(scenario) -> tuple:
    """What a market publishes: who takes part, the ε sold, the payments, the price, the forecast ψ̂."""
    o = pilots.market_stage(scenario, prepare(scenario)).outcome
    return (o.participates.tolist(), o.epsilon.tolist(), o.payment.tolist(), o.price, o.psi_forecast)


def test_the_published_outcome_ignores_the_private_rows(tmp_path, monkeypatch):
    clean, noisy = scenario(tmp_path, False), scenario(tmp_path, True)
    assert prepare(noisy).own_psi[0] > 100 * prepare(clean).own_psi[0]  # the rows differ that much
    assert published(clean) == published(noisy)
    assert published(clean)[0] == [False, False, True, False]  # owner C joins for the model's value
    monkeypatch.setattr(pilots, "sellers_of", lambda s, p: build_sellers(s, p.consortium.sizes, p.own_psi))
    oracle = published(clean), published(noisy)  # the old decision on ψ(θ_i*) of the records
    assert oracle[0][0] == [False, False, False, True] and oracle[1][0] == [True] * 4


def test_declared_values_replace_the_estimate(tmp_path):
    """An owner's declared own_psi is what it decides with (here: everyone declares a poor own model,
    and everyone joins), and a table whose hold-out is too small for a proxy needs declarations."""
    declared = "".join("[[owners]]\nown_psi = 0.5\n" for _ in SITES)
    assert published(scenario(tmp_path, False, declared))[0] == [True] * 4
    small = scenario(tmp_path, False).model_copy(deep=True)
    small.data.table.holdout = 4000  # fewer public rows than the owners' 8,000
    with pytest.raises(ScenarioError) as err:
        published(small)
    assert err.value.key == "market.model_value" and "declare it ([[owners]] own_psi)" in str(err.value)
