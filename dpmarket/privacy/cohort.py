"""The participants of a run as protocol owners: sensitivity Ξ, answer caps m_i, noise, member views.

Everything here is built from public information (sizes, declared bounds, the public proxy) and the
scenario; the records themselves enter only through each owner's answers (Theorem 1).
"""

from __future__ import annotations

import numpy as np

from dpmarket import rng as streams
from dpmarket.data import Consortium
from dpmarket.errors import CalibrationError, DeltaError, MarketError, ScenarioError
from dpmarket.learning.objective import Objective, make_loss
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.mechanisms import SystemNoise, answer_cap
from dpmarket.privacy.owners import DataOwner, answer_bound
from dpmarket.scenario.schema import OwnerSpec, Scenario


def sensitivity(scenario: Scenario, consortium: Consortium) -> float:
    """Ξ in the norm of the scenario's mechanism (L1 for Laplace, L2 for Gaussian): the clipping
    bound, or the bound derived from the declared data domain (Theorem 1).

    ``privacy.clip = "auto"`` takes the bound from the public proxy (a quantile of its
    per-example gradient norms), never above the declared-domain bound, which already holds.
    The proxy's norms are L1 norms, which bound the L2 ones from above: with the Gaussian, an
    automatic bound clips less than the L2 quantile would (more noise, less bias).
    """
    loss = make_loss(scenario.model.loss)
    bound = loss.l1_sensitivity(consortium.z_l1, consortium.y_max, scenario.model.theta_max)
    p = scenario.privacy
    if p.mechanism == "gaussian":
        bound *= z_l2(scenario, consortium) / consortium.z_l1
    if p.sensitivity != "clip":
        return _finite_bound(bound, scenario)
    if p.clip != "auto":
        return float(p.clip)
    from dpmarket.data.proxy import public_info  # deferred: builds the twin only when needed

    clip = public_info(scenario, consortium, norms=True).clip_bound(p.clip_quantile)
    if not clip > 0:
        raise ScenarioError(scenario.source, "privacy.clip", "auto",
                            f"the proxy's {p.clip_quantile} quantile of gradient norms is {clip!r}: "
                            "raise privacy.clip_quantile or give a number")
    return min(clip, _finite_bound(bound, scenario))


def z_l2(scenario: Scenario, consortium: Consortium) -> float:
    """sup ‖z‖₂ over the declared domain: √(pX² + 1) with the intercept's 1, √p·X without.

    Every loss here is a margin loss, ∇ℓ = ℓ'(θᵀz)·z, and its L1 bound Ξ is (a bound on |ℓ'|)·sup ‖z‖₁,
    so the L2 bound is Ξ·sup ‖z‖₂/sup ‖z‖₁ (√p times smaller for features in a box).
    """
    intercept = 1.0 if scenario.model.intercept else 0.0
    dim = consortium.owners[0].stats.A.shape[0]  # p, plus the intercept's column
    return float(np.sqrt((dim - intercept) * scenario.data.feature_bound**2 + intercept))


def _finite_bound(xi: float, scenario: Scenario) -> float:
    """Ξ if finite, else a ScenarioError naming the declared bound that overflowed it (the
    largest of |x_j| ≤ X, |y| ≤ Y and θmax, which Ξ multiplies)."""
    if np.isfinite(xi):
        return float(xi)
    d, m = scenario.data, scenario.model
    key, value = max((("data.feature_bound", d.feature_bound), ("data.label_bound", d.label_bound),
                      ("model.theta_max", m.theta_max)), key=lambda kv: kv[1])
    raise ScenarioError(scenario.source, key, value, f"makes the sensitivity Ξ = {xi!r}, not finite")


def _check_budget(scenario: Scenario, owner: int, xi: float, answers: int, records: int,
                  *, epsilon: float) -> None:
    """Refuse a budget so small that the owner's Laplace scale 2Ξm_i/(n_iε_i), or its largest draw,
    overflows: its answers would be infinite (θ pinned to the box), not merely noisy."""
    if np.isfinite(answer_bound(xi, 2.0 * xi * answers / (records * epsilon))):
        return
    raise ScenarioError(scenario.source, _owner_key(scenario, owner, "epsilon"), epsilon,
                        "so small a budget makes the Laplace noise scale 2Ξm/(nε) (or its largest draw) "
                        "infinite: no answer could carry information")


