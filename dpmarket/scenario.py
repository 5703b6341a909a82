"""Scenario files: TOML in, a validated and fully resolved :class:`Scenario` out.

Every default lives in the pydantic schema below and nowhere else. Unknown keys, wrong types
and impossible values are rejected with a :class:`~dpmarket.errors.ScenarioError` naming the
file, the dotted key path and the offending value. ``--set dotted.key=value`` overrides are
applied to the raw table before validation, so they are checked exactly like file contents.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_serializer,
)

from dpmarket.errors import _MISSING, ScenarioError

PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    """Base of every table: unknown keys are errors, no silent coercion of strings to numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


class ParetoSizes(_Strict):
    """Heavy-tailed owner sizes: Pareto with scale ``minimum`` (the floor) and shape ``alpha``."""

    distribution: Literal["pareto"]
    alpha: PosFloat = 1.5
    minimum: PosInt = 10_000
    maximum: PosInt | None = None


class LognormalSizes(_Strict):
    """Owner sizes ``max(minimum, lognormal(log(median), sigma))``."""

    distribution: Literal["lognormal"]
    median: PosFloat = 20_000.0
    sigma: PosFloat = 1.0
    minimum: PosInt = 1
    maximum: PosInt | None = None


class UniformSizes(_Strict):
    """Owner sizes drawn uniformly from the integers ``minimum … maximum``."""

    distribution: Literal["uniform"]
    minimum: PosInt
    maximum: PosInt


SizeDistribution = Annotated[
    ParetoSizes | LognormalSizes | UniformSizes, Field(discriminator="distribution")
]

DATA_KINDS = ("length_of_stay", "interest_rate", "card_fraud")
CLASSIFICATION_KINDS = ("card_fraud",)


class Table(_Strict):
    """How a table of records becomes owners (``data.source = "table"``, dpmarket/data/table.py).

    Owners are the distinct values of ``partition`` (at least ``min_records`` rows each, the
    ``max_owners`` largest) or ``blocks`` contiguous blocks of rows. The last ``holdout`` rows
    are public: every constant applied by all owners (category codes, means, standard
    deviations, the PCA dictionary) is computed from them alone and they never enter an owner.
    """

    target: str
    numeric: list[str] = []
    categorical: list[str] = []
    encoding: Literal["codes", "onehot"] = "codes"
    partition: str | None = None
    blocks: PosInt | None = None
    min_records: PosInt = 1
    max_owners: PosInt | None = None
    small_owners: Literal["error", "drop"] = "error"
    missing: Literal["error", "drop"] = "error"
    label: Literal["identity", "log", "sign"] = "identity"
    positive: list[str] = []
    holdout: NonNegInt = 0
    standardize: bool = True
    spread: PosFloat = 3.0
    components: NonNegInt = 0


SYNTHETIC_ONLY = ("kind", "generator", "owners", "records", "features", "shift", "label_noise", "seed")
TABLE_ONLY = ("path", "table")


class Data(_Strict):
    """Where owners come from (synthetic generator or a table), and the declared bounds."""

    source: Literal["synthetic", "table"] = "synthetic"
    kind: Literal["length_of_stay", "interest_rate", "card_fraud"] = "interest_rate"
    generator: Literal["whitened", "correlated"] = "whitened"
    owners: PosInt = 3
    records: PosInt | list[PosInt] | SizeDistribution = 10_000
    features: PosInt = 10
    shift: NonNegFloat = 0.0
    label_noise: NonNegFloat | None = None
    feature_bound: PosFloat = 1.0
    label_bound: PosFloat = 3.0
    seed: Annotated[int, Field(ge=0)] | None = None
    path: str | None = None
    table: Table | None = None

    @model_serializer(mode="wrap")
    def _source_keys_only(self, handler) -> dict:
        """Resolved form without the generator's keys when the owners come from a table."""
        out = handler(self)
        return {k: v for k, v in out.items() if self.source == "synthetic" or k not in SYNTHETIC_ONLY}


class Model(_Strict):
    """The convex model: loss ℓ, regulariser g(θ) = λθᵀθ, box Θ = {‖θ‖∞ ≤ θmax}.

    No intercept by default: the papers' model is y = θᵀx on whitened features with centred
    labels, and a column of ones would make the Hessian badly conditioned.
    """

    loss: Literal["squared", "logistic", "hinge"] = "squared"
    regularization: PosFloat = 1e-5
    theta_max: PosFloat = 1.0
    intercept: bool = False


