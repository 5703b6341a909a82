"""An empirical privacy audit of a scenario's protocol as configured (``dpmarket audit``).

For one owner i, two neighbouring datasets differ in one of its records (replace-one, n_i unchanged:
the relation the guarantee is stated for): its last record is replaced by a canary pair chosen to
move its answers as far as the declared domain allows — a feature vector z of the domain, once with
the label +Y (world 1) and once with −Y (world 0) (±1 for classification); z is the domain's corner
(every feature at +X, the intercept's 1) or a single coordinate (X·e_1, or the intercept alone),
whichever moves the answer at θ = 0 furthest in L2 (:func:`worst_case_canary`: a clipped gradient moves
it by 2Ξ whatever z, and concentrated on one coordinate that is the worst case for an L1 sensitivity;
unclipped, the corner moves every coordinate). The protocol runs many times on each (the scenario's
owners, learner, network, caps and noise; the batched replay of :mod:`dpmarket.runs.replications`,
every run on its own seed), and an adversary scores each run from what the learner sees:

- ``answers``: every answer of owner i with its query point. Knowing every other record, the adversary
  computes owner i's exact answer under either world at each query, and scores the run by the log
  likelihood ratio of its answers (Laplace: Σ ‖a − μ₀‖₁ − ‖a − μ₁‖₁; Gaussian: Σ ‖a − μ₀‖² − ‖a − μ₁‖²,
  each up to the noise scale, a positive factor): the most powerful test of the two worlds given the
  transcript (Neyman–Pearson; the rest of the transcript has the same law in both worlds);
- ``model``: only the published model θ_L: Fisher's linear discriminant fitted on half of the runs.

Each view's threshold is chosen on the first half of each world's runs and its error rates counted on
the second half; :mod:`dpmarket.privacy.auditing` turns them into an ε lower bound with exact
(Clopper–Pearson) confidence, compared with the ε the owner claims. With two views the confidence is
split between them (Bonferroni), so the audit's false-alarm rate stays at most 1 − confidence.

What the runs could detect: the answers adversary also scores every run as if the owner answered with
its claimed mechanism and noise divided by each leak factor of :data:`dpmarket.privacy.auditing.LEAKS`
(the exact answer of the run's world at each of its query points, plus fresh noise of the claimed law
divided by the factor), and the same test on these scores finds the least factor at which it proves
more than the claim; the ε an owner with that noise would leak (through the accountant) is the
detectable ε. The verdict is ``fail`` when the bound exceeds the claim, ``pass``
when it does not and the detectable ε is within :data:`~dpmarket.privacy.auditing.PASS_FACTOR` of the
claim, and ``inconclusive`` otherwise (also when only the published model is audited: its power is not
measured).

``method = "one-run"`` is the audit by one run (Steinke, Nasr & Jagielski 2023): one canary per
feature (z = X·e_j, so canary j moves only coordinate j of the answers), each included (label +Y) or
not (−Y) with probability ½, in each of the runs (by default one); the adversary guesses each
inclusion from the sign of coordinate j's likelihood ratio. With p features a run yields p guesses
instead of one bit per run of each world: cheaper where runs are expensive, weaker per guess.

An audit reads the owners' private records (it builds the worlds from them): it is a test of the
implementation, never part of the protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpmarket.data import Consortium, build_consortium
from dpmarket.data.consortium import keeps_records
from dpmarket.errors import AuditError
from dpmarket.learning.objective import Loss, Objective, OwnerData, make_loss
from dpmarket.privacy import accounting, auditing
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.mechanisms import rounding_margin
from dpmarket.privacy.owners import DataOwner, project
from dpmarket.runs.replications import run_cell
from dpmarket.scenario.schema import Scenario
from dpmarket.system import counts
from dpmarket.system.progress import SILENT, Progress

VIEWS = ("answers", "model")
METHODS = ("worlds", "one-run")
AUDIT_KEY = 0x61756474  # "audt": mixed into the scenario's seed to derive the audit's run seeds
LEAK_KEY = 0x6C65616B  # "leak": and, with it, the streams of the leakier owners' noise
GROUP_VALUES = 1 << 22  # query-by-record products the adversary holds at once
# What each run holds until the audit ends: its seed (a Python int in a list), and per world the
# adversary's score and count of answers seen and the final model (p floats); one run's canary bits
SEED_BYTES, SCORE_BYTES, FLOAT = 40, 16, 8


@dataclass(frozen=True)
class Canary:
    """The record that differs between the two worlds: design vector z, label in world 1 and world 0."""

    z: np.ndarray
    label_in: float
    label_out: float

    def describe(self) -> str:
        return (f"z = {_vector(self.z)} with y = {self.label_in:g} (world 1) or {self.label_out:g} "
                "(world 0), in place of the owner's last record")


@dataclass(frozen=True)
class ViewAudit:
    """One adversary's audit: every run's score in each world, the runs its threshold was chosen on
    (the first ``calibration`` of each world) and the error rates counted on the others."""

    view: str
    scores: tuple[np.ndarray, np.ndarray]
    calibration: int
    rates: auditing.ErrorRates

    def evaluated(self) -> tuple[np.ndarray, np.ndarray]:
        """The scores the rates were counted on (world 0, world 1)."""
        return self.scores[0][self.calibration:], self.scores[1][self.calibration:]

    @property
    def epsilon_lower(self) -> float:
        return self.rates.epsilon_lower


@dataclass(frozen=True)
class OneRunAudit:
    """The audit by one run: canaries, guesses, correct guesses and the ε they prove."""

    view: str
    canaries: int
    guesses: int
    correct: int
    level: float
    delta: float
    epsilon_lower: float


@dataclass
class AuditResult:
    """What an audit found for one owner: its claim, the runs, each adversary's bound, the verdict."""

    scenario: Scenario
    owner: int
    name: str
    epsilon: float  # the owner's claimed ε (its budget, or what it sold in a market)
    delta: float  # the claimed δ (0 for pure ε-DP answers)
    mechanism: str
    accountant: str  # the accountant whose proof the owner's noise rests on
    answers_allowed: int  # m_i
    noise_scale: float
    sensitivity: float
    method: str
    runs: int  # per world (worlds), or in all (one run)
    confidence: float
    canary: str
    audits: list[ViewAudit | OneRunAudit] = field(default_factory=list)
    answers_seen: float = 0.0  # the owner's answers per run, on average (what the adversary saw)
    leak_detectable: float | None = None  # the least leak factor whose replay proved a violation
    epsilon_detectable: float = math.inf  # what an owner with that noise leaks (inf: none on the grid)
    power_measured: bool = False  # whether the answers adversary's replays measured the detectable ε
    epsilon_beyond: float = math.inf  # what an owner leaks at the grid's largest factor (none detected)

    @property
    def epsilon_lower(self) -> float:
        """The largest ε lower bound over the adversaries."""
        return max((a.epsilon_lower for a in self.audits), default=0.0)

    @property
    def verdict(self) -> str:
        """``fail`` (a violation proved), ``pass`` (none, and these runs detect one of at most
        PASS_FACTOR times the claim) or ``inconclusive`` (none, but they could not have shown one)."""
        if self.epsilon_lower > self.epsilon:
            return "fail"
        if self.power_measured and self.epsilon_detectable <= auditing.PASS_FACTOR * self.epsilon:
            return "pass"
        return "inconclusive"

    @property
    def passed(self) -> bool:
        """Whether the verdict is a pass (an inconclusive audit is not)."""
        return self.verdict == "pass"

    @property
    def conclusion(self) -> str:
        """The verdict in a sentence: what was proved, and what these runs could have detected."""
        if self.verdict == "fail":
            return (f"FAIL: with {self.confidence:.0%} confidence ε ≥ {self.epsilon_lower:.4g}, above the "
                    f"claimed ε = {self.epsilon:g}")
        proved = f"ε ≥ {self.epsilon_lower:.4g} proved, not above the claimed ε = {self.epsilon:g}"
        factor = f"{auditing.PASS_FACTOR:g} × the claim"
        if self.verdict == "pass":
            return (f"PASS: {proved}, and these runs catch a violation from ε = "
                    f"{self.epsilon_detectable:.3g} (within {factor})")
        if not self.power_measured:
            return (f"INCONCLUSIVE: {proved}; what the published model alone could detect is not measured "
                    "(--view answers or both measures it)")
        return (f"INCONCLUSIVE: {proved}, but these runs catch a violation only from {self.detectable}, "
                f"more than {factor}: more runs, or fewer answers per run, would show more")

    @property
    def detectable(self) -> str:
        """The detectable ε in words: a value, or beyond what the grid of leak factors reaches."""
        if not self.power_measured:
            return "not measured"
        if self.leak_detectable is None:
            return f"ε > {self.epsilon_beyond:.3g} (noise cut over {auditing.LEAKS[-1]:g} times)"
        return f"ε = {self.epsilon_detectable:.3g} (noise cut {self.leak_detectable:.3g} times)"

    def rows(self) -> list[dict]:
        """The audit's table: one row per adversary."""
        out = []
        for a in self.audits:
            row = {"view": a.view, "method": self.method, "runs": self.runs}
            if isinstance(a, ViewAudit):
                r = a.rates
                row.update({"threshold": r.threshold, "false_positives": r.false_positives,
                            "negatives": r.negatives, "false_negatives": r.false_negatives,
                            "positives": r.positives, "fpr": r.false_positive_rate,
                            "fpr_upper": r.false_positive_upper, "fnr": r.false_negative_rate,
                            "fnr_upper": r.false_negative_upper, "epsilon_estimate": r.epsilon_estimate})
            else:
                row.update({"canaries": a.canaries, "guesses": a.guesses, "correct": a.correct})
            row.update({"epsilon_lower": a.epsilon_lower, "confidence": 1.0 - _level_of(a),
                        "epsilon_claimed": self.epsilon, "delta": self.delta,
                        "exceeds": bool(a.epsilon_lower > self.epsilon),
                        "epsilon_detectable": (self.epsilon_detectable if a.view == "answers"
                                               and self.power_measured else None)})
            out.append(row)
        return out