def _owner_key(scenario: Scenario, owner: int, key: str) -> str:
    """``owners.i.key`` when owner i's [[owners]] table sets it, else ``privacy.key``."""
    spec = scenario.owners[owner] if owner < len(scenario.owners) else None
    own = spec is not None and getattr(spec, key) is not None
    return f"owners.{owner}.{key}" if own else f"privacy.{key}"


def make_owner(scenario: Scenario, consortium: Consortium, objective: Objective, i: int, epsilon: float,
               *, answers: int, xi: float, clip: float | None) -> DataOwner:
    """Owner i as a protocol participant; an (ε, δ) no noise level reaches is a ScenarioError naming
    the key of the budget (the calibration's search range is in dpmarket/privacy/accounting.py)."""
    p = scenario.privacy
    delta = scenario.owner_value(i, "delta")
    # the owner's own n_i, not sizes: O(N) per call
    _check_budget(scenario, i, xi, answers, consortium.owners[i].n, epsilon=epsilon)
    guarantee = Guarantee.of(p, epsilon, delta)
    check_delta(scenario, i, guarantee, consortium.owners[i].n)
    try:
        return DataOwner(i, consortium.names[i], consortium.owners[i], objective.loss,
                         guarantee=guarantee, answers=answers, xi=xi,
                         noise_rng=noise_stream(scenario, i),
                         theta_max=scenario.model.theta_max, clip=clip)
    except CalibrationError as exc:
        raise _unreachable(scenario, i, epsilon, answers, exc) from None


def noise_stream(scenario: Scenario, i: int):
    """Owner i's noise generator: its ``noise`` stream of the run's seed, or the operating system's
    secure generator with ``privacy.noise = "system"`` (nothing published regenerates it)."""
    if scenario.privacy.noise == "system":
        return SystemNoise()
    return streams.stream(scenario.seed, "noise", i)


def check_delta(scenario: Scenario, i: int, guarantee: Guarantee, records: int) -> None:
    """Refuse a δ at which the guarantee says nothing: δ ≥ 1/n_i lets a mechanism publish one of
    owner i's records outright (with probability δ each) and still meet it (Dwork & Roth 2014, §2.3).
    Pure ε-DP answers (Laplace under basic composition) do not use δ."""
    if guarantee.pure or guarantee.delta < 1.0 / records:
        return
    raise ScenarioError(scenario.source, _owner_key(scenario, i, "delta"), guarantee.delta,
                        f"δ ≥ 1/n_i = 1/{records:,} (owner {i}'s records): a mechanism that publishes a "
                        "record outright with probability δ meets (ε, δ)-DP, so the guarantee would say "
                        "nothing; take δ well below 1/n_i (e.g. 1e-6)")


def check_deltas(scenario: Scenario, sizes) -> None:
    """:func:`check_delta` for every owner, from the public sizes alone: before a market forecasts
    any noise at a δ the guarantee cannot use (δ → 1 made the forecast's accountant fail first)."""
    for i, records in enumerate(sizes):
        check_delta(scenario, i, Guarantee.of(scenario.privacy, 1.0, scenario.owner_value(i, "delta")),
                    int(records))


def _unreachable(scenario: Scenario, i: int, epsilon: float, answers: int, exc: Exception,
                 *, key: str | None = None) -> ScenarioError:
    """The one-line error of owner i's (ε, δ) that no noise reaches over m answers, naming the key of
    the budget (``key``, else the owner's or privacy's epsilon), δ's key and where m comes from."""
    if isinstance(exc, DeltaError):  # δ itself is what no calibration can honour
        delta = scenario.owner_value(i, "delta")
        return ScenarioError(scenario.source, _owner_key(scenario, i, "delta"), delta,
                             f"{exc} (m = {answers} answers from privacy.split)")
    key = key or _owner_key(scenario, i, "epsilon")
    where = f"δ from {_owner_key(scenario, i, 'delta')}, m = {answers} from privacy.split"
    return ScenarioError(scenario.source, key, epsilon, f"{exc} ({where})")


def check_budgets(scenario: Scenario) -> None:
    """Refuse, before any data is built, an owner's (ε_i, δ_i) that no noise reaches over its m_i
    answers, with :func:`make_owner`'s one line: a sweep checks every cell so, before its first run.

    The owners are budgeted as :func:`build_owners` budgets them with everyone taking part; in a
    market each sells at least ``market.epsilon_min`` (named as the key). Owners are counted from
    ``data.owners`` (synthetic data); a table's owners are known only once it is read, so there only
    budgets whose m_i does not depend on their number are checked (the horizon split, or a cap).
    """
    p = scenario.privacy
    if Guarantee.of(p).pure:
        return  # Theorem 1's noise m/ε reaches every budget
    from dpmarket.privacy.accounting import check_reachable

    for i, epsilon, answers, key in _budgets(scenario):
        delta = float(scenario.owner_value(i, "delta"))
        try:
            check_reachable(Guarantee.of(p, epsilon, delta), answers)
        except CalibrationError as exc:
            raise _unreachable(scenario, i, epsilon, answers, exc, key=key) from None


