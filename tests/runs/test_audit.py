"""The privacy audit catches broken owners and passes the real one.

The broken variants are test-only subclasses of DataOwner put in the place the cohort builds owners
from (monkeypatch: no switch of the product turns them on): noise halved, the answer cap ignored
(the owner answers every query, its noise calibrated for m_i), the sensitivity off by 2 (noise for
Ξ/n_i, the add/remove sensitivity, where replace-one needs 2Ξ/n_i). The scenario is small (two
owners of 200 records, one feature, six exchanges, one answer each): 600 runs per world take about
half a second, and decide every case by a margin (the bounds' confidence is built in: exact
Clopper–Pearson at 95 %). A scenario of about 20 answers per owner shows what the audit cannot see, and
that it says so (inconclusive, never a pass)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import tiny

from dpmarket.cli import main
from dpmarket.errors import AuditError
from dpmarket.privacy import auditing, cohort
from dpmarket.privacy.owners import DataOwner
from dpmarket.runs.audit import AnswerAdversary, audit, canary_shift, exact_answers, worst_case_canary
from dpmarket.scenario.loading import validate

RUNS = 600


class NoiseHalved(DataOwner):
    """Adds half the noise its guarantee needs."""

    factor = 2.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scale /= self.factor
        self.noise.scale /= self.factor


class NoiseThirtieth(NoiseHalved):
    factor = 30.0


class Unbounded:
    """A ledger that never refuses (what an owner ignoring its cap keeps)."""

    def __init__(self) -> None:
        self.answers = 0

    def can_pay(self, charge=1) -> bool:
        return True

    def remaining(self, charge=1) -> int:
        return 10**9

    def try_pay(self, charge=1) -> bool:
        self.answers += 1
        return True


class CapIgnored(DataOwner):
    """Answers every query, its noise calibrated for m_i answers."""

    def _ledger(self):
        charge, _ = super()._ledger()
        return charge, Unbounded()


class SensitivityOffBy2(DataOwner):
    """Calibrates its noise to Ξ/n_i (add/remove) while clipping at Ξ: replace-one needs 2Ξ/n_i."""

    def __init__(self, index, name, data, loss, *, xi, **kwargs) -> None:
        super().__init__(index, name, data, loss, xi=xi / 2, **kwargs)


def scenario(theta_max: float = 0.1, rho: float | str = 3.0, **privacy):
    """Two owners of 200 records, one feature in [−1, 1], labels in [−3, 3], θmax = 0.1, ε = 1 over one
    answer each (capped at 1, six exchanges: each owner is asked once, then leaves)."""
    privacy = {"epsilon": 1.0, "split": "capped", "cap": 1, **privacy}
    if privacy["split"] == "horizon":
        del privacy["cap"]
    return tiny(data={"owners": 2, "records": 200, "features": 1, "generator": "whitened"},
                model={"intercept": False, "theta_max": theta_max}, learner={"iterations": 6, "rho": rho},
                privacy=privacy)


CLIP = {"sensitivity": "clip", "clip": 0.5}


def test_the_real_owner_passes_and_its_error_rates_are_the_laplace_law(monkeypatch):
    """One Laplace answer of scale b, shifted by v = 4YX/n = 0.06 between the worlds (the canary: z = 1,
    y = ±3): the likelihood ratio |a − μ₀| − |a − μ₁| ≥ t has probability e^−(t+v)/2b/2 under world 0
    and its complement e^(t−v)/2b/2 under world 1 (−v < t ≤ v). The counts at the chosen threshold are
    within 5 standard errors of that law, the estimate near ε·v/Δ (the canary reaches 12/12.4 of the
    sensitivity here), and the bound below the claim."""
    result = audit(scenario(), runs=RUNS, view="answers")
    a = result.audits[0]
    r, b, v = a.rates, result.noise_scale, 4 * 3.0 * 1.0 / 200
    assert result.answers_seen == 1.0 and result.sensitivity == pytest.approx(2 * 2 * (3 + 0.1) / 200)
    assert -v < r.threshold <= v
    fpr, fnr = math.exp(-(r.threshold + v) / (2 * b)) / 2, math.exp((r.threshold - v) / (2 * b)) / 2
    for measured, p, n in ((r.false_positive_rate, fpr, r.negatives),
                           (r.false_negative_rate, fnr, r.positives)):
        assert abs(measured - p) <= 5 * math.sqrt(p * (1 - p) / n)
    assert result.passed and a.epsilon_lower < 1.0 < a.epsilon_lower + 0.5
    assert result.verdict == "pass" and 1.0 < result.epsilon_detectable <= 2.0


@pytest.mark.parametrize("variant, privacy", [(NoiseHalved, {}), (CapIgnored, {}),
                                              (SensitivityOffBy2, CLIP)],
                         ids=["noise halved", "cap ignored", "sensitivity off by 2"])
def test_the_audit_catches_a_broken_owner(monkeypatch, variant, privacy):
    """Each broken owner leaks at least twice the claimed ε; the audit proves more than the claim."""
    monkeypatch.setattr(cohort, "DataOwner", variant)
    result = audit(scenario(**privacy), runs=RUNS, view="answers")
    assert result.verdict == "fail" and result.epsilon_lower > 1.3


def test_the_real_clipping_owner_passes():
    """The sensitivity-off-by-2 case's honest twin: clipping at Ξ, noise for 2Ξ/n_i."""
    result = audit(scenario(**CLIP), runs=RUNS, view="answers")
    assert result.passed and result.sensitivity == pytest.approx(2 * 0.5 / 200)


