"""The public proxy of the owners' data: what the learner may use to set its own parameters.

Every learner parameter (the step ρ, the clip bound, the forecast's pilot runs) must come from
public information. A parameter computed from the owners' records would publish a function of
them outside the DP accounting (the published model, or the market's prices, would then depend
on the records through a channel no ε pays for). The proxy is a stand-in dataset with the
owners' sizes, which are public in dpmarket:

- synthetic owners: a *twin* drawn from the same generator and settings (the declared
  distribution) with another data seed, so it shares none of the owners' draws — neither their
  records nor the population's coefficients;
- table owners: the public hold-out (the rows the learner may know), split into owners of the
  same sizes for pilot runs; the curvature needs only the hold-out as a whole.

:class:`PublicInfo` condenses the proxy into what the learner's parameters need: a bound on
one owner's curvature, the eigenvalues of f's Hessian with the floor law's weights and f*, the
per-example gradient norms at the proxy's optimum (for the clip bound), and how far each proxy
owner's own optimum lies from the proxy's (for the market's forecast of a coalition's bias).
:func:`population_weights` gives the floor law's weights in expectation over the populations a
synthetic scenario's generator declares (a twin's coefficients are one draw, the owners' another).
:func:`resolve_step` derives a run's step ρ = "auto" from it (:mod:`dpmarket.learning.stepsize`
has the formulas).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from dpmarket.data.consortium import Consortium, build_consortium, keeps_records
from dpmarket.data.synthetic import owner_sizes
from dpmarket.errors import ScenarioError
from dpmarket.learning import kernels
from dpmarket.learning.objective import Objective, OwnerData, make_loss
from dpmarket.learning.stepsize import StepSize, auto_rho, stability_number
from dpmarket.scenario.loading import file_digests
from dpmarket.scenario.schema import Scenario

TWIN_KEY = 0x7477696E  # "twin": mixed into the data seed to draw the public twin
# Records per owner of the twin that PublicInfo summarises: curvatures and gradient-norm quantiles
# are per-record averages, which 4,096 records estimate to a few percent (the top eigenvalue of a
# sample covariance errs upwards, on the safe side), at a fraction of the cost of full sizes.
SUMMARY_RECORDS = 4096
CURVATURE_SCALE = {"squared": 2.0, "logistic": 0.25}  # ℓ'' ≤ this, so ∇²(data term) ≼ scale·ZᵀZ/n
POPULATION_DRAWS = 8  # twins whose floor weights the forecast averages (population_weights)


def data_seed(scenario: Scenario) -> int:
    """The seed the owners' records are drawn with (``data.seed``, else the run seed)."""
    return scenario.seed if scenario.data.seed is None else scenario.data.seed


def twin_seed(seed: int, draw: int = 0) -> int:
    """The data seed of the public twin of owners drawn with ``seed`` (never equal to it); ``draw`` k ≥ 1
    gives the k-th further twin (:func:`population_seeds`), from the entropy (seed, "twin", k)."""
    key = (int(seed), TWIN_KEY) if draw == 0 else (int(seed), TWIN_KEY, draw)
    state = np.random.SeedSequence(key).generate_state(2, np.uint32)
    twin = int(state[0]) << 31 | int(state[1]) >> 1
    return twin if twin != seed else twin + 1


def population_seeds(seed: int, draws: int) -> list[int]:
    """The data seeds of ``draws`` public twins of owners drawn with ``seed``: the twin's own
    (:func:`twin_seed`) first, then draws k = 1, 2, … from (seed, "twin", k), none equal to ``seed``."""
    return [twin_seed(seed, k) for k in range(draws)]


def twin_scenario(scenario: Scenario, sizes: np.ndarray | None = None, seed: int | None = None) -> Scenario:
    """``scenario`` with its data drawn from the twin seed (or ``seed``): the same settings and the
    owners' sizes (public), or ``sizes`` when given (fewer records per owner for a summary).

    Sizes drawn from a distribution are drawn with the data seed, so the twin is given them as a
    list; otherwise its own seed would draw other sizes.
    """
    if sizes is None:
        sizes = owner_sizes(scenario, data_seed(scenario))
    seed = twin_seed(data_seed(scenario)) if seed is None else seed
    data = scenario.data.model_copy(update={"seed": seed,
                                            "records": [int(n) for n in sizes], "owners": len(sizes)})
    owners = [o.model_copy(update={"records": None}) for o in scenario.owners]
    return scenario.model_copy(update={"data": data, "owners": owners})