def _level_of(audit: ViewAudit | OneRunAudit) -> float:
    return audit.rates.level if isinstance(audit, ViewAudit) else audit.level


def _vector(z: np.ndarray) -> str:
    values = ", ".join(f"{v:g}" for v in z[:6])
    return f"({values}{', …' if len(z) > 6 else ''})"


# --- the adversary -------------------------------------------------------------------------------

def exact_answers(data: OwnerData, loss: Loss, thetas: np.ndarray, clip: float | None, norm: str,
                  *, theta_max: float) -> np.ndarray:
    """Row r: the owner's exact answer (no noise) at ``thetas[r]`` for the records ``data``, as
    :meth:`DataOwner.exact_answer` computes it (projected onto Θ, clipped per example if it clips)."""
    thetas = project(np.atleast_2d(thetas), theta_max)
    if clip is None and loss.name == "squared":
        s = data.stats
        return (2.0 / data.n) * (thetas @ s.A - s.b)  # A symmetric: θA = (Aθ)ᵀ
    return loss.mean_grads(thetas, data, clip, norm)  # the record kernel, as the owner answers


@dataclass
class Leaks:
    """Answers of an owner leakier than it claims, for :class:`AnswerAdversary`'s replays: the claimed
    ``mechanism`` with noise ``scale`` divided by each factor of :data:`~dpmarket.privacy.auditing.LEAKS`,
    around the exact answer of ``world`` (0 or 1), drawn from ``stream``."""

    world: int
    mechanism: str
    scale: float
    stream: np.random.Generator

    def answers(self, mu0: np.ndarray, mu1: np.ndarray) -> np.ndarray:
        """(factors, answers, p): the exact answers of the world plus one draw of the claimed noise per
        answer, divided by each factor (common to all factors, so that they differ only in the leak)."""
        exact = mu1 if self.world else mu0
        draw = (self.stream.laplace(size=exact.shape) if self.mechanism == "laplace"
                else self.stream.standard_normal(exact.shape))
        return exact + (self.scale / auditing.LEAKS)[:, None, None] * draw