def test_the_published_model_alone_shows_only_a_gross_leak(monkeypatch):
    """The model adversary (Fisher's discriminant on θ_L) passes the real owner and catches noise cut 30
    times (three answers each, horizon split, θmax = 1 and ρ from the public twin, so that the model is
    not pinned to the box): the published model carries far less than the answers."""
    privacy = {"split": "horizon", "theta_max": 1.0, "rho": "auto"}
    real = audit(scenario(**privacy), runs=RUNS, view="model")
    # what the model alone could detect is not measured: no violation is inconclusive, never a pass
    assert real.epsilon_lower <= 1.0 and real.verdict == "inconclusive" and not real.power_measured
    monkeypatch.setattr(cohort, "DataOwner", NoiseThirtieth)
    assert audit(scenario(**privacy), runs=RUNS, view="model").verdict == "fail"


def test_the_adversary_computes_the_owners_exact_answers():
    """The adversary's μ(θ) for a world is what the owner would answer there before noise, at points of
    Θ and far outside it (both project)."""
    s = scenario(**CLIP)
    from dpmarket.data import build_consortium
    from dpmarket.learning.objective import Objective, make_loss

    consortium = build_consortium(s, keep_records=True)
    objective = Objective(make_loss("squared"), consortium.owners, 1e-5, 0.1)
    owner = cohort.build_owners(s, consortium, objective)[0]
    thetas = np.array([[0.05], [-0.1], [7.0]])
    got = exact_answers(owner.data, owner.loss, thetas, owner.clip, owner.norm, theta_max=owner.theta_max)
    assert np.allclose(got, np.array([owner.exact_answer(t) for t in thetas]), rtol=1e-12, atol=0)
    canary = worst_case_canary(s, consortium, owner)
    assert canary.z.tolist() == [1.0] and (canary.label_in, canary.label_out) == (3.0, -3.0)


def test_the_audit_by_one_run_counts_canaries(monkeypatch):
    """One canary per feature per run: 400 runs of one feature are 400 guesses. The real owner's
    correct guesses prove less than its ε — but 400 guesses detect a violation only from ε ≈ 6.7, so that
    is inconclusive, not a pass; an owner whose noise is cut 30 times is caught."""
    s = scenario(split="horizon")
    real = audit(s, runs=400, method="one-run")
    one = real.audits[0]
    assert (one.canaries, one.guesses) == (400, 400) and real.epsilon_lower <= 1.0
    assert real.verdict == "inconclusive" and real.epsilon_detectable > 2.0
    monkeypatch.setattr(cohort, "DataOwner", NoiseThirtieth)
    assert audit(s, runs=400, method="one-run").verdict == "fail"


def _last_bits(monkeypatch, draw: int) -> None:
    """Every answer's likelihood ratio moved by a few units in the last place of its shift, as another
    CPU's sums move it (a stream per ``draw``: another machine)."""
    gen, exact = np.random.default_rng(draw), AnswerAdversary.ratio

    def ratio(self, answer, mu0, mu1):
        r = exact(self, answer, mu0, mu1)
        return r + np.finfo(float).eps * np.abs(mu1 - mu0).sum(axis=-1) * gen.uniform(-4, 4, r.shape)

    monkeypatch.setattr(AnswerAdversary, "ratio", ratio)