def proxy_consortium(scenario: Scenario, consortium: Consortium) -> Consortium:
    """The public stand-in for ``consortium``: owners of the same sizes and names, public data."""
    if scenario.data.source == "synthetic":
        return build_consortium(twin_scenario(scenario))
    return _holdout_owners(scenario, consortium)


def _holdout_owners(scenario: Scenario, consortium: Consortium) -> Consortium:
    """The hold-out's rows split, in file order, into owners of the owners' sizes."""
    block, sizes = consortium.holdout, consortium.sizes
    rows = 0 if block is None else block.shape[1]
    if rows < int(sizes.sum()):
        raise ScenarioError(scenario.source, "data.table.holdout",
                            scenario.data.table.holdout,
                            f"the public proxy needs {int(sizes.sum()):,} hold-out rows (the owners' "
                            f"records) but has {rows:,}: enlarge the hold-out, or set "
                            "market.pilots.data = 'owners' (an oracle that reads the private records)")
    keep = keeps_records(scenario)
    cuts = np.cumsum([0, *map(int, sizes)])
    owners = [OwnerData.from_block(np.ascontiguousarray(block[:, a:b]), scenario.model.intercept, keep)
              for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return Consortium(list(consortium.names), owners, consortium.z_l1, consortium.y_max)


@dataclass(frozen=True)
class PublicInfo:
    """What the proxy tells the learner; every field is public by construction."""

    source: str  # where it came from, for the summary
    owner_curvature: float  # L̂: the largest curvature of one owner's data term on the proxy
    eigenvalues: np.ndarray  # h_j of ∇²f on the proxy (ascending), 2λ included
    floor_weights: np.ndarray  # h_j e_j² / (2 f*) on the proxy: the floor law's weights
    gradient_norms: np.ndarray  # per-example ‖∇ℓ(θ*; z, y)‖₁ on the proxy, sorted (if asked for)
    f_star: float = float("nan")  # f(θ*) on the proxy: the scale of ψ
    # Per proxy owner (None: not asked for, or a hold-out too small to split into owners of the
    # owners' sizes):
    deviations: np.ndarray | None = None  # (θ_i* − θ*)ᵀ∇²f(θ_i* − θ*)/(2f*): how far its optimum lies
    gradient_modes: np.ndarray | None = None  # (N, p): (v_jᵀ∇f_i(θ*))², its data term's gradient at
    #                                           θ* in the eigenbasis of h (the kicks of selection)

    def clip_bound(self, quantile: float) -> float:
        """The ``quantile`` of the proxy's per-example gradient norms at its optimum."""
        if not len(self.gradient_norms):
            raise ValueError("this PublicInfo was built without records (public_info(..., norms=True))")
        return float(np.quantile(self.gradient_norms, quantile, method="higher"))


def curvature_of(loss: str, data: OwnerData) -> float:
    """Upper bound on the largest eigenvalue of one owner's data-term Hessian (1/n)Σ∇²ℓ."""
    return CURVATURE_SCALE[loss] * float(np.linalg.eigvalsh(data.stats.A)[-1]) / data.n


def hessian(objective: Objective, theta: np.ndarray) -> np.ndarray:
    """∇²f(θ): exact for squared loss, at ``theta`` for logistic (2λI plus the data term)."""
    lam2 = 2.0 * objective.lam * np.eye(objective.p)
    if objective.loss.name == "squared":
        A = sum(o.stats.A for o in objective.owners)
        return lam2 + 2.0 * A / objective.n
    Z = np.vstack([o.records()[0] for o in objective.owners])
    y = np.concatenate([o.records()[1] for o in objective.owners])
    s = 1.0 / (1.0 + np.exp(-y * (Z @ theta)))
    return lam2 + (Z * (s * (1.0 - s))[:, None]).T @ Z / objective.n


def eigenbasis(objective: Objective) -> tuple[np.ndarray, np.ndarray]:
    """(h_j ascending, V with the eigenvectors as columns) of ∇²f at θ*."""
    return np.linalg.eigh(hessian(objective, objective.theta_star))


def floor_terms(objective: Objective, basis: tuple[np.ndarray, np.ndarray] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(h_j, w_j): eigenvalues of ∇²f at θ* and the floor law's weights h_j e_j²/(2f*), e = θ* − 0
    (``basis``: the objective's :func:`eigenbasis`, when the caller has it already).

    ψ of a model at distance d from θ* is about Σ_j h_j d_j²/(2f*) in this basis; Algorithm 1
    starts at θ = 0, so d = θ* at the start.
    """
    h, V = eigenbasis(objective) if basis is None else basis
    e = V.T @ objective.theta_star
    return h, h * e * e / (2.0 * objective.f_star)


def owner_terms(parts: Objective, basis: np.ndarray, hess: np.ndarray,
                f_star: float) -> tuple[np.ndarray, np.ndarray]:
    """How the owners of ``parts`` differ, for the forecast's heterogeneity and selection terms.

    Per owner: ψ of its own-data optimum to second order, (θ_i* − θ*)ᵀH(θ_i* − θ*)/(2f*); and its
    data term's gradient at θ* in the eigenbasis ``basis``, squared per mode: a copy asked of owner i
    moves along it, so random selection kicks the model even without noise.
    """
    theta = parts.theta_star
    d = parts.own_data_models() - theta
    gradients = np.array([parts.loss.mean_grad(theta, o) for o in parts.owners])
    return np.einsum("ip,pq,iq->i", d, hess, d) / (2.0 * f_star), (gradients @ basis) ** 2


def summarise(source: str, objective: Objective, split: Objective | None) -> PublicInfo:
    """:class:`PublicInfo` of a dataset seen as ``objective`` (and as ``split`` into owners of the
    owners' sizes, if it can be). Used on the proxy; tests call it on the owners (an oracle)."""
    has_records = objective.owners[0].Z is not None
    norms = gradient_norms(objective, objective.theta_star) if has_records else np.array([])
    loss = objective.loss.name
    if loss not in CURVATURE_SCALE:  # hinge: no curvature, no floor law, no forecast law
        return PublicInfo(source, float("nan"), np.array([]), np.array([]), norms, objective.f_star)
    h, V = eigenbasis(objective)
    _, w = floor_terms(objective, (h, V))
    dev = modes = None
    if split is not None:
        dev, modes = owner_terms(split, V, hessian(split, split.theta_star), objective.f_star)
    curvature = max(curvature_of(loss, o) for o in objective.owners)
    return PublicInfo(source, curvature, h, w, norms, objective.f_star, dev, modes)


# Hinge records whose margin y·θᵀz is within this of 1 are on the kink (see gradient_norms).
KINK = 1e-9


def gradient_norms(objective: Objective, theta: np.ndarray) -> np.ndarray:
    """Every record's ‖∇ℓ(θ; z, y)‖₁ = |ℓ'(θᵀz)|·‖z‖₁ (margin losses), sorted.

    At the hinge's optimum some records lie exactly on the kink y·θᵀz = 1 (the support vectors), where
    ℓ' is any value of [−y, 0]: the computed margin puts each on either side by its last bits, another
    on each CPU, and the clip bound (a quantile of these norms) moved by 10⁻³. They count as active
    (within :data:`KINK` of 1), the larger norm, the same on every machine."""
    hinge = objective.loss.name == "hinge"
    parts = []
    for o in objective.owners:
        Z, y = o.records()
        u = Z @ theta
        slope = np.where(y * u < 1.0 + KINK, 1.0, 0.0) if hinge else np.abs(objective.loss.dmargin(u, y))
        parts.append(slope * np.abs(Z).sum(axis=1))
    return np.sort(np.concatenate(parts))


def public_info(scenario: Scenario, consortium: Consortium, norms: bool = False,
                owners: bool = False) -> PublicInfo:
    """The proxy's summary for ``scenario`` (computed once per dataset and need, then cached).

    ``norms`` asks for the per-example gradient norms (the clip bound), which need the proxy's
    records (squared loss is otherwise summarised from sufficient statistics alone); ``owners``
    for the per-owner terms of the forecast's law, which need a proxy of full size.
    """
    key = _key(scenario)
    with _LOCK:
        for (k, has_norms, has_owners), info in _CACHE.items():
            if k == key and has_norms >= norms and has_owners >= owners:
                return info
    with kernels.pinned("numpy"):  # cached for any run that follows, whatever kernel it uses
        info = _compute(scenario, consortium, norms, owners)
    with _LOCK:
        _CACHE[(key, norms, owners)] = info
        while len(_CACHE) > 4:
            _CACHE.popitem(last=False)
    return info


_CACHE: OrderedDict[tuple[str, bool, bool], PublicInfo] = OrderedDict()
_LOCK = threading.Lock()


def _key(scenario: Scenario) -> str:
    """What the summary depends on: the scenario's data, model and owners, and a table's content."""
    dump = scenario.model_dump(mode="json", include={"data", "model", "owners"})
    dump["data_seed"] = data_seed(scenario)
    dump.update(file_digests(scenario, ("data.path",)))
    return json.dumps(dump, sort_keys=True)


def _compute(scenario: Scenario, consortium: Consortium, norms: bool, owners: bool) -> PublicInfo:
    """Build the proxy (records only where needed) and summarise it; the proxy is not kept.

    Curvatures, eigenvalues and gradient-norm quantiles are per-record averages: a synthetic twin
    of up to SUMMARY_RECORDS records per owner gives them. The per-owner terms (``owners``, for the
    forecast's law) depend on each owner's sampling error, so they come from a twin of full size,
    projected on the same eigenbasis.
    """
    m = scenario.model
    records = norms or m.loss != "squared"
    if scenario.data.source != "synthetic":
        return _holdout_summary(scenario, consortium, owners)
    seed = twin_seed(data_seed(scenario))
    small = small_twin(scenario, consortium, seed, records=records)
    info = summarise(f"synthetic twin (data seed {seed}, up to {SUMMARY_RECORDS:,} records "
                     "per owner)", small, None)
    if not owners or m.loss not in CURVATURE_SCALE:
        return info
    full = proxy_consortium(scenario, consortium)
    parts = Objective(small.loss, full.owners, m.regularization, m.theta_max)
    dev, modes = owner_terms(parts, eigenbasis(small)[1], hessian(parts, parts.theta_star), info.f_star)
    return replace(info, deviations=dev, gradient_modes=modes)


def population_weights(scenario: Scenario, consortium: Consortium,
                       draws: int = POPULATION_DRAWS) -> np.ndarray | None:
    """The floor law's weights w_j in expectation over the generator's populations, on the twin's
    eigenbasis; None for table owners (a hold-out is one dataset, not a draw of a population).

    A synthetic scenario declares its generator, not its draw: each twin draws its own coefficients
    θ* (synthetic.population), so one twin's ψ(0) = Σ_j w_j is one draw of a quantity that varies
    by 15–35 % from draw to draw, and the owners' is another draw. The expectation over the
    declared distribution is the public estimate of least error: over 48 generated markets (design
    seeds 1001–1003 of benchmarks/bench_forecast_markets.py) the owners' ψ(0) was within ×1.5 of one
    twin's in 27, of this expectation in 40 (rms log error 0.47 and 0.30). For the ``whitened``
    generator's regressions under squared loss it is closed (:func:`closed_weights`): the data fix
    the Hessian H = Σ_j h_j v_j v_jᵀ and f* (the twin's, at up to SUMMARY_RECORDS records per owner,
    as :func:`public_info`), θ* is the population's coefficients up to the owners' shifts and
    sampling, so E w_j = h_j·v_jᵀ D v_j/(2f*) with D = E θ*θ*ᵀ (synthetic.coefficient_moments; 0
    for an intercept). Otherwise it is the mean over ``draws`` twins (:func:`twins_weights`).
    """
    if scenario.data.source != "synthetic" or scenario.model.loss not in CURVATURE_SCALE:
        return None
    key = (_key(scenario), draws)
    with _LOCK:
        if key in _WEIGHTS:
            return _WEIGHTS[key]
    with kernels.pinned("numpy"):
        mean = _expected_weights(scenario, consortium, draws)
    with _LOCK:
        _WEIGHTS[key] = mean
        while len(_WEIGHTS) > 4:
            _WEIGHTS.pop(next(iter(_WEIGHTS)))
    return mean


def _expected_weights(scenario: Scenario, consortium: Consortium, draws: int) -> np.ndarray:
    """:func:`population_weights`' expectation: closed where it is, else the mean over twins."""
    closed = closed_weights(scenario, consortium)
    return twins_weights(scenario, consortium, draws) if closed is None else closed


def closed_weights(scenario: Scenario, consortium: Consortium) -> np.ndarray | None:
    """E w_j = h_j·v_jᵀ D v_j/(2f*) on the twin's Hessian and f*, D = E θ*θ*ᵀ of the declared
    generator (:func:`population_weights`); None where no closed form is known (the ``correlated``
    generator, classification, the logistic loss)."""
    from dpmarket.data.synthetic import PROFILES, coefficient_moments

    m, d = scenario.model, scenario.data
    profile = PROFILES[d.kind]
    if not (d.generator == "whitened" and profile.task == "regression" and m.loss == "squared"):
        return None
    objective = small_twin(scenario, consortium, twin_seed(data_seed(scenario)))
    h, V = eigenbasis(objective)
    moments = np.zeros(objective.p)
    moments[:d.features] = coefficient_moments(profile, d.features)  # an intercept, if any, is last: 0
    return h * ((V * V).T @ moments) / (2.0 * objective.f_star)


def twins_weights(scenario: Scenario, consortium: Consortium, draws: int) -> np.ndarray:
    """The mean over ``draws`` twins (:func:`population_seeds`) of each twin's floor weights w_j,
    mode by mode in ascending order of its eigenvalues (:func:`population_weights`)."""
    return np.mean([floor_terms(small_twin(scenario, consortium, seed))[1]
                    for seed in population_seeds(data_seed(scenario), draws)], axis=0)


def small_twin(scenario: Scenario, consortium: Consortium, seed: int, records: bool = False) -> Objective:
    """The objective of the twin drawn with ``seed``, at up to SUMMARY_RECORDS records per owner (their
    records kept where the loss needs them, or ``records`` asks)."""
    m = scenario.model
    twin = twin_scenario(scenario, np.minimum(consortium.sizes, SUMMARY_RECORDS), seed)
    owners = build_consortium(twin, keep_records=records or m.loss != "squared").owners
    return Objective(make_loss(m.loss), owners, m.regularization, m.theta_max)


_WEIGHTS: dict[tuple[str, int], np.ndarray] = {}


def _holdout_summary(scenario: Scenario, consortium: Consortium, owners: bool) -> PublicInfo:
    """The hold-out as a whole, and split into owners of the owners' sizes when asked and large
    enough for that."""
    block, m = consortium.holdout, scenario.model
    if block is None or block.shape[1] <= block.shape[0]:
        raise ScenarioError(scenario.source, "data.table.holdout", scenario.data.table.holdout,
                            "too few public rows: learner.rho = 'auto', privacy.clip = 'auto' and the "
                            "forecast's pilots take their constants from the hold-out (never from the "
                            "owners' rows); enlarge it, or give learner.rho and privacy.clip numbers")
    whole = Objective(make_loss(m.loss), [OwnerData.from_block(block, m.intercept, True)],
                      m.regularization, m.theta_max)
    split = None
    if owners and block.shape[1] >= int(consortium.sizes.sum()):
        split = Objective(whole.loss, _holdout_owners(scenario, consortium).owners, m.regularization,
                          m.theta_max)
    return summarise(f"public hold-out ({block.shape[1]:,} rows)", whole, split)


# --- the owners' own-data ψ as public information shows it ----------------------------------------

def public_own_psi(scenario: Scenario, consortium: Consortium) -> np.ndarray:
    """Each owner's own-data ψ for the market's decisions, from public information only: the value the
    owner declares (``[[owners]] own_psi``), else the public proxy's estimate — ψ on the proxy of the
    model that the proxy owner of the same size trains on its records alone.

    ψ(θ_i*) on the owners' own records (what ``owners.csv`` reports as own_psi, an oracle) would publish
    a function of the records through who joins, the ε sold and the payments, outside any ε
    (issue 28, F1). The proxy's owners have the owners' sizes (public); a table's proxy is the hold-out
    split into owners of those sizes, so it needs Σn_i hold-out rows unless every owner declares.
    """
    declared = [scenario.owner_value(i, "own_psi") for i in range(len(consortium.owners))]
    if all(v is not None for v in declared):
        return np.array(declared, dtype=float)
    try:
        proxy = proxy_consortium(scenario, consortium)
    except ScenarioError as exc:
        raise ScenarioError(scenario.source, "market.model_value", scenario.market.model_value,
                            "owners that value the model decide from their own-data ψ, which must come from "
                            f"public information: declare it ([[owners]] own_psi), or {exc.reason}") from None
    m = scenario.model
    objective = Objective(make_loss(m.loss), proxy.owners, m.regularization, m.theta_max)
    estimated = objective.psis(objective.own_data_models())
    return np.array([e if v is None else v for e, v in zip(estimated.tolist(), declared, strict=True)])


# --- the learner's step from public information -------------------------------------------------

def resolve_step(scenario, consortium, sizes: np.ndarray) -> StepSize:
    """The step of a run whose participants have ``sizes``: the given ρ, or "auto"'s."""
    lr, lam = scenario.learner, scenario.model.regularization
    if lr.iterations * lr.iterations * 2.0 * lam < 1e-300:  # T²σ underflows: no step is finite
        raise ScenarioError(scenario.source, "model.regularization", lam,
                            "so small that T²σ underflows: Algorithm 1's steps ρ/(T²σ) are not finite")
    if lr.rho != "auto":  # no proxy: its stability is the oracle step_curvature_max of the run
        check_steps(scenario, float(lr.rho), len(sizes))
        return StepSize(float(lr.rho), "given", None)
    N, share_max = len(sizes), float(np.max(sizes) / np.sum(sizes))
    info = public_info(step_scenario(scenario), consortium)
    curvature, h_min = info.owner_curvature, float(info.eigenvalues[0])
    rho = auto_rho(N, lr.iterations, lam, share_max, curvature, h_min=h_min, decay=lr.auto_decay,
                   fraction=lr.auto_stability)
    if not (np.isfinite(rho) and rho > 0):
        raise ScenarioError(scenario.source, "learner.rho", "auto",
                            f"derived a step of {rho!r} (curvature bound {curvature!r}, smallest "
                            f"eigenvalue {h_min!r}): give a number")
    check_steps(scenario, rho, N)
    stand_in = " (the logistic loss's curvature standing in for the hinge's)" if \
        scenario.model.loss == "hinge" else ""
    source = (f"auto: min({lr.auto_decay:g}·(N+1)Tσ/h_min, {lr.auto_stability:g} × stability limit) "
              f"from the {info.source}{stand_in}")
    return StepSize(rho, source, stability_number(rho, N, lr.iterations, lam, share_max, curvature=curvature))


def step_scenario(scenario: Scenario) -> Scenario:
    """The scenario whose proxy gives "auto"'s curvatures: itself, except that the hinge loss, which
    has no curvature (ℓ'' is 0 or undefined), borrows the logistic loss's on the same public records.

    Both are margin losses with |ℓ'| ≤ 1 and the logistic loss is the hinge's smooth counterpart
    (log(1 + e^{-u}) and max(0, 1 − u) agree in slope away from the kink), so the logistic curvature
    sets a step of the right scale: measured on the hinge scenarios of docs/how-to/defaults.md."""
    if scenario.model.loss != "hinge":
        return scenario
    return scenario.model_copy(update={"model": scenario.model.model_copy(update={"loss": "logistic"})})


def check_steps(scenario, rho: float, owners: int) -> None:
    """Refuse a ρ whose owner step Nρ/(T²σ) is not a finite positive number (T²σ itself is checked
    first, so what is left to blame is ρ)."""
    lr = scenario.learner
    step = owners * rho / (lr.iterations * lr.iterations * 2.0 * scenario.model.regularization)
    if not (np.isfinite(step) and step > 0):
        raise ScenarioError(scenario.source, "learner.rho", rho,
                            f"makes the owners' step Nρ/(T²σ) = {step!r}, not a finite positive number")