def leakier(scenario: Scenario, claim: Claim, world: int, *key: int) -> Leaks:
    """The :class:`Leaks` of the owner's ``claim`` in ``world``, on a stream of the audit's own, derived
    from the scenario's seed and ``key`` (none of the runs' streams)."""
    seed = np.random.SeedSequence((int(scenario.seed), AUDIT_KEY, LEAK_KEY, world, *key))
    return Leaks(world, claim.guarantee.mechanism, claim.scale, np.random.default_rng(seed))


@dataclass(frozen=True)
class Claim:
    """What the audited owner promises, rebuilt from the scenario and public information rather than
    read from the owner (whose noise is what the audit tests): its guarantee, its answers m_i, the
    noise multiplier z a valid accountant proves for them, and the noise scale z·2Ξ/n_i·(1 + κ)."""

    guarantee: Guarantee
    answers: int
    multiplier: float
    scale: float

    def leaked(self, factor: float) -> float:
        """The ε (at the claimed δ) of m_i answers whose noise is divided by ``factor``."""
        return accounting.proved_epsilon(self.guarantee, self.multiplier / factor, self.answers)


def claim_of(scenario: Scenario, consortium: Consortium, owner: DataOwner) -> Claim:
    """The :class:`Claim` of ``owner``: the scenario's Ξ (the cohort's: clip bound or declared domain),
    the owner's n_i, its guarantee as the scenario states it and its answer cap."""
    from dpmarket.privacy.cohort import sensitivity

    n, dim = owner.data.n, owner.data.stats.A.shape[0]
    one_answer = 2.0 * sensitivity(scenario, consortium) / n * (1.0 + rounding_margin(n, dim))  # Δ_i
    z = accounting.noise_multiplier(owner.requested, owner.answers_allowed)
    return Claim(owner.requested, owner.answers_allowed, z, z * one_answer)