class Privacy(_Strict):
    """Owners' budgets and how each answer is made private.

    ``clip = "auto"`` takes the clip bound from public information: the ``clip_quantile`` of
    the per-example gradient norms at the optimum of the public proxy (dpmarket/data/proxy.py).
    ``mechanism`` is the noise (Laplace: L1 sensitivity; Gaussian: L2), ``accountant`` how an
    owner's answers compose to (ε_i, δ_i) (dpmarket/privacy.py): ``basic`` (Theorem 1's even
    split, pure ε-DP for Laplace), ``rdp`` or ``pld`` (Google's dp-accounting).
    """

    epsilon: PosFloat = 1.0
    mechanism: Literal["laplace", "gaussian"] = "laplace"
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
    accountant: Literal["basic", "rdp", "pld"] = "basic"
    split: Literal["horizon", "capped"] = "horizon"
    cap: PosInt | None = None
    cap_quantile: Annotated[float, Field(gt=0, lt=1)] = 0.999
    sensitivity: Literal["bounds", "clip"] = "bounds"
    clip: PosFloat | Literal["auto"] | None = None
    clip_quantile: Annotated[float, Field(gt=0, le=1)] = 0.999


class Learner(_Strict):
    """The learning algorithm, its horizon T and step constant ρ.

    ``rho = "auto"`` derives ρ from public information (dpmarket/stepsize.py): large enough that
    the noise-free floor's slowest mode decays by exp(−2·``auto_decay``) within T exchanges,
    and at most ``auto_stability`` times the owners' stability limit.
    """

    algorithm: Literal["async", "sync", "sync_averaged"] = "async"
    iterations: PosInt = 1000
    rho: PosFloat | Literal["auto"] = "auto"
    auto_decay: PosFloat = 5.0
    auto_stability: Annotated[float, Field(gt=0, le=1)] = 0.5
    theta_l_step: Literal["printed", "proof"] = "printed"
    weighting: Literal["none", "inverse_frequency"] = "none"


class Dropout(_Strict):
    """Exponential online and offline periods (means in simulated time); unset: always online."""

    mean_online: PosFloat | None = None
    mean_offline: PosFloat | None = None


class Window(_Strict):
    """A fixed interval of simulated time [start, end)."""

    start: NonNegFloat
    end: PosFloat


class Network(_Strict):
    """Who talks to the learner, when, and what the channel does to the messages (design §5).

    ``ideal``: every tick of the owners' superposed Poisson clocks is an exchange, at once and
    without loss (the papers' model; the fast path, no SimPy). ``request`` and ``broadcast`` run
    the SimPy engine with channels, collisions, losses, latency and dropouts.
    """

    mode: Literal["ideal", "request", "broadcast"] = "ideal"
    clock_rate: PosFloat = 1.0
    transmission_time: NonNegFloat = 0.0
    latency: NonNegFloat = 0.0
    collisions: bool = True
    carrier_sense: bool = False
    backoff: PosFloat = 1.0
    max_attempts: PosInt = 16
    loss_probability: Annotated[float, Field(ge=0, lt=1)] = 0.0
    channels: PosInt = 1
    broadcast_interval: PosFloat = 1.0
    horizon: PosFloat | None = None
    dropout: Dropout = Dropout()
    outages: list[Window] = []
    availability: str | None = None


class OwnerSpec(_Strict):
    """Per-owner overrides of the defaults, applied to owners 1, 2, … in order."""

    name: str | None = None
    records: PosInt | None = None
    epsilon: PosFloat | None = None
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = None
    shift: NonNegFloat | None = None
    cap: PosInt | None = None
    clock_rate: PosFloat | None = None
    channel: Annotated[int, Field(ge=0)] | None = None
    mean_online: PosFloat | None = None
    mean_offline: PosFloat | None = None
    outages: list[Window] | None = None
    cost_coef: PosFloat | None = None


class Costs(_Strict):
    """Owners' privacy costs C_i(ε) (design §6): one shape, coefficients fixed or drawn per owner.

    ``distribution = "fixed"``: every owner has ``coef`` (unless its [[owners]] ``cost_coef``
    says otherwise); ``"lognormal"``: median ``coef``, log-sd ``sigma``; ``"uniform"``: on
    [``low``, ``high``]. Draws come from the "market" stream, one per owner.
    """

    kind: Literal["linear", "quadratic", "exponential"] = "quadratic"
    coef: PosFloat = 1.0
    distribution: Literal["fixed", "lognormal", "uniform"] = "fixed"
    sigma: PosFloat = 0.5
    low: PosFloat | None = None
    high: PosFloat | None = None


class ForecastConstants(_Strict):
    """Explicit constants of ψ̂ = c₀ + c₁/n·sqrt(Σε⁻²) + c₂/n²·Σε⁻² (skip calibration)."""

    c1: NonNegFloat
    c2: NonNegFloat
    c0: NonNegFloat = 0.0


