"""The scenario schema: every key, its type, its bounds and its default (pydantic).

Every default lives here and nowhere else. Unknown keys, wrong types and impossible values are
refused by the schema itself; rules that tie several keys together are in
:mod:`~dpmarket.scenario.checks`, and :mod:`~dpmarket.scenario.loading` turns the first problem into
one :class:`~dpmarket.errors.ScenarioError` naming the file, the dotted key path and the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_serializer,
)

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
    owner's answers compose to (ε_i, δ_i) (dpmarket/privacy/mechanisms.py): ``basic`` (Theorem 1's even
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
    # Where the noise comes from: unset or "seeded", the run's seed (reproducible; the published seed
    # regenerates every draw); "system", the operating system's secure generator (not reproducible).
    noise: Literal["seeded", "system"] | None = None


class Learner(_Strict):
    """The learning algorithm, its horizon T and step constant ρ.

    ``rho = "auto"`` derives ρ from public information (dpmarket/learning/stepsize.py): large enough that
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
    """Who talks to the learner, when, and what the channel does to the messages.

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
    own_psi: NonNegFloat | None = None  # declared own-data ψ: what the market weighs (public by declaring)


class Costs(_Strict):
    """Owners' privacy costs C_i(ε): one shape, coefficients fixed or drawn per owner.

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
    """The market stage: owners sell ε to the learner under a compensation policy.

    ``price`` is per unit ε (the reserve per unit ε in the auction); ``price_per_record`` is
    the ``record_price`` policy's price per record·ε; ``budget`` caps the learner's spend;
    ``value`` is what a perfect model (ψ = 0) is worth to the learner, whose value of a model
    is value·max(0, 1 − ψ̂); ``offer_epsilon`` is the fixed ε of the take-it-or-leave-it
    offer, the auction and the marginal-contribution policy. ``forecast`` is the ψ̂ the market
    negotiates with: unset, the law of dpmarket/markets/law.py with multipliers fitted to pilot
    runs (``pilots``); ``"law"``, that law uncalibrated; a table, Theorem 2's constants.

    ``mode = "dynamic"`` runs the market in time, beside the owners and the learner in the
    simulation (dpmarket/markets/dynamic.py): the policy's posted price is the opening price, each
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
    "cost_coef": lambda s, i: None, "own_psi": lambda s, i: None,
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



# The keys of the market in time (market.mode = "dynamic"), with their values that mean "unused".
DYNAMIC_KEYS = {"mode": "static", "payment": "on_compute", "period": 1.0, "rule": "fixed",
                "arrival_rate": 0.0, "pool": 0}
POSTED = ("posted_price", "stackelberg")  # the policies that post a price per unit ε