class AnswerAdversary:
    """The adversary who sees every answer of one owner (an :class:`~dpmarket.replay.kernel.Observer`):
    each run's log likelihood ratio of world 1 against world 0, summed over the owner's answers.

    Given a :class:`Leaks` (the world its runs are in, the claimed noise scale, the factors and a
    stream), it also scores each run as if the owner answered with the claimed mechanism and its noise
    divided by each factor (``leaky``, one column per factor): the exact answer of the run's world at
    each query point plus fresh noise of the claimed law (one draw per answer, divided by each factor),
    the schedule and the query points held as they were. Not the owner's own noise: what these runs
    could detect must not depend on whether the owner really adds the noise it claims."""

    def __init__(self, owner: int, worlds: tuple[OwnerData, OwnerData], loss: Loss, clip: float | None,
                 norm: str, *, theta_max: float, mechanism: str, runs: int,
                 coordinate: int | None = None, leaks: Leaks | None = None) -> None:
        self.owner, self.worlds, self.loss, self.clip, self.norm = owner, worlds, loss, clip, norm
        self.coordinate = coordinate  # one coordinate of the answers only (a canary's, one-run audits)
        self.theta_max, self.laplace = theta_max, mechanism == "laplace"
        self.scores, self.seen = np.zeros(runs), np.zeros(runs, dtype=np.int64)
        self.leaks = leaks
        self.leaky = np.zeros((runs, 0 if leaks is None else len(auditing.LEAKS)))
        self.slot, self.offset = -1, 0
        self.largest = 0.0  # the largest |shift| summed over the answers: the scores' scale

    def attach(self, owners: list[DataOwner]) -> None:
        self.slot = [o.index for o in owners].index(self.owner)

    def exchanges(self, rows, slots, query, answer) -> None:
        mine = np.flatnonzero(slots == self.slot)
        if not len(mine):
            return
        runs = mine if rows is None else np.asarray(rows)[mine]
        self._score(runs + self.offset, query[mine], answer[mine])

    def rounds(self, rows, query, answer) -> None:
        runs = np.arange(len(query)) if rows is None else np.asarray(rows)
        self._score(runs + self.offset, query, answer[:, self.slot])

    def _score(self, runs: np.ndarray, query: np.ndarray, answer: np.ndarray) -> None:
        mu0, mu1 = (exact_answers(d, self.loss, query, self.clip, self.norm, theta_max=self.theta_max)
                    for d in self.worlds)
        score = self.ratio(answer, mu0, mu1)
        np.add.at(self.scores, runs, score)
        np.add.at(self.seen, runs, 1)
        self.largest = max(self.largest, float(np.max(np.abs(mu1 - mu0).sum(axis=-1))))
        if self.leaks is not None:
            leakier = self.leaks.answers(mu0, mu1)  # (factors, answers, p)
            np.add.at(self.leaky, runs, self.ratio(leakier, mu0, mu1).T)

    def ratio(self, answer: np.ndarray, mu0: np.ndarray, mu1: np.ndarray) -> np.ndarray:
        """Each answer's log likelihood ratio of world 1 against world 0, up to the noise scale (answers
        along the last axis but one; any axes before)."""
        if self.coordinate is not None:
            j = self.coordinate
            answer, mu0, mu1 = answer[..., j:j + 1], mu0[..., j:j + 1], mu1[..., j:j + 1]
        if self.laplace:
            return np.abs(answer - mu0).sum(axis=-1) - np.abs(answer - mu1).sum(axis=-1)
        return ((answer - mu0) ** 2).sum(axis=-1) - ((answer - mu1) ** 2).sum(axis=-1)


def discriminant(models0: np.ndarray, models1: np.ndarray) -> np.ndarray:
    """Fisher's linear discriminant w = (Σ + λI)⁻¹(m₁ − m₀) of two sets of models (pooled covariance,
    a ridge of 10⁻⁹ of its trace for a singular one)."""
    centred = np.vstack([models0 - models0.mean(axis=0), models1 - models1.mean(axis=0)])
    cov = centred.T @ centred / max(1, len(centred) - 2)
    ridge = 1e-9 * (np.trace(cov) + 1e-300)
    return np.linalg.solve(cov + ridge * np.eye(len(cov)), models1.mean(axis=0) - models0.mean(axis=0))


