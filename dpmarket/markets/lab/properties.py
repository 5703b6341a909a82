"""The property table of a compensation policy: what an economist asks of it before recommending it.

For one policy's outcome (on the forecast), the simulated ψ of its training runs (one per
replication, from the comparison) and the market, :func:`evaluate` measures:

- **individual rationality**: per replication, the share of owners whose realised utility
  payment − C_i(ε_i) + model gain at the simulated ψ is negative, and the worst utility;
- **truthfulness**: per owner, the best gain from reporting another cost coefficient (a grid of
  factors ¼ … 4, the others truthful: dpmarket/markets/lab/deviations.py); the share who gain and
  the largest gain;
- **budget**: the payments against ``market.budget``; the learner's surplus, forecast and simulated;
- **welfare**: value − costs (+ model gains), forecast and simulated, against the best any coalition
  and budgets reach under the same forecast (dpmarket/markets/lab/welfare.py): the efficiency;
- **fairness**: each participant's Shapley value in the game V(S) = value·max(0, 1 − ψ̂(S)) over the
  policy's participants at the ε they sold (exact up to 20, else sampled, with standard errors),
  the correlation of payments with it and the distance between payment and Shapley shares;
- **replication**: per owner, the gain from splitting its records into k = 2 and 4 fake owners.

Figures from the simulated runs carry their standard error over replications; those on the
forecast are exact for these owners (no sampling), but for sampled Shapley values, whose error
comes from the sampled orders (the lab samples at least LAB_SAMPLES orders for its own values). A
gain counts when it exceeds a tolerance: 10⁻⁹·max(1, value) of numerical noise, or, where the
policy itself pays sampled Shapley values (``marginal`` beyond 20 members), twice the standard error
of a difference of m such payments, 2·√m·σ with σ the largest standard error of one payment (a
deviation changes who stays, hence the orders drawn): m = 2 for a misreport (the truthful and the
misreported payment), k + 1 for a split into k fakes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpmarket.markets.forecast import Forecaster
from dpmarket.markets.lab import deviations, welfare
from dpmarket.markets.outcome import Outcome
from dpmarket.markets.policies import SHAPLEY_STREAM, sampled_shapley, shapley_with_error
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market


@dataclass(frozen=True)
class Properties:
    """One policy's properties (the module docstring); per-owner arrays are indexed by owner."""

    policy: str
    replications: int
    # individual rationality, over replications
    ir_share: float
    ir_share_se: float
    ir_worst: float
    ir_worst_se: float
    # truthfulness, on the forecast
    truthful_utility: np.ndarray
    misreport_gain: np.ndarray
    numerical: float  # the tolerance of numerical noise
    payment_noise: float  # σ: the largest standard error of one payment (sampled Shapley payments; else 0)
    # budget
    spend: float
    budget: float | None
    surplus_forecast: float
    surplus_simulated: float
    surplus_simulated_se: float
    # welfare
    welfare_forecast: float
    welfare_simulated: float
    welfare_simulated_se: float
    welfare_best: float  # the reference: within the budget when there is one, else the first best
    welfare_first_best: float
    # fairness
    shapley: np.ndarray
    shapley_se: np.ndarray
    # replication: gain per owner for each k in ``parts``
    parts: tuple[int, ...] = deviations.PARTS
    sybil_gain: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def tolerance(self, payments: int = 2) -> float:
        """What a gain must exceed to count, comparing sums of ``payments`` noisy payments."""
        return float(max(self.numerical, 2.0 * np.sqrt(payments) * self.payment_noise))

    @property
    def misreport_share(self) -> float:
        """Share of owners with a misreport that gains more than the tolerance."""
        return float(np.mean(self.misreport_gain > self.tolerance(2)))

    @property
    def exact_shapley(self) -> bool:
        """Whether the Shapley values are exact (no sampling error)."""
        return not np.any(self.shapley_se)

    def efficiency(self, simulated: bool = False) -> float:
        """W over the reference best (NaN when no coalition creates welfare)."""
        w = self.welfare_simulated if simulated else self.welfare_forecast
        return w / self.welfare_best if self.welfare_best > 0 else float("nan")

    def sybil_share(self, k: int) -> float:
        """Share of owners that gain from splitting into ``k`` fakes."""
        return float(np.mean(self.sybil_gain[:, self.parts.index(k)] > self.tolerance(k + 1)))

    def sybil_max(self, k: int) -> float:
        """The largest gain from splitting into ``k`` fakes."""
        return float(np.max(self.sybil_gain[:, self.parts.index(k)]))