def test_the_audit_by_one_run_guesses_alike_whatever_the_last_bits_of_its_scores(monkeypatch):
    """With about four answers per run, some runs' Laplace ratios cancel to a score of 0 in exact
    arithmetic (equal counts of ±Δ), ±10⁻¹⁶ on a CPU: on the scores' grid every machine guesses alike
    and counts the same correct guesses. Without the grid (the wrong input) the count depends on them."""
    s = tiny(data={"owners": 2, "records": 200, "features": 1, "generator": "whitened"},
             model={"intercept": False, "theta_max": 0.1}, learner={"iterations": 8, "rho": 3.0},
             privacy={"epsilon": 1.0, "split": "horizon"})

    def correct(draw: int | None) -> int:
        with monkeypatch.context() as m:
            if draw is not None:
                _last_bits(m, draw)
            return audit(s, runs=300, method="one-run").audits[0].correct

    exact = correct(None)
    assert all(correct(draw) == exact for draw in range(3))
    monkeypatch.setattr(auditing, "rounded", lambda scores, scale: np.asarray(scores, dtype=float))
    assert len({correct(draw) for draw in range(3)} | {correct(None)}) > 1


def test_the_command_writes_the_audit_and_exits_by_its_verdict(tmp_path, capsys, monkeypatch):
    """``dpmarket audit``: exit 0 and its files for the real owner with 600 runs per world (a pass: they
    detect a violation within twice the claim); exit 4 with 200 runs (no violation, but they detect one
    only from ε = 2.4: inconclusive); the documented exit status 3 for a broken owner; a bad --owner is
    one line, exit 2, nothing written."""
    path = tmp_path / "s.toml"
    path.write_text(scenario().to_toml(), encoding="utf-8")
    out = tmp_path / "a"
    assert main(["audit", str(path), "--runs", "600", "--view", "answers", "--out", str(out), "--quiet"]) == 0
    assert {p.name for p in out.iterdir()} == {"scenario.toml", "summary.json", "audit.csv", "scores.csv"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] and summary["verdict"] == "pass" and summary["runs"] == 600
    assert summary["epsilon_claimed"] == 1.0 and 1.0 < summary["epsilon_detectable"] <= 2.0
    assert "verdict       PASS" in capsys.readouterr().out
    few = tmp_path / "few"
    assert main(["audit", str(path), "--runs", "200", "--view", "answers", "--out", str(few), "--quiet"]) == 4
    assert "verdict       INCONCLUSIVE" in capsys.readouterr().out
    summary = json.loads((few / "summary.json").read_text())
    assert summary["verdict"] == "inconclusive" and not summary["passed"]
    assert summary["epsilon_detectable"] > 2.0
    monkeypatch.setattr(cohort, "DataOwner", NoiseHalved)
    bad = tmp_path / "b"
    assert main(["audit", str(path), "--runs", "600", "--view", "answers", "--out", str(bad), "--quiet"]) == 3
    assert "verdict       FAIL" in capsys.readouterr().out
    assert json.loads((bad / "summary.json").read_text())["verdict"] == "fail"
    assert main(["audit", str(path), "--owner", "7", "--out", str(tmp_path / "c"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--owner 7: no such participant" in err and not (tmp_path / "c").exists()


def test_a_market_in_time_is_refused():
    s = tiny(market={"policy": "posted_price", "price": 1.0, "forecast": "law", "mode": "dynamic",
                     "costs": {"kind": "quadratic", "coef": 0.5}})
    with pytest.raises(AuditError, match="market.mode = 'dynamic'"):
        audit(s, runs=10)


def test_the_api_returns_the_table_and_writes_nothing_without_out(tmp_path, monkeypatch):
    """dpmarket.audit: the table and every run's score as DataFrames, the verdict, no files unless out."""
    import dpmarket

    monkeypatch.chdir(tmp_path)
    a = dpmarket.audit(scenario(), runs=600, view="answers")
    assert a.passed and a.verdict == "pass" and list(a.table["view"]) == ["answers"] and len(a.scores) == 1200
    assert a.table["epsilon_lower"][0] == a.summary["epsilon_lower"] and not any(tmp_path.iterdir())
    assert a.table["epsilon_detectable"][0] == a.summary["epsilon_detectable"]


# --- what the audit cannot see: about 20 answers per owner (issue 43) ---------------------------------

class NoiseForRootM(DataOwner):
    """Sizes its noise for √m_i answers instead of m_i: leaks √m_i = 5 times its claim at m_i = 25."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        factor = math.sqrt(self.answers_allowed)
        self.scale /= factor
        self.noise.scale /= factor


def twenty_answers(**privacy):
    """Three owners of 300 records, four features, 60 exchanges, the defaults (answers capped at the 0.9
    quantile: m_i = 25, about 20 given; per-record gradients clipped at the public twin's 0.9 quantile)."""
    return validate({"name": "twenty", "seed": 1, "data": {"owners": 3, "records": 300, "features": 4},
                     "learner": {"iterations": 60}, "privacy": privacy, "output": {"plots": False}}, "test")


def test_about_twenty_answers_per_owner_are_inconclusive_never_a_pass(monkeypatch):
    """Each answer spends ε/25 and the canary's shift is spread over 20 noisy answers: 1,000 runs per world
    prove nothing about the real owner, and would catch an owner only were its noise cut about 5.7 times
    (its ε about 5.7): that is inconclusive (it was a PASS). An independent mutant leaking 5 times (noise
    for √m_i answers) is not passed (it was a PASS with ε ≥ 0.63): here it is caught."""
    real = audit(twenty_answers(), runs=1000, view="answers")
    assert real.answers_seen == pytest.approx(20, abs=0.5) and real.epsilon_lower <= 1.0
    assert real.verdict == "inconclusive" and 4.0 < real.epsilon_detectable < 8.0
    monkeypatch.setattr(cohort, "DataOwner", NoiseForRootM)
    assert audit(twenty_answers(), runs=1000, view="answers").verdict == "fail"


def test_a_clipped_canary_concentrates_its_shift_on_one_coordinate():
    """A clipped per-example gradient moves the answer by 2Ξ in L1 whatever the record: the canary puts
    it on one coordinate (the worst case for an L1 sensitivity; its L2 norm 2Ξ, against 2Ξ/√p spread over
    p), on the intercept alone when there is one. Unclipped (Ξ from the declared bounds), the corner moves
    every coordinate the most and stays the canary."""
    from dpmarket.runs.audit import setting, target_owner

    for intercept, want in ((False, [1.0, 0.0, 0.0, 0.0]), (True, [0.0, 0.0, 0.0, 0.0, 1.0])):
        s = validate({"name": "c", "seed": 1, "data": {"owners": 3, "records": 300, "features": 4},
                      "model": {"intercept": intercept}, "learner": {"iterations": 60}}, "test")
        found = setting(s, None)
        owner = target_owner(s, found)
        canary = worst_case_canary(s, found.consortium, owner)
        assert canary.z.tolist() == want
        shift = canary_shift(canary.z, canary.label_in, owner, intercept)
        assert np.count_nonzero(shift) == 1 and np.abs(shift).sum() == pytest.approx(2 * owner.xi, rel=1e-9)
    bounds = twenty_answers(sensitivity="bounds")
    found = setting(bounds, None)
    canary = worst_case_canary(bounds, found.consortium, target_owner(bounds, found))
    assert canary.z.tolist() == [1.0, 1.0, 1.0, 1.0] and canary.label_in == found.consortium.y_max


def test_what_the_runs_detect_does_not_depend_on_the_owners_own_noise(monkeypatch):
    """The detectable ε is measured on the claimed noise (rebuilt from the scenario), not the owner's: an
    owner that halves its noise is audited on the same schedule, and its runs detect what the real
    owner's do (squared loss, unclipped: the canary's shift does not depend on the query point), while
    its own bound exceeds the claim."""
    real = audit(scenario(), runs=RUNS, view="answers")
    monkeypatch.setattr(cohort, "DataOwner", NoiseHalved)
    broken = audit(scenario(), runs=RUNS, view="answers")
    assert broken.epsilon_detectable == real.epsilon_detectable and broken.verdict == "fail"
    assert broken.noise_scale == pytest.approx(real.noise_scale / 2)