# --- the two worlds ------------------------------------------------------------------------------

def worst_case_canary(scenario: Scenario, consortium: Consortium, owner: DataOwner) -> Canary:
    """The pair of records, of the declared domain, that moves ``owner``'s answer at θ = 0 furthest in L2:
    a feature vector z labelled +Y and −Y, z the domain's corner (every feature at X, the intercept's 1),
    one feature at X (with the intercept's 1), or the intercept alone (every feature 0).

    Unclipped, the corner moves every coordinate by the most (squared loss: 4Y·z; hinge: 2z while
    |θᵀz| < 1). A clipped per-example gradient moves the answer by 2Ξ in the mechanism's norm whatever
    z: spread over p coordinates its L2 norm is 2Ξ/√p (L1 clipping), on one coordinate 2Ξ — the worst
    case for an L1 sensitivity, which the test of many noisy answers tells apart best (its power grows
    with the shift's L2 norm over the noise). Ties go to the corner."""
    d, m = scenario.data, scenario.model
    p = consortium.owners[0].stats.A.shape[0] - (1 if m.intercept else 0)
    label = consortium.y_max
    candidates = [np.full(p, d.feature_bound), np.where(np.arange(p) == 0, d.feature_bound, 0.0)]
    if m.intercept:
        candidates = [np.append(z, 1.0) for z in [*candidates, np.zeros(p)]]
    shifts = [float(np.linalg.norm(canary_shift(z, label, owner, m.intercept))) for z in candidates]
    return Canary(candidates[int(np.argmax(shifts))], label, -label)


def canary_shift(z: np.ndarray, label: float, owner: DataOwner, intercept: bool) -> np.ndarray:
    """(z, +label)'s per-example gradient less (z, −label)'s at θ = 0, as ``owner`` answers (clipped if
    it clips): n_i times what the canary pair moves its answer by there."""
    features = z[:-1] if intercept else z
    exact = []
    for y in (label, -label):
        block = np.vstack([features[:, None], [[1.0]], [[y]]])
        one = OwnerData.from_block(block, intercept, keep_records=True)
        exact.append(exact_answers(one, owner.loss, np.zeros((1, len(z))), owner.clip, owner.norm,
                                   theta_max=owner.theta_max)[0])
    return exact[0] - exact[1]


def with_record(data: OwnerData, z: np.ndarray, label: float, intercept: bool, row: int = -1) -> OwnerData:
    """``data`` with its record ``row`` replaced by (z, label): a replace-one neighbour (n unchanged),
    built as the owner's own records are (a record block, dpmarket.learning.objective.OwnerData)."""
    Z, y = data.records()
    Z, y = Z.copy(), y.copy()
    Z[row], y[row] = z, label
    features = Z[:, :-1] if intercept else Z
    block = np.vstack([features.T, np.ones(len(y)), y])
    return OwnerData.from_block(block, intercept, keep_records=True)


def with_records(consortium: Consortium, index: int, data: OwnerData) -> Consortium:
    """``consortium`` with owner ``index``'s data replaced."""
    owners = list(consortium.owners)
    owners[index] = data
    return Consortium(consortium.names, owners, consortium.z_l1, consortium.y_max, consortium.report,
                      consortium.holdout)


def audit_seeds(seed: int, count: int) -> list[int]:
    """``count`` independent run seeds derived from the scenario's seed (none of a replicated run's)."""
    children = np.random.SeedSequence((int(seed), AUDIT_KEY)).spawn(count)
    return [int(c.generate_state(1, np.uint64)[0] >> np.uint64(1)) for c in children]


@dataclass
class Setting:
    """What both worlds share: the data with the target's records kept, the objective, the market's
    participants and budgets, and the target owner."""

    consortium: Consortium
    objective: Objective
    members: np.ndarray | None
    epsilons: np.ndarray | None
    target: int


