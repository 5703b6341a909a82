"""A whole run, stage by stage: scenario → data → (market) → simulation → results.

Each stage is a function that can be used alone from Python; :func:`execute` chains them and
:mod:`dpmarket.results` writes what they produced. Called, the module is the notebook API's
``dpmarket.run(scenario, seed, overrides, out)`` (:func:`dpmarket.api.run`; see dpmarket/entry.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmarket import api, entry
from dpmarket import rng as streams
from dpmarket.data import Consortium, build_consortium
from dpmarket.data.magnitudes import check_curvature, check_optimum
from dpmarket.errors import MarketError, ScenarioError
from dpmarket.events import EventLog
from dpmarket.learner import AsyncLearner
from dpmarket.models import Objective, make_loss
from dpmarket.owners import DataOwner, answer_bound
from dpmarket.privacy import answer_cap
from dpmarket.progress import SILENT, Progress
from dpmarket.progress import of as progress_of
from dpmarket.roster import Roster
from dpmarket.scenario import OwnerSpec, Scenario
from dpmarket.sequence import OwnerSequence
from dpmarket.stepsize import StepSize, floor_law, resolve_step
from dpmarket.training import Training, make_learner, record_points, run_uniform

if TYPE_CHECKING:
    from dpmarket.market.stage import MarketStage
    from dpmarket.sim import NetworkRun


@dataclass
class RunResult:
    """Everything a run produced, ready to be written or inspected."""

    scenario: Scenario
    consortium: Consortium
    objective: Objective
    owners: list[DataOwner]
    training: Training
    stop_reason: str
    own_psi: np.ndarray  # ψ(θ_i*): each owner's own-data model scored on the whole f
    wall_seconds: float
    step_curvature: float | None = None
    network: NetworkRun | None = None  # the SimPy engine's report, None in the ideal network
    market: MarketStage | None = None  # the market's outcome, None without a [market] section
    step: StepSize | None = None  # ρ, where it came from, its public stability number

    @cached_property
    def roster(self) -> Roster:
        """The scenario's owners and the slots of those that trained (all of them without a market)."""
        return Roster(len(self.consortium.names), tuple(o.index for o in self.owners))

    @property
    def psi_final(self) -> float:
        """ψ of the published model at the end of the run."""
        return self.training.metrics.psi[-1]

    @cached_property
    def psi_zero(self) -> float:
        """ψ of the untrained model θ = 0 on the whole consortium's f: the honest yardstick, since
        a private model is only worth training where its ψ is below this."""
        return self.objective.psi(np.zeros(self.objective.p))

    @cached_property
    def floor_predicted(self) -> float | None:
        """ψ_T the floor law predicts without noise for this run's N, T and ρ — an oracle
        diagnostic like ψ (it reads f's Hessian and θ*); None for the hinge loss."""
        if self.step is None or self.objective.loss.name == "hinge" or not is_async(self):
            return None
        from dpmarket.data.proxy import floor_terms  # deferred: only written runs need it

        h, w = floor_terms(self.objective)
        lr = self.scenario.learner
        return floor_law(self.step.rho, len(self.owners), lr.iterations, self.objective.lam, h, w)

    @cached_property
    def clipped_share(self) -> float | None:
        """Share of the participants' per-example gradients above the clip bound at the final
        model: the bias clipping buys (an oracle diagnostic); None without clipping."""
        clip = self.owners[0].clip if self.owners else None
        if clip is None:
            return None
        theta = self.training.learner.model
        count = sum(o.loss.clipped_count(theta, o.data, clip, o.norm) for o in self.owners)
        return count / sum(o.data.n for o in self.owners)