class Pilots(_Strict):
    """Pilot runs that calibrate the forecast: ``levels`` budgets × ``subsets`` owner subsets.

    Budgets are spaced geometrically on [epsilon_low, epsilon_high] (every member at the same
    ε); subsets are all owners, then halves, quarters, … of a fixed random order; each pilot is
    run ``replications`` times on its own seed. ``data`` is what they train on: ``"proxy"`` (the
    public proxy: a synthetic twin or the hold-out) or ``"owners"`` (the owners' private records,
    outside any privacy accounting: an oracle, labelled so in every output). ``floor`` adds the
    constant c₀ to a fit of Theorem 2's form (the law's floor is not a constant).
    """

    data: Literal["proxy", "owners"] = "proxy"

    levels: Annotated[int, Field(ge=2)] = 5
    subsets: PosInt = 3
    replications: PosInt = 2
    epsilon_low: PosFloat = 1.0
    epsilon_high: PosFloat = 100.0
    floor: bool = True


POLICIES = ("posted_price", "record_price", "take_it_or_leave_it", "procurement",
            "stackelberg", "auction", "marginal")


class Market(_Strict):
    """The market stage (design §6): owners sell ε to the learner under a compensation policy.

    ``price`` is per unit ε (the reserve per unit ε in the auction); ``price_per_record`` is
    the ``record_price`` policy's price per record·ε; ``budget`` caps the learner's spend;
    ``value`` is what a perfect model (ψ = 0) is worth to the learner, whose value of a model
    is value·max(0, 1 − ψ̂); ``offer_epsilon`` is the fixed ε of the take-it-or-leave-it
    offer, the auction and the marginal-contribution policy. ``forecast`` is the ψ̂ the market
    negotiates with: unset, the law of dpmarket/market/law.py with multipliers fitted to pilot
    runs (``pilots``); ``"law"``, that law uncalibrated; a table, Theorem 2's constants.

    ``mode = "dynamic"`` runs the market in time, beside the owners and the learner in the
    simulation (dpmarket/market/dynamic.py): the policy's posted price is the opening price, each
    answer is paid (``payment``: when computed, or only when delivered), the learner reprices every
    ``period`` (``rule``: ``"fixed"``, or ``"progress"``, steered by the model's quality measured
    on public data), owners join and leave by their utility, and the last ``pool`` owners of the
    scenario arrive over time at Poisson ``arrival_rate``.
    """

    policy: Literal["posted_price", "record_price", "take_it_or_leave_it", "procurement",
                    "stackelberg", "auction", "marginal"] = "posted_price"
    price: PosFloat | None = None
    price_per_record: PosFloat | None = None
    budget: PosFloat | None = None
    value: NonNegFloat = 0.0
    epsilon_min: PosFloat = 0.1
    epsilon_max: PosFloat = 100.0
    offer_epsilon: PosFloat | None = None
    winners: PosInt | None = None
    contribution: Literal["shapley", "leave_one_out"] = "shapley"
    shapley_samples: PosInt = 500
    model_value: NonNegFloat = 0.0
    costs: Costs = Costs()
    forecast: ForecastConstants | Literal["law"] | None = None
    pilots: Pilots = Pilots()
    mode: Literal["static", "dynamic"] = "static"
    payment: Literal["on_compute", "on_delivery"] = "on_compute"
    period: PosFloat = 1.0
    rule: Literal["fixed", "progress"] = "fixed"
    arrival_rate: NonNegFloat = 0.0
    pool: NonNegInt = 0

    @field_validator("forecast", mode="before")
    @classmethod
    def _forecast_word(cls, value: Any) -> Any:
        """The one word ``forecast`` accepts, with a message listing both forms."""
        if value is not None and value != "law" and not isinstance(value, dict | ForecastConstants):
            raise ValueError("should be 'law' or a table of Theorem 2's constants {c0, c1, c2}")
        return value


class Output(_Strict):
    """What a run writes besides the tables the contract requires."""

    metric_points: PosInt = 200
    plots: bool = True


# The scenario-wide default of each per-owner setting (Scenario.owner_value): read per owner by the
# engine at every replication's start, so only the asked key is looked up.
_OWNER_DEFAULTS: dict[str, Callable[[Scenario, int], Any]] = {
    "epsilon": lambda s, i: s.privacy.epsilon, "delta": lambda s, i: s.privacy.delta,
    "shift": lambda s, i: s.data.shift, "cap": lambda s, i: s.privacy.cap, "name": lambda s, i: None,
    "records": lambda s, i: None, "clock_rate": lambda s, i: s.network.clock_rate,
    "channel": lambda s, i: i % s.network.channels, "mean_online": lambda s, i: s.network.dropout.mean_online,
    "mean_offline": lambda s, i: s.network.dropout.mean_offline, "outages": lambda s, i: s.network.outages,
    "cost_coef": lambda s, i: None,
}