def setting(scenario: Scenario, owner: int | None, progress: Progress = SILENT) -> Setting:
    """Build the owners' data (the target's records kept), settle the market if there is one, and pick
    the target: ``owner``, or the first participant."""
    if scenario.market is not None and scenario.market.mode == "dynamic":
        raise AuditError(f"{scenario.name}: market.mode = 'dynamic': the market in time decides who answers "
                         "from the model's progress, which the batched replay cannot follow; audit the "
                         "static market (--set market.mode='\"static\"')")
    with progress.phase("building the owners' data"):
        full = build_consortium(scenario, keep_records=True)
    members = epsilons = None
    if scenario.market is not None:
        from dpmarket.data.problem import Prepared  # deferred: only a market needs the data stage
        from dpmarket.runs.pilots import market_stage

        objective = _objective(scenario, full)
        prepared = Prepared(full, objective, np.full(len(full.owners), np.nan))
        outcome = market_stage(scenario, prepared, progress=progress).outcome
        members, epsilons = np.flatnonzero(outcome.participates), outcome.epsilon
    taking_part = list(range(len(full.owners))) if members is None else [int(i) for i in members]
    target = taking_part[0] if owner is None else int(owner)
    if target not in taking_part:
        why = "it declined the market" if 0 <= target < len(full.owners) else f"there are {len(full.owners)}"
        raise AuditError(f"{scenario.name}: --owner {target}: no such participant ({why}); participants: "
                         f"{_listed(taking_part)}")
    if not keeps_records(scenario):  # the others answer from their statistics, as in a run
        full = Consortium(full.names, [o if i == target else OwnerData(o.n, o.stats)
                                       for i, o in enumerate(full.owners)],
                          full.z_l1, full.y_max, full.report, full.holdout)
    return Setting(full, _objective(scenario, full), members, epsilons, target)


def _objective(scenario: Scenario, consortium: Consortium) -> Objective:
    m = scenario.model
    return Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)


def _listed(indices: list[int]) -> str:
    return ", ".join(map(str, indices[:10])) + (", …" if len(indices) > 10 else "")


# --- the audit -----------------------------------------------------------------------------------

def audit(scenario: Scenario, owner: int | None = None, runs: int = 2000, view: str = "both",
          method: str = "worlds", *, confidence: float = 0.95, progress: Progress = SILENT) -> AuditResult:
    """Audit owner ``owner`` (default: the first participant) of ``scenario``: ``runs`` runs per world
    (``method = "worlds"``) or ``runs`` runs with one canary per feature (``"one-run"``), the
    adversaries of ``view`` (answers, model or both), bounds at ``confidence``."""
    _check(runs, view, method, confidence)
    too_many = runs_refusal(scenario, runs, method)
    if too_many is not None:
        raise AuditError(f"--runs {runs}: {too_many}")
    found = setting(scenario, owner, progress)
    if method == "one-run":
        return _one_run(scenario, found, runs, confidence, progress)
    return _worlds(scenario, found, runs, VIEWS if view == "both" else (view,), confidence, progress=progress)


def _check(runs: int, view: str, method: str, confidence: float) -> None:
    if view not in (*VIEWS, "both"):
        raise AuditError(f"--view {view!r}: expected answers, model or both")
    if method not in METHODS:
        raise AuditError(f"--method {method!r}: expected {' or '.join(METHODS)}")
    if not 0.0 < confidence < 1.0:
        raise AuditError(f"--confidence {confidence!r}: expected a number between 0 and 1")
    least = 1 if method == "one-run" else 4
    if runs < least:
        raise AuditError(f"--runs {runs}: at least {least} (half of each world's runs choose the threshold, "
                         "the other half count the errors)")


def runs_refusal(scenario: Scenario, runs: int, method: str) -> str | None:
    """Why ``runs`` audit runs of ``scenario`` cannot be made, before any is: more than numpy counts,
    or more memory than there is for what every run keeps until the end (its seed, and per world its
    score and final model; by one run, its seed and canary bits), or None."""
    p = scenario.data.features if scenario.data.source == "synthetic" else 1  # a table's: once read
    if method == "one-run":
        return counts.refusal(runs, SEED_BYTES + p * FLOAT, f"{runs:,} runs' seeds and {p} canary bits each")
    return counts.refusal(runs, 2 * (SEED_BYTES + SCORE_BYTES + p * FLOAT),
                          f"2 worlds x {runs:,} runs (each its seed, score and final model)")