def mean_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error (0 from one value)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return float("nan"), float("nan")
    if np.ptp(values) == 0:  # one value, or the same in every replication: exactly no spread
        return float(values[0]), 0.0
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))


def realised_utilities(outcome: Outcome, s: Sellers, psi: np.ndarray) -> np.ndarray:
    """(R, N): every owner's utility in each replication, its model gain at that replication's ψ."""
    base = outcome.payment - outcome.cost
    if s.model_value > 0 and s.own_psi is not None:
        gains = s.model_value * np.maximum(0.0, s.own_psi[None, :] - psi[:, None])
        return base[None, :] + np.where(outcome.participates, gains, 0.0)
    return np.tile(base + outcome.gain, (len(psi), 1))


def evaluate(outcome: Outcome, psi: np.ndarray, s: Sellers, f: Forecaster, m: Market, *, seed: int,
             best: welfare.Best, first_best: welfare.Best) -> Properties:
    """The properties of ``outcome`` (the module docstring); ``psi`` its simulated ψ per replication,
    ``best`` the reference best welfare (within the budget if any) and ``first_best`` the unconstrained."""
    policy, psi = outcome.policy, np.asarray(psi, dtype=float)
    phi, phi_se = fairness_values(outcome, s, f, m, seed)
    noise = 0.0
    if policy == "marginal" and m.contribution == "shapley" and np.any(phi_se):
        # its payments are Shapley values sampled from m.shapley_samples orders: σ grows as 1/√samples
        lab = max(m.shapley_samples, LAB_SAMPLES)
        noise = float(np.max(phi_se) * np.sqrt(lab / m.shapley_samples) * _budget_share(outcome, phi))
    truthful = np.array([deviations.utility(outcome, s, i) for i in range(s.count)])
    lied = deviations.misreport_utilities(policy, s, f, m, seed)
    split = deviations.split_utilities(policy, s, f, m, seed)
    # nobody took part, so nothing was trained: the forecast's utilities (all 0 but model gains) stand in
    utilities = realised_utilities(outcome, s, psi) if len(psi) else outcome.utility[None, :]
    tol = 1e-9 * (1.0 + np.abs(outcome.payment))
    ir_share = mean_se(np.mean(utilities < -tol[None, :], axis=1))
    ir_worst = mean_se(utilities.min(axis=1))
    surplus = (mean_se(m.value * np.maximum(0.0, 1.0 - psi) - outcome.spend) if len(psi)
               else (-outcome.spend, 0.0))
    welfare_sim = mean_se(welfare.realised(outcome, s, m.value, psi)) if len(psi) else (0.0, 0.0)
    w_forecast = (float(welfare.realised(outcome, s, m.value, outcome.psi_forecast)[0])
                  if outcome.participates.any() else 0.0)
    return Properties(policy, len(psi), *ir_share, *ir_worst, truthful,
                      np.maximum(0.0, lied.max(axis=1) - truthful), 1e-9 * max(1.0, m.value), noise,
                      outcome.spend, m.budget,
                      outcome.surplus, *surplus, w_forecast, *welfare_sim, best.welfare, first_best.welfare,
                      phi, phi_se, deviations.PARTS, split - truthful[:, None])


LAB_SAMPLES = 4000  # orders the lab samples at least for its own Shapley values beyond 20 participants