def sensitivity(scenario: Scenario, consortium: Consortium) -> float:
    """Ξ in the norm of the scenario's mechanism (L1 for Laplace, L2 for Gaussian): the clipping
    bound, or the bound derived from the declared data domain (design §3).

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
                  epsilon: float) -> None:
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
               answers: int, xi: float, clip: float | None) -> DataOwner:
    """Owner i as a protocol participant; an (ε, δ) no noise level reaches is a ScenarioError naming
    the key of the budget (the calibration's search range is in dpmarket/accounting.py)."""
    p = scenario.privacy
    delta = scenario.owner_value(i, "delta")
    _check_budget(scenario, i, xi, answers, consortium.owners[i].n, epsilon)  # not sizes: O(N) per call
    try:
        return DataOwner(i, consortium.names[i], consortium.owners[i], objective.loss, epsilon, answers,
                         xi, streams.stream(scenario.seed, "noise", i), clip, p.mechanism, p.accountant,
                         delta)
    except ValueError as exc:  # accounting.CalibrationError: deferred import, so match its base
        if type(exc).__name__ != "CalibrationError":
            raise
        key = _owner_key(scenario, i, "epsilon")
        where = f"δ from {_owner_key(scenario, i, 'delta')}, m = {answers} from privacy.split"
        raise ScenarioError(scenario.source, key, epsilon, f"{exc} ({where})") from None


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
        owners.append(make_owner(scenario, consortium, objective, i, eps, cap, xi, clip))
    return owners


@dataclass(frozen=True)
class Prepared:
    """The data stage of a scenario, reusable by runs that differ only outside ``[data]`` and
    ``[model]`` (replications share it: same records, θ*, own-data baselines)."""

    consortium: Consortium
    objective: Objective
    own_psi: np.ndarray


def prepare(scenario: Scenario, progress: Progress = SILENT) -> Prepared:
    """Build the owners' data, the objective with its θ*, and the own-data ψ(θ_i*).

    ``progress`` hears of each phase (θ* and the N own-data solves take seconds for the hinge loss).
    """
    with progress.phase("building the owners' data"):
        consortium = build_consortium(scenario)
    m = scenario.model
    objective = Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
    check_curvature(scenario, consortium)  # θ* solvable in floating point
    with progress.phase(f"solving θ* ({m.loss} loss)", unit="iterations") as step:
        objective.optimum(step.update)
    check_optimum(scenario, consortium, objective)  # ψ = f/f* − 1 finite over Θ
    with progress.phase("own-data models θ_i*", total=len(consortium.owners), unit="owner") as step:
        own = objective.own_data_models(step.update)
    return Prepared(consortium, objective, objective.psis(own))


@dataclass
class Trained:
    """What training the participants produced (one pass of the simulation)."""

    owners: list[DataOwner]
    training: Training
    network: NetworkRun | None
    curvature: float | None
    step: StepSize


def train(scenario: Scenario, consortium: Consortium, objective: Objective,
          members: np.ndarray | None = None, epsilons: np.ndarray | None = None,
          events_path: Path | None = None, progress: bool | Progress = False) -> Trained:
    """Train with the owners in ``members`` (default all) at ``epsilons``; ψ against the whole f.

    Algorithm 1's N and n are the members'; the published model is scored on everyone's
    data (``objective``), so runs with different participants are comparable. ``progress``
    (True: a bar on a terminal) counts the updates.
    """
    owners = build_owners(scenario, consortium, objective, members, epsilons)
    lr, m = scenario.learner, scenario.model
    sizes = np.array([o.data.n for o in owners], dtype=np.int64)
    step = resolve_step(scenario, consortium, sizes)
    learner = make_learner(lr.algorithm, sizes, objective.p, lr.iterations, step.rho,
                           m.regularization, m.theta_max, lr.theta_l_step, lr.weighting)
    ids = [o.index for o in owners]
    view = member_view(scenario, ids, consortium.names)
    renumber = ids if view is not scenario else None
    bar = progress_of(progress).phase("training", total=lr.iterations, unit="update")
    with EventLog(events_path, renumber) as log, bar as bar:
        sequence = OwnerSequence(ids, len(consortium.names), lr.iterations)
        training = Training(learner, owners, objective, log,
                            record_points(lr.iterations, scenario.output.metric_points), bar, sequence)
        network = simulate(view, training, [o.name for o in owners])
    curvature = step_curvature(learner, objective, owners) if isinstance(learner, AsyncLearner) else None
    return Trained(owners, training, network, curvature, step)


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


def execute(scenario: Scenario, events_path: Path | None = None,
            on_data: Callable[[Consortium], None] | None = None, progress: bool | Progress = False,
            prepared: Prepared | None = None, market: MarketStage | None = None) -> RunResult:
    """Run ``scenario`` end to end, streaming events to ``events_path`` (or nowhere).

    ``on_data`` is called once the owners' data exist, before training (results use it to
    start drawing the topology while the simulation runs). ``progress`` shows a bar with an
    ETA on stderr when stderr is a terminal. With a [market] section the market runs first
    and only the owners that take part train, at the ε they sold. ``prepared`` (from
    :func:`prepare` on a scenario with the same data and model) skips the data stage:
    experiments reuse it across replications. ``market`` (settled on the same owners by
    :func:`~dpmarket.market.stage.settle_market`) skips the market: the replications of an
    experiment train on one negotiated deal.
    """
    start, progress = time.perf_counter(), progress_of(progress)
    prepared = prepare(scenario, progress) if prepared is None else prepared
    consortium, objective = prepared.consortium, prepared.objective
    if on_data is not None:
        on_data(consortium)
    members = epsilons = None
    if scenario.market is not None:
        if market is None:
            from dpmarket.market.stage import settle_market  # deferred: only market runs need it

            market = settle_market(scenario, prepared, progress=progress)
        members, epsilons = market.outcome.members, market.outcome.epsilon
    run = train(scenario, consortium, objective, members, epsilons, events_path, progress)
    reason = run.network.stop_reason if run.network else run.training.stop_reason
    return RunResult(scenario, consortium, objective, run.owners, run.training, reason,
                     prepared.own_psi, time.perf_counter() - start, run.curvature, run.network, market,
                     run.step)


def simulate(scenario: Scenario, training: Training, names: list[str]) -> NetworkRun | None:
    """Decide who talks when: the ideal network's superposed clocks, or the SimPy engine."""
    if scenario.network.mode != "ideal":
        from dpmarket.sim import run_network  # deferred: SimPy is needed only here

        return run_network(scenario, training, names)
    training.stop_reason = run_uniform(
        training, scenario.learner.iterations, streams.stream(scenario.seed, "selection"),
        streams.stream(scenario.seed, "clocks"), ideal_rates(scenario, len(names)))
    return None


def ideal_rates(scenario: Scenario, owners: int) -> np.ndarray | None:
    """The clock rates of the ideal network's ``owners`` participants (numbered as in ``scenario``,
    a member view), or None when they are all equal (the ticking owner is then one integer draw)."""
    rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(owners)])
    return None if np.all(rates == rates[0]) else rates