def _worlds(scenario: Scenario, found: Setting, runs: int, views: tuple[str, ...], confidence: float,
            *, progress: Progress) -> AuditResult:
    """The two-world audit: ``runs`` runs of each world, every adversary of ``views`` scored, and what
    the answers adversary's runs could detect."""
    m, i = scenario.model, found.target
    probe = target_owner(scenario, found)
    claim = claim_of(scenario, found.consortium, probe)
    canary = worst_case_canary(scenario, found.consortium, probe)
    base = found.consortium.owners[i]
    worlds = tuple(with_record(base, canary.z, label, m.intercept)
                   for label in (canary.label_out, canary.label_in))
    seeds = audit_seeds(scenario.seed, 2 * runs)
    level = (1.0 - confidence) / len(views)
    adversaries, models = [], []
    for w, data in enumerate(worlds):
        adversary = AnswerAdversary(i, worlds, make_loss(m.loss), probe.clip, probe.norm,
                                    theta_max=m.theta_max, mechanism=probe.mechanism, runs=runs,
                                    leaks=leakier(scenario, claim, w) if "answers" in views else None)
        with progress.phase(f"world {w}: {runs:,} runs"):
            cell = run_cell(scenario, seeds[w * runs:(w + 1) * runs], with_records(found.consortium, i, data),
                            found.objective, found.members, epsilons=found.epsilons, series=False,
                            observer=adversary)
        adversaries.append(adversary)
        models.append(np.concatenate([g.final for g in cell.replayed]))
    result = _result(scenario, probe, "worlds", runs, confidence, canary=canary.describe())
    result.answers_seen = float(np.mean(np.concatenate([a.seen for a in adversaries])))
    half = runs // 2
    scale = score_scale(adversaries)
    for view in views:
        if view == "answers":
            pair = tuple(auditing.rounded(a.scores, scale) for a in adversaries)
        else:
            w = discriminant(models[0][:half], models[1][:half])
            pair = (models[0] @ w, models[1] @ w)
        rates = auditing.split_rates(pair[0], pair[1], half, level, result.delta)
        result.audits.append(ViewAudit(view, pair, half, rates))
    if "answers" in views:
        def proves(k: int) -> float:
            leaky = tuple(auditing.rounded(a.leaky[:, k], scale) for a in adversaries)
            return auditing.split_rates(leaky[0], leaky[1], half, level, result.delta).epsilon_lower

        detected(result, claim, auditing.first_detected(proves, result.epsilon))
    return result


def detected(result: AuditResult, claim: Claim, k: int | None) -> None:
    """Record in ``result`` what its runs could detect: the least leak factor (index ``k`` of
    :data:`~dpmarket.privacy.auditing.LEAKS`, None for none) at which they proved a violation, and the ε
    an owner of the claimed noise divided by that factor leaks."""
    result.power_measured = True
    if k is None:
        result.epsilon_beyond = claim.leaked(float(auditing.LEAKS[-1]))
        return
    result.leak_detectable = float(auditing.LEAKS[k])
    result.epsilon_detectable = claim.leaked(result.leak_detectable)


def target_owner(scenario: Scenario, found: Setting) -> DataOwner:
    """The target as a run builds it (its guarantee, m_i, noise, clip; the records are world 0's)."""
    from dpmarket.privacy.cohort import build_owners

    owners = build_owners(scenario, found.consortium, found.objective, found.members, found.epsilons)
    return next(o for o in owners if o.index == found.target)


def _result(scenario: Scenario, owner: DataOwner, method: str, runs: int, confidence: float,
            *, canary: str) -> AuditResult:
    """The audit's frame for ``owner``: its claim as it states it (pure ε-DP: δ = 0)."""
    g = owner.guarantee
    return AuditResult(scenario, owner.index, owner.name, g.epsilon, 0.0 if g.pure else g.delta, g.mechanism,
                       g.accountant, owner.answers_allowed, owner.scale, owner.sensitivity, method, runs,
                       confidence, canary)


# --- the audit by one run -------------------------------------------------------------------------