def fairness_values(outcome: Outcome, s: Sellers, f: Forecaster, m: Market,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(φ, its standard error) of the participants in V(S) = value·max(0, 1 − ψ̂(S)) at their ε: exact
    up to 20 participants, else from max(market.shapley_samples, LAB_SAMPLES) orders (the stream the
    marginal policy samples, so at equal counts the same orders)."""
    if outcome.participates.sum() <= 20 or m.shapley_samples >= LAB_SAMPLES:
        return shapley_with_error(s, f, m, outcome.epsilon, outcome.participates, seed=seed)
    from dpmarket import rng as streams

    more = m.model_copy(update={"shapley_samples": LAB_SAMPLES})
    return sampled_shapley(s, f, more, outcome.epsilon, outcome.members,
                           gen=streams.stream(seed, "market", SHAPLEY_STREAM))


def _budget_share(outcome: Outcome, phi: np.ndarray) -> float:
    """The factor a budget scaled Shapley payments by (payments / values, 1 when not scaled)."""
    total = float(np.sum(phi[outcome.participates]))
    return min(1.0, outcome.spend / total) if total > 0 else 1.0


def references(s: Sellers, f: Forecaster, m: Market,
               outcomes: list[Outcome]) -> tuple[welfare.Best, welfare.Best]:
    """(the reference best welfare, the first best): within ``market.budget`` when it has one, searched
    from the policies' own coalitions as well beyond the exhaustive size."""
    starts = [o.participates for o in outcomes]
    first = welfare.best_welfare(s, f, m, None, starts)
    if m.budget is None:
        return first, first
    return welfare.best_welfare(s, f, m, m.budget, starts), first


def correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r (NaN with fewer than 3 points or no spread)."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def share_distance(payment: np.ndarray, phi: np.ndarray) -> float:
    """½Σ|p_i/Σp − φ_i/Σφ|: how far payment shares are from Shapley shares (0: in proportion)."""
    if payment.sum() <= 0 or phi.sum() <= 0:
        return float("nan")
    return float(0.5 * np.sum(np.abs(payment / payment.sum() - phi / phi.sum())))


def policy_row(p: Properties, outcome: Outcome) -> dict:
    """One row of ``properties.csv``."""
    members = outcome.participates
    pay, phi = outcome.payment[members], p.shapley[members]
    row = {
        "policy": p.policy, "participants": int(members.sum()), "replications": p.replications,
        "ir_violation_share": p.ir_share, "ir_violation_share_se": p.ir_share_se,
        "ir_worst_utility": p.ir_worst, "ir_worst_utility_se": p.ir_worst_se,
        "misreport_gain_share": p.misreport_share, "misreport_gain_max": float(np.max(p.misreport_gain)),
        "gain_tolerance": p.tolerance(2), "payment_noise": p.payment_noise,
        "payment": p.spend, "budget": "" if p.budget is None else p.budget,
        "within_budget": "" if p.budget is None else bool(p.spend <= p.budget * (1 + 1e-12)),
        "surplus_forecast": p.surplus_forecast, "surplus_simulated": p.surplus_simulated,
        "surplus_simulated_se": p.surplus_simulated_se,
        "welfare_forecast": p.welfare_forecast, "welfare_simulated": p.welfare_simulated,
        "welfare_simulated_se": p.welfare_simulated_se, "welfare_best": p.welfare_best,
        "welfare_first_best": p.welfare_first_best, "efficiency": p.efficiency(),
        "efficiency_simulated": p.efficiency(simulated=True),
        "efficiency_simulated_se": (p.welfare_simulated_se / p.welfare_best if p.welfare_best > 0
                                    else float("nan")),
        "shapley_exact": p.exact_shapley, "shapley_se_max": float(np.max(p.shapley_se)),
        "payment_shapley_correlation": correlation(pay, phi),
        "payment_shapley_share_distance": share_distance(pay, phi),
    }
    for k in p.parts:
        row[f"sybil{k}_gain_share"] = p.sybil_share(k)
        row[f"sybil{k}_gain_max"] = p.sybil_max(k)
    return row


def owner_rows(p: Properties, outcome: Outcome, names: list[str]) -> list[dict]:
    """The rows of ``owner_properties.csv`` for one policy: one per owner."""
    rows = []
    for i, name in enumerate(names):
        row = {"policy": p.policy, "owner": i, "name": name, "participates": bool(outcome.participates[i]),
               "epsilon": float(outcome.epsilon[i]), "payment": float(outcome.payment[i]),
               "utility": float(p.truthful_utility[i]), "shapley": float(p.shapley[i]),
               "shapley_se": float(p.shapley_se[i]), "misreport_gain": float(p.misreport_gain[i])}
        for j, k in enumerate(p.parts):
            row[f"sybil{k}_gain"] = float(p.sybil_gain[i, j])
        rows.append(row)
    return rows