class Scenario(_Strict):
    """A whole scenario; ``Scenario.model_dump()`` is its fully resolved form."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    data: Data = Data()
    model: Model = Model()
    privacy: Privacy = Privacy()
    learner: Learner = Learner()
    network: Network = Network()
    owners: list[OwnerSpec] = []
    output: Output = Output()
    market: Market | None = None
    _source: str = PrivateAttr(default="")  # the file (and overrides) it was read from

    @property
    def source(self) -> str:
        """Where this scenario came from, for errors found after validation (its name if unknown)."""
        return self._source or self.name

    def __eq__(self, other: object) -> bool:
        """Equal settings make equal scenarios, wherever each was read from."""
        if not isinstance(other, Scenario):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def owner_value(self, index: int, key: str) -> Any:
        """An owner's setting: its [[owners]] override if any, else the scenario-wide default."""
        spec = self.owners[index] if index < len(self.owners) else None
        value = getattr(spec, key) if spec is not None else None
        if value is not None:
            return value
        return _OWNER_DEFAULTS[key](self, index)

    def resolved_table(self) -> dict:
        """The fully resolved scenario as a plain table, every default filled in except keys the
        scenario cannot use: with a [market], ``privacy.epsilon`` (the market sets the budgets, and
        a file that sets it is refused), so that validating this table gives this scenario back."""
        table = self.model_dump(mode="json", exclude_none=True)
        if self.market is not None:
            table["privacy"].pop("epsilon", None)
            if self.market.mode == "static":  # a static market's file reads as before the market in time
                for key in DYNAMIC_KEYS:
                    table["market"].pop(key, None)
        return table

    def to_toml(self) -> str:
        """The fully resolved scenario as TOML; loading it reproduces this scenario exactly."""
        return tomli_w.dumps(self.resolved_table())


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` → (["a", "b"], value); the value is read as TOML, else as a bare string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ScenarioError("--set", text, _MISSING, "expected dotted.key=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return [part.strip() for part in key.strip().split(".")], value


def apply_override(table: dict, path: list[str], value: Any, source: str) -> None:
    """Set ``table[path] = value`` in place; list items are addressed by index (owners.0.epsilon)."""
    node: Any = table
    for depth, part in enumerate(path[:-1]):
        nxt = _child(node, part, path[: depth + 1], source)
        if nxt is None:
            nxt = {}
            _assign(node, part, nxt, path[: depth + 1], source)
        node = nxt
    _assign(node, path[-1], value, path, source)


def _child(node: Any, part: str, where: list[str], source: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, where, source)]
    if isinstance(node, dict):
        return node.get(part)
    raise ScenarioError(source, ".".join(where[:-1]), node, "is not a table")


def _assign(node: Any, part: str, value: Any, where: list[str], source: str) -> None:
    if isinstance(node, list):
        node[_index(node, part, where, source)] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise ScenarioError(source, ".".join(where[:-1]), node, "is not a table")


def _index(node: list, part: str, where: list[str], source: str) -> int:
    if not (part.isascii() and part.isdigit()) or int(part) >= len(node):  # '٣', '²' are no index
        raise ScenarioError(source, ".".join(where), _MISSING,
                            f"no item {part!r} (the list has {len(node)})")
    return int(part)


def validate(table: dict, source: str) -> Scenario:
    """Validate a raw table into a Scenario; the first problem becomes one ScenarioError."""
    try:
        scenario = Scenario.model_validate(table)
    except ValidationError as exc:
        key, value, reason = _first_problem(exc.errors())
        raise ScenarioError(source, key, _short(value), reason) from None
    _check_consistency(scenario, source)
    scenario._source = source
    return scenario


def _check_consistency(s: Scenario, source: str) -> None:
    """Rules that tie several keys together; each names the key a user should change."""
    def fail(key: str, value: Any, reason: str) -> None:
        raise ScenarioError(source, key, value, reason)

    records = s.data.records
    if isinstance(records, list) and len(records) != s.data.owners:
        fail("data.records", _short(records),
             f"lists {len(records)} sizes but data.owners = {s.data.owners}")
    maximum = getattr(records, "maximum", None)
    if maximum is not None and maximum < records.minimum:
        fail("data.records.maximum", maximum, f"is below records.minimum = {records.minimum}")
    if s.data.source == "synthetic" and len(s.owners) > s.data.owners:
        fail("owners", f"{len(s.owners)} tables", f"more [[owners]] than data.owners = {s.data.owners}")
    _check_source(s, fail)
    classify = is_classification(s)
    if classify == (s.model.loss == "squared"):
        need = "'logistic' or 'hinge'" if classify else "'squared'"
        why = (f"data.kind = {s.data.kind!r}" if s.data.source == "synthetic"
               else f"data.table.label = {s.data.table.label!r}")
        fail("model.loss", s.model.loss, f"{why} needs {need}")
    p = s.privacy
    if p.sensitivity == "clip" and p.clip is None:
        fail("privacy.clip", _MISSING, "sensitivity = 'clip' needs the L1 bound privacy.clip")
    if p.sensitivity == "bounds" and p.clip is not None:
        fail("privacy.clip", p.clip, "only used with privacy.sensitivity = 'clip'")
    _check_delta(s, fail)
    _check_network(s, fail)
    _check_market(s, fail)
    if p.split != "capped":
        if p.cap is not None:
            fail("privacy.cap", p.cap, "only used with privacy.split = 'capped'")
        for i, o in enumerate(s.owners):
            if o.cap is not None:
                fail(f"owners.{i}.cap", o.cap, "only used with privacy.split = 'capped'")
    _check_auto(s, fail)


def _check_delta(s: Scenario, fail) -> None:
    """δ = 0 is pure ε-DP, which only Laplace answers under basic composition give: the Gaussian
    mechanism, and the RDP and PLD accountants, state their guarantees at some δ > 0."""
    p = s.privacy
    if p.mechanism == "laplace" and p.accountant == "basic":
        return
    why = ("the Gaussian mechanism" if p.mechanism == "gaussian" else
           f"the {p.accountant!r} accountant") + " gives (ε, δ)-DP only for δ > 0"
    if p.delta == 0:
        fail("privacy.delta", 0.0, f"{why}: set privacy.delta (e.g. 1e-6), or use "
             "privacy.mechanism = 'laplace' with privacy.accountant = 'basic' for pure ε-DP")
    for i, o in enumerate(s.owners):
        if o.delta == 0:
            fail(f"owners.{i}.delta", 0.0, f"{why}: give this owner a δ > 0")


def _check_auto(s: Scenario, fail) -> None:
    """``"auto"`` needs something to derive from: a smooth loss and the asynchronous learner."""
    lr = s.learner
    if lr.rho != "auto":
        return
    if lr.algorithm != "async":
        fail("learner.rho", "auto", f"is derived for Algorithm 1 (async); learner.algorithm = "
             f"{lr.algorithm!r} needs a number")
    if s.model.loss == "hinge":
        fail("learner.rho", "auto", "the hinge loss has no curvature bound to derive a step from; "
             "give a number")


def is_classification(s: Scenario) -> bool:
    """Whether the labels are classes (±1): a classification kind, or a table's sign label."""
    if s.data.source == "table":
        return s.data.table is not None and s.data.table.label == "sign"
    return s.data.kind in CLASSIFICATION_KINDS


def _check_source(s: Scenario, fail) -> None:
    """Keys of the other data source are errors; a table needs its path and its options."""
    d = s.data
    if d.source == "synthetic":
        for key in TABLE_ONLY:
            if getattr(d, key) is not None:
                fail(f"data.{key}", _short(getattr(d, key)), "only used with data.source = 'table'")
        return
    for key in SYNTHETIC_ONLY:
        if key in d.model_fields_set:
            fail(f"data.{key}", _short(getattr(d, key)), "only used with data.source = 'synthetic'")
    for key in TABLE_ONLY:
        if getattr(d, key) is None:
            fail(f"data.{key}", _MISSING, "data.source = 'table' needs it")
    for i, o in enumerate(s.owners):
        for key in ("records", "shift"):
            if getattr(o, key) is not None:
                fail(f"owners.{i}.{key}", getattr(o, key), "owners of a table have their own rows")
    _check_table(d.table, fail)


def _check_table(t: Table, fail) -> None:
    """Table options that only make sense together (design: hold-out constants, one owner rule)."""
    if (t.partition is None) == (t.blocks is None):
        fail("data.table.partition", t.partition, "give exactly one of partition or blocks")
    if t.max_owners is not None and t.partition is None:
        fail("data.table.max_owners", t.max_owners, "only used with data.table.partition")
    features = t.numeric + t.categorical
    if not features:
        fail("data.table.numeric", [], "no feature columns: list numeric or categorical columns")
    for column in {c for c in features if features.count(c) > 1 or c == t.target}:
        fail("data.table.categorical", column, "a column is listed twice (or is also the target)")
    if (t.label == "sign") != bool(t.positive):
        fail("data.table.positive", t.positive, "label = 'sign' needs the positive classes, and only it")
    if t.components > 0 and not t.standardize:
        fail("data.table.components", t.components, "PCA works on standardised columns: standardize = true")
    needs = [k for k, on in (("standardize", t.standardize), ("components", t.components > 0),
                             ("categorical", bool(t.categorical))) if on]
    if needs and t.holdout == 0:
        fail("data.table.holdout", 0, f"the hold-out is empty but {' and '.join(needs)} take their "
             "constants from it (never from owners' rows): set holdout to a number of rows")


def _check_network(s: Scenario, fail) -> None:
    """Network keys that only make sense together (and not at all in ideal mode)."""
    net, ideal = s.network, s.network.mode == "ideal"
    engine_only = {"transmission_time": 0.0, "latency": 0.0, "loss_probability": 0.0,
                   "carrier_sense": False, "channels": 1, "horizon": None}
    for key, neutral in engine_only.items():
        if ideal and getattr(net, key) != neutral:
            fail(f"network.{key}", getattr(net, key), "needs network.mode = 'request' or 'broadcast'")
    if ideal and (net.dropout.mean_online is not None or net.outages or net.availability):
        fail("network.mode", net.mode, "dropouts, outages and traces need 'request' or 'broadcast'")
    if (net.dropout.mean_online is None) != (net.dropout.mean_offline is None):
        fail("network.dropout", _MISSING, "give both mean_online and mean_offline, or neither")
    for where, windows in [("network.outages", net.outages)] + [
            (f"owners.{i}.outages", o.outages or []) for i, o in enumerate(s.owners)]:
        for j, w in enumerate(windows):
            if w.end <= w.start:
                fail(f"{where}.{j}.end", w.end, f"must be after start = {w.start}")
    for i, o in enumerate(s.owners):
        if o.channel is not None and o.channel >= net.channels:
            fail(f"owners.{i}.channel", o.channel, f"there are only {net.channels} channels (0-based)")
        if (o.mean_online is None) != (o.mean_offline is None):
            fail(f"owners.{i}.mean_online", o.mean_online, "give both mean_online and mean_offline")
        if ideal and (o.mean_online is not None or o.outages or o.channel is not None):
            fail(f"owners.{i}", "availability", "per-owner availability needs a network mode")
    if net.mode == "broadcast" and net.transmission_time + net.latency >= net.broadcast_interval:
        fail("network.broadcast_interval", net.broadcast_interval,
             "must exceed transmission_time + latency, so that slots do not overlap")
    if net.mode == "broadcast" and net.carrier_sense:  # responders all start at the slot boundary
        fail("network.carrier_sense", True, "only in request mode: a slot's responders all start at "
             "once, so none can hear another (and backing off would stretch the slot past Δ)")
    if s.learner.algorithm != "async" and not ideal:
        fail("learner.algorithm", s.learner.algorithm, "the network engine drives the async learner only")


# The keys of the market in time (market.mode = "dynamic"), with their values that mean "unused".
DYNAMIC_KEYS = {"mode": "static", "payment": "on_compute", "period": 1.0, "rule": "fixed",
                "arrival_rate": 0.0, "pool": 0}
POSTED = ("posted_price", "stackelberg")  # the policies that post a price per unit ε


def _check_dynamic(s: Scenario, fail) -> None:
    """The market in time: its keys only in dynamic mode, and what each of them needs."""
    m = s.market
    if m.mode == "static":
        for key, unused in DYNAMIC_KEYS.items():
            if getattr(m, key) != unused:
                fail(f"market.{key}", getattr(m, key), "only used with market.mode = 'dynamic'")
        return
    if m.policy not in POSTED:
        fail("market.policy", m.policy, "market.mode = 'dynamic' reprices a posted price per unit ε: "
             "use 'posted_price' or 'stackelberg'")
    if s.learner.algorithm != "async":
        fail("learner.algorithm", s.learner.algorithm, "market.mode = 'dynamic' needs the async learner "
             "(a synchronous round needs every owner, whoever leaves)")
    if m.arrival_rate > 0 and m.pool == 0:
        fail("market.arrival_rate", m.arrival_rate, "needs an owner pool: market.pool = K makes the last "
             "K owners of the scenario arrive over time")
    if m.pool > 0 and m.arrival_rate == 0:
        fail("market.pool", m.pool, "pool owners arrive at market.arrival_rate: set it (> 0)")
    if s.data.source == "synthetic" and m.pool >= s.data.owners:
        fail("market.pool", m.pool, f"must leave someone at the start (data.owners = {s.data.owners})")
    if m.rule == "progress":
        _check_progress(s, fail)


def _check_progress(s: Scenario, fail) -> None:
    """The adaptive rule weighs measured progress in money, on public data only."""
    m = s.market
    if m.value == 0:
        fail("market.value", 0.0, "market.rule = 'progress' weighs the model's measured progress in "
             "money: set the learner's value of a perfect model (> 0)")
    if s.data.source != "synthetic" and s.data.table.holdout == 0:
        fail("market.rule", m.rule, "needs a public measurement of quality: a hold-out "
             "(data.table.holdout > 0; synthetic data have a public twin), never the owners' records")


# What each compensation policy reads: (key, why) pairs checked when the policy is used.
POLICY_NEEDS = {
    "posted_price": ("price",), "record_price": ("price_per_record",),
    "take_it_or_leave_it": ("price", "offer_epsilon"), "procurement": ("budget",),
    "stackelberg": ("value",), "auction": ("price", "offer_epsilon"),
    "marginal": ("value", "offer_epsilon"),
}


def check_policy(market: Market, policy: str, fail) -> None:
    """Fail (naming the key) when ``market`` lacks a setting ``policy`` needs."""
    for key in POLICY_NEEDS[policy]:
        if not getattr(market, key):
            fail(f"market.{key}", getattr(market, key) or _MISSING,
                 f"market.policy = {policy!r} needs market.{key} (> 0)")


# How to change the budgets a market sells, per policy: what the refusal of privacy.epsilon says.
BUDGET_KEYS = {
    "posted_price": "raise market.price", "record_price": "raise market.price_per_record",
    "take_it_or_leave_it": "set market.offer_epsilon", "auction": "set market.offer_epsilon",
    "marginal": "set market.offer_epsilon", "procurement": "raise market.budget",
    "stackelberg": "raise market.value",
}


def _check_market(s: Scenario, fail) -> None:
    """Market keys that only make sense together."""
    m = s.market
    if m is None:
        for i, o in enumerate(s.owners):
            if o.cost_coef is not None:
                fail(f"owners.{i}.cost_coef", o.cost_coef, "only used with a [market] section")
        return
    _check_market_budgets(s, fail)
    if m.epsilon_min >= m.epsilon_max:
        fail("market.epsilon_min", m.epsilon_min, f"must be below market.epsilon_max = {m.epsilon_max}")
    if m.offer_epsilon is not None and not m.epsilon_min <= m.offer_epsilon <= m.epsilon_max:
        fail("market.offer_epsilon", m.offer_epsilon,
             f"must lie in [epsilon_min, epsilon_max] = [{m.epsilon_min}, {m.epsilon_max}]")
    c = m.costs
    if c.distribution == "uniform" and (c.low is None or c.high is None or c.low >= c.high):
        fail("market.costs.low", c.low if c.low is not None else _MISSING,
             "distribution = 'uniform' needs low < high")
    if c.distribution != "uniform" and (c.low is not None or c.high is not None):
        fail("market.costs.low", c.low, "low and high are only used with distribution = 'uniform'")
    if m.pilots.epsilon_low >= m.pilots.epsilon_high:
        fail("market.pilots.epsilon_low", m.pilots.epsilon_low,
             f"must be below market.pilots.epsilon_high = {m.pilots.epsilon_high}")
    check_policy(m, m.policy, fail)
    _check_dynamic(s, fail)


def _check_market_budgets(s: Scenario, fail) -> None:
    """With a [market] the budgets are what each owner sells: a budget given in the file or with
    --set would be silently ignored, so it is refused with what sets the budgets instead. Only a
    key the user gave counts (the schema's default is not "given"; written scenario.toml files
    leave it out, see :meth:`Scenario.resolved_table`)."""
    m = s.market
    why = (f"not used with a [market]: each owner's budget is the ε it sells (market.policy = "
           f"{m.policy!r}: {BUDGET_KEYS[m.policy]}; bounds market.epsilon_min, market.epsilon_max), "
           "or delete the [market] section to give the budgets yourself")
    if "epsilon" in s.privacy.model_fields_set:
        fail("privacy.epsilon", s.privacy.epsilon, why)
    for i, o in enumerate(s.owners):
        if o.epsilon is not None:
            fail(f"owners.{i}.epsilon", o.epsilon, why)


_TYPE_NAMES = {"constrained-int": "an integer", "list[": "a list", "tagged-union[": "a table",
               "constrained-float": "a number", "int": "an integer", "float": "a number"}


def _first_problem(errors: list[dict]) -> tuple[str, Any, str]:
    """The most specific of pydantic's errors, as (dotted key, offending value, reason).

    Unions (``records`` may be a number, a list or a table) make pydantic report one error
    per alternative; the deepest one is where the user went wrong, and if every alternative
    failed on type alone, the reason lists what would have been accepted.
    """
    parsed = [(_clean_loc(e["loc"]), e) for e in errors]
    depth = max(len(loc) for loc, _ in parsed)
    best = [(loc, e) for loc, e in parsed if len(loc) == depth]
    loc, err = next(((lc, e) for lc, e in best if not e["type"].endswith("_type")), best[0])
    value = _MISSING if err["type"] == "missing" else err.get("input", _MISSING)
    reason = _reason(err)
    if len(best) > 1 and all(e["type"].endswith("_type") for _, e in best):
        kinds = [_union_kind(e["loc"]) for _, e in best]
        reason = "should be " + " or ".join(k for k in kinds if k)
    return ".".join(str(p) for p in loc), value, reason


def _clean_loc(loc: tuple) -> list:
    """Drop pydantic's union-member markers (and the discriminator tag after them) from a path."""
    out, skip = [], False
    for part in loc:
        if skip:
            skip = False
            continue
        if isinstance(part, str) and ("[" in part or part.startswith(("constrained-", "function-"))):
            skip = part.startswith("tagged-union[")
            continue
        if isinstance(part, str) and part[:1].isupper():  # a model class as a union member (keys are lower)
            continue
        out.append(part)
    return out


def _union_kind(loc: tuple) -> str:
    for part in reversed(loc):
        if isinstance(part, str):
            for prefix, name in _TYPE_NAMES.items():
                if part.startswith(prefix):
                    return name
    return ""


def _reason(err: dict) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    return msg[0].lower() + msg[1:] if msg else msg


def _short(value: Any) -> Any:
    if isinstance(value, dict | list) and len(repr(value)) > 60:
        return type(value).__name__
    return value


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Read, override and validate a scenario file; every failure is a ScenarioError."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(source, "", _MISSING, "no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "", _MISSING, f"cannot read: {exc.__class__.__name__}") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, "", _MISSING, f"malformed TOML: {exc}") from None
    _resolve_data_path(table, path.parent)  # a path written in the file: relative to the file
    return _overridden(table, overrides, source, path.parent)


def override(scenario: Scenario, overrides: list[str] | tuple[str, ...]) -> Scenario:
    """``scenario`` with ``--set``-style overrides, checked exactly like a file's (files they name
    are relative to the working directory); the scenario itself when there are none."""
    if not overrides:
        return scenario
    return _overridden(scenario.resolved_table(), overrides, scenario.source, Path.cwd())


def _overridden(table: dict, overrides, source: str, base: Path) -> Scenario:
    """Apply overrides to a raw table, make its files absolute (a trace against ``base``), validate."""
    for text_override in overrides:
        keys, value = parse_override(text_override)
        apply_override(table, keys, value, f"{source} (--set {text_override})")
    label = source if not overrides else f"{source} (with --set {' '.join(overrides)})"
    resolve_files(table, base, label)
    return validate(table, label)


def resolve_files(table: dict, base: Path, source: str) -> None:
    """Make the files a scenario names absolute and check that they exist (``source`` names the
    file and overrides in the error): the availability trace relative to ``base`` (the scenario
    file's directory), a ``data.path`` given by an override (--set, a --grid cell) relative to
    the working directory."""
    _resolve_trace(table, base, source)
    _resolve_data_path(table, Path.cwd(), source)


def _resolve_trace(table: dict, base: Path, source: str) -> None:
    """Make ``network.availability`` absolute (relative to ``base``, the scenario file's directory)
    and check it exists."""
    net = table.get("network")
    trace = net.get("availability") if isinstance(net, dict) else None
    if not isinstance(trace, str):
        return
    resolved = Path(trace) if Path(trace).is_absolute() else (base / trace).resolve()
    if not resolved.is_file():
        raise ScenarioError(source, "network.availability", trace, "no such file")
    net["availability"] = str(resolved)


def _resolve_data_path(table: dict, base: Path, source: str | None = None) -> None:
    """Make ``data.path`` absolute against ``base``; with ``source``, also check the file exists."""
    data = table.get("data")
    value = data.get("path") if isinstance(data, dict) else None
    if not isinstance(value, str):
        return
    resolved = Path(value).expanduser()
    resolved = resolved if resolved.is_absolute() else (base / resolved).resolve()
    if source is not None and not resolved.is_file():
        raise ScenarioError(source, "data.path", value,
                            "no such file; point to the records with --set data.path=FILE")
    data["path"] = str(resolved)