def _one_run(scenario: Scenario, found: Setting, runs: int, confidence: float,
             progress: Progress) -> AuditResult:
    """``runs`` runs, each with one canary per feature included or not at random: the adversary guesses
    each inclusion from the sign of its coordinate's likelihood ratio; the ε the correct guesses prove."""
    m, d, i = scenario.model, scenario.data, found.target
    base = found.consortium.owners[i]
    p = base.stats.A.shape[0] - (1 if m.intercept else 0)
    if base.n < p + 1:
        raise AuditError(f"{scenario.name}: owner {i} has {base.n} records: too few for {p} canaries")
    label = found.consortium.y_max
    bits = np.random.default_rng(audit_seeds(scenario.seed, 1)[0]).integers(0, 2, size=(runs, p))
    seeds = audit_seeds(scenario.seed + 1, runs)
    probe = target_owner(scenario, found)
    claim = claim_of(scenario, found.consortium, probe)
    loss = make_loss(m.loss)
    # Canary j moves coordinate j of the answers only (z = X·e_j): the adversary's two datasets for it
    # hold every other canary out, which coordinate j cannot tell from in.
    none = np.zeros(p, dtype=int)
    pairs = [tuple(_with_canaries(base, np.where(np.arange(p) == j, b, none), d.feature_bound, label,
                                  m.intercept) for b in (0, 1)) for j in range(p)]
    correct, leaky = 0, np.zeros(len(auditing.LEAKS), dtype=np.int64)
    patterns, where = np.unique(bits, axis=0, return_inverse=True)
    with progress.phase(f"one run: {runs:,} run(s) x {p} canaries", total=len(patterns),
                        unit="pattern") as bar:
        for k, pattern in enumerate(patterns):
            chosen = [seeds[r] for r in np.flatnonzero(np.ravel(where) == k)]
            guessers = [AnswerAdversary(i, pairs[j], loss, probe.clip, probe.norm, theta_max=m.theta_max,
                                        mechanism=probe.mechanism, runs=len(chosen), coordinate=j,
                                        leaks=leakier(scenario, claim, int(pattern[j]), k, j))
                        for j in range(p)]
            data = _with_canaries(base, pattern, d.feature_bound, label, m.intercept)
            run_cell(scenario, chosen, with_records(found.consortium, i, data), found.objective,
                     found.members, epsilons=found.epsilons, series=False, observer=Watchers(guessers))
            # on the scores' grid, as the two worlds' audit: a score that is 0 in exact arithmetic (equal
            # counts of ±Δ Laplace ratios) is ±10⁻¹⁶ by CPU, and would guess "in" on some machines only
            scale = score_scale(guessers)
            guesses = np.stack([(auditing.rounded(g.scores, scale) > 0).astype(int) for g in guessers],
                               axis=1)
            correct += int(np.sum(guesses == pattern[None, :]))
            for j, g in enumerate(guessers):  # the same guesses by an owner whose noise is cut
                leaky += np.sum((auditing.rounded(g.leaky, scale) > 0) == pattern[j], axis=0)
            bar.update(1)
    canaries = runs * p
    intercept = " (and the intercept 1)" if m.intercept else ""
    result = _result(scenario, probe, "one-run", runs, confidence,
                     canary=f"one per feature j: z = {d.feature_bound:g}·e_j{intercept}, y = {label:g} if "
                     f"included, {-label:g} if not, in place of the owner's last {p} records")
    level = 1.0 - confidence
    bound = auditing.one_run_epsilon(canaries, canaries, correct, result.delta, level)
    result.audits.append(OneRunAudit("answers", canaries, canaries, correct, level, result.delta, bound))

    def rejects(k: int) -> bool:  # the claim rejected: the bound these guesses prove exceeds it
        p_value = auditing.one_run_p_value(canaries, canaries, int(leaky[k]), result.epsilon, result.delta)
        return p_value < level

    detected(result, claim, next((k for k in range(len(leaky)) if rejects(k)), None))
    return result


def score_scale(adversaries: list[AnswerAdversary]) -> float:
    """The largest magnitude the adversaries' scores can reach: the largest shift one answer gives,
    times the most answers one run showed (the grid :func:`dpmarket.privacy.auditing.rounded` puts
    the scores on, so that scores equal in exact arithmetic are equal on every machine)."""
    return max(a.largest for a in adversaries) * max(1, max(int(a.seen.max()) for a in adversaries))


def _with_canaries(data: OwnerData, pattern: np.ndarray, bound: float, label: float,
                   intercept: bool) -> OwnerData:
    """``data`` with its last len(pattern) records replaced by the canaries, included (label) or not
    (−label)."""
    out, p = data, len(pattern)
    for j, bit in enumerate(pattern):
        z = np.zeros(p)
        z[j] = bound
        if intercept:
            z = np.append(z, 1.0)
        out = with_record(out, z, label if bit else -label, intercept, row=-(j + 1))
    return out


class Watchers:
    """Several observers of one replay, as one."""

    def __init__(self, observers: list[AnswerAdversary]) -> None:
        self.observers, self.slot, self._offset = observers, -1, 0

    @property
    def offset(self) -> int:
        return self._offset

    @offset.setter
    def offset(self, value: int) -> None:
        self._offset = value
        for o in self.observers:
            o.offset = value

    def attach(self, owners: list[DataOwner]) -> None:
        for o in self.observers:
            o.attach(owners)
        self.slot = self.observers[0].slot

    def exchanges(self, rows, slots, query, answer) -> None:
        for o in self.observers:
            o.exchanges(rows, slots, query, answer)

    def rounds(self, rows, query, answer) -> None:
        for o in self.observers:
            o.rounds(rows, query, answer)