def _budgets(scenario: Scenario):
    """(owner, ε_i, m_i, the budget's key or None) of every owner whose m_i is known from the scenario."""
    p, market = scenario.privacy, scenario.market
    synthetic = scenario.data.source == "synthetic"
    count = scenario.data.owners if synthetic else len(scenario.owners) + 1  # + one without a table
    shares = query_shares(scenario, np.arange(count)) if synthetic else np.full(count, np.nan)
    for i, share in enumerate(shares.tolist()):
        cap = scenario.owner_value(i, "cap")
        if not synthetic and p.split == "capped" and cap is None:
            continue  # m_i = a quantile of this owner's share, unknown until the table is read
        answers = answer_cap(p.split, scenario.learner.iterations, share, cap, p.cap_quantile)
        if market is None:
            yield i, float(scenario.owner_value(i, "epsilon")), answers, None
        else:
            yield i, float(market.epsilon_min), answers, "market.epsilon_min"


def query_shares(scenario: Scenario, members: np.ndarray) -> np.ndarray:
    """Each member's share of the exchanges, λ_i/Σλ over the members (all 1 for synchronous
    learners, where every owner answers every round): what the capped split sizes m_i from."""
    if scenario.learner.algorithm != "async":
        return np.ones(len(members))
    rates = np.array([scenario.owner_value(int(i), "clock_rate") for i in members], dtype=float)
    return rates / rates.sum()


def build_owners(scenario: Scenario, consortium: Consortium, objective: Objective,
                 members: np.ndarray | None = None,
                 epsilons: np.ndarray | None = None) -> list[DataOwner]:
    """The owners as protocol participants: budget, answer cap m_i, noise stream, ledger.

    ``members`` (default: everyone) are the owners taking part, with budgets ``epsilons``
    (indexed like all owners; default: the scenario's). Owner i keeps its own noise stream
    whoever else takes part, so policies are compared on common random numbers.
    """
    members = np.arange(len(consortium.owners)) if members is None else np.asarray(members)
    T = scenario.learner.iterations
    xi = sensitivity(scenario, consortium)
    shares = query_shares(scenario, members)
    clip = xi if scenario.privacy.sensitivity == "clip" else None
    owners = []
    for i, share in zip(map(int, members), shares.tolist(), strict=True):
        eps = scenario.owner_value(i, "epsilon") if epsilons is None else float(epsilons[i])
        cap = answer_cap(scenario.privacy.split, T, share, scenario.owner_value(i, "cap"),
                         scenario.privacy.cap_quantile)
        owners.append(make_owner(scenario, consortium, objective, i, eps, answers=cap, xi=xi, clip=clip))
    return owners


def member_view(scenario: Scenario, members: list[int], names: list[str]) -> Scenario:
    """``scenario`` as the network sees it when only ``members`` take part (renumbered 0…M−1).

    Each member keeps its own clock rate, channel and availability settings; an availability
    trace that names owners by index cannot be renumbered, so that combination is refused.
    """
    if members == list(range(len(names))):
        return scenario
    if scenario.network.availability:
        raise MarketError("an availability trace cannot be combined with owners that decline "
                          "the market (the trace's owner numbers would shift)")
    keys = ("clock_rate", "mean_online", "mean_offline", "outages")
    specs = [OwnerSpec(name=names[i], channel=scenario.owner_value(i, "channel")
                       if scenario.network.mode != "ideal" else None,
                       **{k: scenario.owner_value(i, k) for k in keys}) for i in members]
    data = scenario.data.model_copy(update={"owners": len(members)})
    return scenario.model_copy(update={"owners": specs, "data": data})


def ideal_rates(scenario: Scenario, owners: int) -> np.ndarray | None:
    """The clock rates of the ideal network's ``owners`` participants (numbered as in ``scenario``,
    a member view), or None when they are all equal (the ticking owner is then one integer draw)."""
    rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(owners)])
    return None if np.all(rates == rates[0]) else rates