def step_curvature(learner: AsyncLearner, objective: Objective,
                   owners: list[DataOwner] | None = None) -> float | None:
    """max_i of owner i's step times the curvature of its term: above 2, Algorithm 1 oscillates.

    Owner i's copy moves by a_i (∇g/(2N) + (n_i/n) Q_i) with a_i = Nρ/(T²σ); along the
    steepest direction of its data term that is a gradient step of length
    a_i (λ/N + (n_i/n) L_i), with L_i the largest eigenvalue of its Hessian, and a gradient step
    longer than 2/curvature diverges. Heavy-tailed sizes make the largest owners the first to
    cross that line. An oracle diagnostic (it reads the data), like ψ; None for the hinge loss.
    """
    scale = {"squared": 2.0, "logistic": 0.25}.get(objective.loss.name)
    if scale is None:
        return None
    worst = 0.0
    datas = objective.owners if owners is None else [o.data for o in owners]
    for i, data in enumerate(datas):
        curvature = scale * np.linalg.eigvalsh(data.stats.A)[-1] / data.n
        step = learner.step_owner * (objective.lam / learner.N + learner.share[i] * curvature)
        worst = max(worst, step)
    return float(worst)


def is_async(result: RunResult) -> bool:
    """Whether the run used the asynchronous learner (one owner per update)."""
    return isinstance(result.training.learner, AsyncLearner)


entry.make_callable(__name__, api.run)  # dpmarket.run(...) is the notebook API's run
