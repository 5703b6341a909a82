"""The scenario schema: every key, its type, its bounds, its default, its unit and what it means (pydantic).

Every default lives here and nowhere else, and so does every key's explanation: each field carries a
``description`` (and a ``unit`` in its ``json_schema_extra``), which ``dpmarket explain KEY``,
the comments of ``dpmarket validate`` and the docs' reference of scenario keys show
(:mod:`~dpmarket.scenario.keys` walks them). Unknown keys, wrong types and impossible values are
refused by the schema itself; rules that tie several keys together are in
:mod:`~dpmarket.scenario.checks`, and :mod:`~dpmarket.scenario.loading` turns the first problem into
one :class:`~dpmarket.errors.ScenarioError` naming the file, the dotted key path and the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_serializer,
    model_validator,
)

from dpmarket.system import counts


def _exact(count: int) -> int:
    """A count numpy holds exactly (:data:`dpmarket.system.counts.EXACT`): 10**40 iterations was numpy's
    casting error deep inside a run."""
    reason = counts.exact(count)
    if reason is not None:
        raise ValueError(reason)
    return count


Exact = AfterValidator(_exact)
PosInt = Annotated[int, Field(ge=1), Exact]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0), Exact]


def key(default: Any, description: str, unit: str | None = None) -> Any:
    """A schema field with its explanation: ``description`` says what the key does (and how it
    combines with others), ``unit`` what its number counts (absent for words and switches).
    ``default`` is ``...`` for a required key."""
    return Field(default, description=description, json_schema_extra={"unit": unit} if unit else None)


class _Strict(BaseModel):
    """Base of every table: unknown keys are errors, no silent coercion of strings to numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)


class ParetoSizes(_Strict):
    """Heavy-tailed owner sizes: Pareto with scale ``minimum`` (the floor) and shape ``alpha``."""

    distribution: Literal["pareto"] = key(..., "Heavy-tailed sizes: a few owners hold many records.")
    alpha: PosFloat = key(1.5, "Pareto shape: smaller is heavier-tailed (the mean is finite only above 1).")
    minimum: PosInt = key(10_000, "Pareto scale: the smallest owner's records (every owner holds at least "
                                  "this).", "records")
    maximum: PosInt | None = key(None, "Cap on an owner's records (unset: no cap).", "records")


class LognormalSizes(_Strict):
    """Owner sizes ``max(minimum, lognormal(log(median), sigma))``."""

    distribution: Literal["lognormal"] = key(..., "Log-normal sizes around a median.")
    median: PosFloat = key(20_000.0, "Median owner size.", "records")
    sigma: PosFloat = key(1.0, "Standard deviation of log(size): 1 spreads the middle half over a factor 4.",
                          "natural-log units")
    minimum: PosInt = key(1, "Floor on an owner's records.", "records")
    maximum: PosInt | None = key(None, "Cap on an owner's records (unset: no cap).", "records")


class UniformSizes(_Strict):
    """Owner sizes drawn uniformly from the integers ``minimum … maximum``."""

    distribution: Literal["uniform"] = key(..., "Sizes drawn uniformly between two integers.")
    minimum: PosInt = key(..., "Smallest owner size.", "records")
    maximum: PosInt = key(..., "Largest owner size (at least minimum).", "records")


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

    target: str = key(..., "The column the model predicts (the label).")
    numeric: list[str] = key([], "Numeric feature columns, used as they are (then standardised).")
    categorical: list[str] = key([], "Categorical feature columns, encoded by `encoding` with codes "
                                     "taken from the hold-out.")
    encoding: Literal["codes", "onehot"] = key("codes", "How a categorical column becomes features: one "
                                                        "integer code per category (as the papers), or one "
                                                        "0/1 column per category.")
    partition: str | None = key(None, "The column whose values are the owners (one owner per value); "
                                      "give this or `blocks`.")
    blocks: PosInt | None = key(None, "Split the rows into this many contiguous owners instead of "
                                      "`partition`.", "owners")
    min_records: PosInt = key(1, "An owner (a partition value) needs at least this many rows.", "records")
    max_owners: PosInt | None = key(None, "Keep only the largest owners of the partition (unset: all).",
                                    "owners")
    small_owners: Literal["error", "drop"] = key("error", "What to do with partition values below "
                                                          "`min_records`: stop with an error, or leave "
                                                          "them out (counted in summary.json).")
    missing: Literal["error", "drop"] = key("error", "What to do with rows that have an empty field in a "
                                                     "used column: stop, or drop them (counted).")
    label: Literal["identity", "log", "sign"] = key("identity", "The target as it is, its logarithm "
                                                                "(long right tails), or ±1 classes "
                                                                "(`positive` lists the +1 values; needs "
                                                                "a logistic or hinge loss).")
    positive: list[str] = key([], "With label = \"sign\": the target values that are the +1 class.")
    holdout: NonNegInt = key(0, "The last rows of the file are public: every constant applied by all "
                                "owners (codes, means, standard deviations, PCA) and the learner's "
                                "public proxy come from them; no owner contributes them.", "rows")
    standardize: bool = key(True, "Centre and scale each feature by the hold-out's mean and standard "
                                  "deviation.")
    spread: PosFloat = key(3.0, "How many hold-out standard deviations map to the declared bound "
                                "(beyond: clipped, and counted).", "standard deviations")
    components: NonNegInt = key(0, "Keep this many principal components of the hold-out, whitened "
                                   "(0: no PCA).", "features")


SYNTHETIC_ONLY = ("kind", "generator", "owners", "records", "features", "shift", "label_noise", "seed")
TABLE_ONLY = ("path", "table")


class Data(_Strict):
    """Where owners come from (synthetic generator or a table), and the declared bounds."""

    source: Literal["synthetic", "table"] = key("synthetic", "Where the owners' records come from: drawn "
                                                             "by a generator, or read from a file of "
                                                             "records (`path`, `[data.table]`).")
    kind: Literal["length_of_stay", "interest_rate", "card_fraud"] = key(
        "interest_rate", "What the synthetic records look like: hospital stays (right-skewed, squared "
                         "loss), loans' interest rates (little noise, squared loss) or card "
                         "transactions (±1 fraud labels, 10 % positive: logistic or hinge loss).")
    generator: Literal["whitened", "correlated"] = key(
        "whitened", "Synthetic features: PCA-whitened and centred as in the papers, or the correlated "
                    "features of dpmarket ≤ 0.1 (kept to reproduce earlier results).")
    owners: PosInt = key(3, "Number of data owners N (synthetic data; a table's owners come from its "
                            "partition).", "owners")
    records: PosInt | list[PosInt] | SizeDistribution = key(
        10_000, "Records per owner: one number for every owner, a list (one per owner), or a size "
                "distribution table {distribution = \"pareto\" | \"lognormal\" | \"uniform\", …}.",
        "records")
    features: PosInt = key(10, "Number of features p (the model has p coefficients, plus one with an "
                               "intercept).", "features")
    shift: NonNegFloat = key(0.0, "How different the owners are: each owner's coefficients deviate from "
                                  "the population's by this fraction (rms); 0: identically distributed.",
                             "fraction of the coefficients' rms")
    label_noise: NonNegFloat | None = key(None, "Standard deviation of the label noise (unset: the kind's "
                                                "own: 0.6 for stays, 0.25 for interest rates).",
                                          "label units")
    feature_bound: PosFloat = key(1.0, "Declared bound X on every feature (|x_j| ≤ X): records are "
                                       "clipped into it; the worst-case sensitivity Ξ grows with it.",
                                  "feature units")
    label_bound: PosFloat = key(3.0, "Declared bound Y on a regression label (|y| ≤ Y): labels are "
                                     "clipped into it.", "label units")
    seed: Annotated[int, Field(ge=0)] | None = key(None, "Seed of the records alone (unset: the run's "
                                                         "seed), so that --seed can vary the noise and "
                                                         "the schedule on the same data.")
    path: str | None = key(None, "The records file (CSV, compressed CSV or Parquet), relative to the "
                                 "scenario file (with data.source = \"table\").")
    table: Table | None = key(None, "How the file's columns become owners, features and labels "
                                    "([data.table]).")

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

    loss: Literal["squared", "logistic", "hinge"] = key(
        "squared", "The per-record loss ℓ: squared error (regression), logistic (classification) or "
                   "hinge (a linear SVM).")
    regularization: PosFloat = key(1e-5, "λ in the regulariser g(θ) = λθᵀθ; the steps of Algorithm 1 "
                                         "scale with 1/(2λ).")
    theta_max: PosFloat = key(1.0, "Bound on every coefficient, |θ_j| ≤ θmax (the box Θ every step is "
                                   "projected onto); the worst-case squared-loss sensitivity grows with "
                                   "it.", "coefficient units")
    intercept: bool = key(False, "Add a constant feature (an intercept) to the model.")


# What each privacy preset fills in (the keys a scenario gives win): "paper" is the papers' set-up.
PRESETS = {"paper": {"split": "horizon", "sensitivity": "bounds"}}  # the quantiles are then unused

class Privacy(_Strict):
    """Owners' budgets and how each answer is made private.

    ``clip = "auto"`` takes the clip bound from public information: the ``clip_quantile`` of
    the per-example gradient norms at the optimum of the public proxy (dpmarket/data/proxy.py).
    ``mechanism`` is the noise (Laplace: L1 sensitivity; Gaussian: L2), ``accountant`` how an
    owner's answers compose to (ε_i, δ_i) (dpmarket/privacy/mechanisms.py): ``basic`` (Theorem 1's even
    split, pure ε-DP for Laplace), ``rdp`` or ``pld`` (Google's dp-accounting).
    """

    preset: Literal["paper"] | None = key(
        None, "A named set of defaults for the keys of this table that the scenario does not give: "
              "\"paper\" is the papers' worst case (split = \"horizon\": every owner budgets its ε over "
              "T answers; sensitivity = \"bounds\": Ξ from the declared data domain). Unset: "
              "dpmarket's defaults (capped split, clipping at a public quantile).")
    epsilon: PosFloat = key(1.0, "Every owner's privacy budget ε over the whole run (an [[owners]] table "
                                 "may give one its own; with a [market] the market sets the budgets).",
                            "ε (privacy loss)")
    mechanism: Literal["laplace", "gaussian"] = key(
        "laplace", "The noise added to each answer: Laplace (L1 sensitivity, pure ε-DP under basic "
                   "composition) or Gaussian (L2 sensitivity, needs δ > 0).")
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = key(
        0.0, "Every owner's δ: the guarantee is (ε, δ)-DP (0: pure ε-DP, for Laplace answers under basic "
             "composition only).", "probability")
    accountant: Literal["basic", "rdp", "pld"] = key(
        "basic", "How an owner's answers compose to (ε, δ): basic (even split, Theorem 1), Rényi DP or "
                 "privacy-loss distributions (Google's dp-accounting; tighter, need δ > 0).")
    split: Literal["horizon", "capped"] = key(
        "capped", "Over how many answers m_i an owner spreads its budget: \"capped\" sizes m_i from its "
                  "expected number of queries (a `cap_quantile` quantile of Binomial(T, its share of "
                  "the clocks)) and refuses beyond it; \"horizon\" budgets m_i = T answers (the papers': "
                  "safe for any schedule, but an owner asked T/N times wastes most of its ε).")
    cap: PosInt | None = key(None, "Every owner's answer cap m_i, instead of the quantile (split = "
                                   "\"capped\" only).", "answers")
    cap_quantile: Annotated[float, Field(gt=0, lt=1)] = key(
        0.9, "With split = \"capped\": m_i is this quantile of the owner's Binomial(T, share) number of "
               "queries; lower wastes less budget but more owners run out (and refuse) before T.",
        "probability")
    sensitivity: Literal["bounds", "clip"] = key(
        "clip", "Where Ξ, the bound on one record's gradient, comes from: \"clip\" clips every "
                "per-record gradient to `clip` (private for any data, slightly biased; reads every "
                "record at every answer); \"bounds\" derives the worst case from the declared domain "
                "(feature_bound, label_bound, theta_max: unbiased, but often 30–50 times larger).")
    clip: PosFloat | Literal["auto"] = key(
        "auto", "With sensitivity = \"clip\": the bound on a per-record gradient's norm (L1 for Laplace, "
                "L2 for Gaussian answers), or \"auto\": the `clip_quantile` quantile of the gradient "
                "norms of the public proxy at its optimum (never the owners' records).",
        "gradient norm")
    clip_quantile: Annotated[float, Field(gt=0, le=1)] = key(
        0.9, "With clip = \"auto\": which quantile of the public proxy's per-record gradient norms is "
               "the bound; lower adds less noise but clips (biases) more gradients.", "probability")
    noise: Literal["seeded", "system"] | None = key(
        None, "Where the noise comes from: unset or \"seeded\", the run's seed (reproducible: the "
              "published seed regenerates every draw); \"system\", the operating system's secure "
              "generator (os.urandom; not reproducible: two runs of one seed share their schedule but "
              "not their noise).")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        """A preset fills in the keys the scenario does not give (given keys win)."""
        if isinstance(data, dict) and data.get("preset") in PRESETS:
            return {**PRESETS[data["preset"]], **data}
        return data


class Learner(_Strict):
    """The learning algorithm, its horizon T and step constant ρ.

    ``rho = "auto"`` derives ρ from public information (dpmarket/learning/stepsize.py): large enough that
    the noise-free floor's slowest mode decays by exp(−2·``auto_decay``) within T exchanges,
    and at most ``auto_stability`` times the owners' stability limit.
    """

    algorithm: Literal["async", "sync", "sync_averaged"] = key(
        "async", "Algorithm 1 (one owner per exchange, two-copy inertia update), or the synchronous "
                 "baselines (every owner answers every round; the averaged one with iterate averaging).")
    iterations: PosInt = key(1000, "T: the exchanges (updates) of the run.", "exchanges")
    rho: PosFloat | Literal["auto"] = key(
        "auto", "The step constant ρ (steps are ρ/(T²σ), σ = 2λ), or \"auto\": from public information "
                "(N, T, the sizes and the public proxy's curvature), the larger of fast enough and at "
                "most `auto_stability` of the stability limit.")
    auto_decay: PosFloat = key(5.0, "With rho = \"auto\": the slowest mode of the noise-free error falls "
                                    "by exp(−2·auto_decay) within T exchanges.")
    auto_stability: Annotated[float, Field(gt=0, le=1)] = key(
        0.5, "With rho = \"auto\": ρ is at most this fraction of the step at which the largest owner's "
             "copy becomes unstable.", "fraction of the stability limit")
    theta_l_step: Literal["printed", "proof"] = key(
        "printed", "The central model's step: (N−1)ρ/(NT²σ) as printed in Algorithm 1, or ρ/(2T²σ) as "
                   "in the appendix's proof.")
    weighting: Literal["none", "inverse_frequency"] = key(
        "none", "Scale each answer by 1/(N·its owner's share of the exchanges so far) (Remark 4), "
                "for owners with unequal clocks.")


class Dropout(_Strict):
    """Exponential online and offline periods (means in simulated time); unset: always online."""

    mean_online: PosFloat | None = key(None, "Mean length of an owner's online periods (exponential).",
                                       "simulated time")
    mean_offline: PosFloat | None = key(None, "Mean length of an owner's offline periods (exponential).",
                                        "simulated time")


class Window(_Strict):
    """A fixed interval of simulated time [start, end)."""

    start: NonNegFloat = key(..., "When the window opens.", "simulated time")
    end: PosFloat = key(..., "When it closes (after start).", "simulated time")


class Network(_Strict):
    """Who talks to the learner, when, and what the channel does to the messages.

    ``ideal``: every tick of the owners' superposed Poisson clocks is an exchange, at once and
    without loss (the papers' model; the fast path, no SimPy). ``request`` and ``broadcast`` run
    the SimPy engine with channels, collisions, losses, latency and dropouts.
    """

    mode: Literal["ideal", "request", "broadcast"] = key(
        "ideal", "ideal: every clock tick is an instant, lossless exchange (the papers'); request: an "
                 "owner whose clock ticks asks for an exchange on its channel; broadcast: the learner "
                 "polls every broadcast_interval and the owners that ticked answer (slotted ALOHA).")
    clock_rate: PosFloat = key(1.0, "Each owner's Poisson clock rate (an [[owners]] table may give one "
                                    "its own): its share of the exchanges is its share of the rates.",
                               "ticks per unit simulated time")
    transmission_time: NonNegFloat = key(0.0, "How long a message occupies its channel; overlapping "
                                              "messages collide.", "simulated time")
    latency: NonNegFloat = key(0.0, "Delivery delay of every message.", "simulated time")
    collisions: bool = key(True, "Messages that overlap on a channel are all lost (pure ALOHA).")
    carrier_sense: bool = key(False, "Request mode: an owner listens first and backs off while its "
                                     "channel is busy.")
    backoff: PosFloat = key(1.0, "Mean of the exponential wait after hearing a busy channel.",
                            "simulated time")
    max_attempts: PosInt = key(16, "Looks at a busy channel before the owner gives the exchange up.",
                               "attempts")
    loss_probability: Annotated[float, Field(ge=0, lt=1)] = key(
        0.0, "Independent probability that any message is lost.", "probability")
    channels: PosInt = key(1, "Number of channels; owner i uses channel i mod channels unless its "
                              "[[owners]] table says otherwise.", "channels")
    broadcast_interval: PosFloat = key(1.0, "Broadcast mode: the time between two of the learner's "
                                            "queries (a slot).", "simulated time")
    horizon: PosFloat | None = key(None, "Stop at this simulated time even before T exchanges (unset: "
                                         "no limit).", "simulated time")
    dropout: Dropout = key(Dropout(), "Owners going offline and back: exponential periods (unset: "
                                      "always online).")
    outages: list[Window] = key([], "Windows of simulated time when every owner is offline.")
    availability: str | None = key(None, "A CSV trace of when each owner is online (owner, start, end), "
                                         "relative to the scenario file; replaces dropout.")


class OwnerSpec(_Strict):
    """Per-owner overrides of the defaults, applied to the first, second, … owner in order."""

    name: str | None = key(None, "The owner's name in every output (unset: a generated one).")
    records: PosInt | None = key(None, "Its records (synthetic data).", "records")
    epsilon: PosFloat | None = key(None, "Its privacy budget (not with a [market]).", "ε (privacy loss)")
    delta: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = key(
        None, "Its δ.", "probability")
    shift: NonNegFloat | None = key(None, "How far its data differ from the population's (synthetic).",
                                    "fraction of the coefficients' rms")
    cap: PosInt | None = key(None, "Its answer cap m_i (split = \"capped\").", "answers")
    clock_rate: PosFloat | None = key(None, "Its Poisson clock rate.", "ticks per unit simulated time")
    channel: Annotated[int, Field(ge=0), Exact] | None = key(None, "Its channel (0-based).")
    mean_online: PosFloat | None = key(None, "Mean length of its online periods.", "simulated time")
    mean_offline: PosFloat | None = key(None, "Mean length of its offline periods.", "simulated time")
    outages: list[Window] | None = key(None, "Its own offline windows.")
    cost_coef: PosFloat | None = key(None, "Its privacy-cost coefficient c_i (with a [market]).",
                                     "money per cost unit")
    own_psi: NonNegFloat | None = key(
        None, "Its declared own-data ψ (the model it could train alone, scored on the hold-out): what "
              "the market weighs for an owner that values the model (market.model_value > 0), public "
              "because declared; unset: the public proxy's estimate.", "ψ (excess risk, relative)")


class Costs(_Strict):
    """Owners' privacy costs C_i(ε): one shape, coefficients fixed or drawn per owner.

    ``distribution = "fixed"``: every owner has ``coef`` (unless its [[owners]] ``cost_coef``
    says otherwise); ``"lognormal"``: median ``coef``, log-sd ``sigma``; ``"uniform"``: on
    [``low``, ``high``]. Draws come from the "market" stream, one per owner.
    """

    kind: Literal["linear", "quadratic", "exponential"] = key(
        "quadratic", "The shape of an owner's privacy cost: c·ε, c·ε²/2 or c·(e^ε − 1).")
    coef: PosFloat = key(1.0, "The coefficient c (the median with distribution = \"lognormal\").",
                         "money per cost unit")
    distribution: Literal["fixed", "lognormal", "uniform"] = key(
        "fixed", "Every owner has `coef`, or a coefficient drawn per owner.")
    sigma: PosFloat = key(0.5, "Log-normal coefficients: the standard deviation of log c.",
                          "natural-log units")
    low: PosFloat | None = key(None, "Uniform coefficients: the lower end.", "money per cost unit")
    high: PosFloat | None = key(None, "Uniform coefficients: the upper end.", "money per cost unit")


class ForecastConstants(_Strict):
    """Explicit constants of ψ̂ = c₀ + c₁/n·sqrt(Σε⁻²) + c₂/n²·Σε⁻² (skip calibration)."""

    c1: NonNegFloat = key(..., "Theorem 2's constant of the 1/n·sqrt(Σε⁻²) term.")
    c2: NonNegFloat = key(..., "Theorem 2's constant of the 1/n²·Σε⁻² term.")
    c0: NonNegFloat = key(0.0, "The floor: ψ left however large the budgets.", "ψ")


class Pilots(_Strict):
    """Pilot runs that calibrate the forecast: ``levels`` budgets × ``subsets`` owner subsets.

    Budgets are spaced geometrically on [epsilon_low, epsilon_high] (every member at the same
    ε); subsets are all owners, then halves, quarters, … of a fixed random order; each pilot is
    run ``replications`` times on its own seed. ``data`` is what they train on: ``"proxy"`` (the
    public proxy: a synthetic twin or the hold-out) or ``"owners"`` (the owners' private records,
    outside any privacy accounting: an oracle, labelled so in every output). ``floor`` adds the
    constant c₀ to a fit of Theorem 2's form (the law's floor is not a constant).
    """

    data: Literal["proxy", "owners"] = key(
        "proxy", "What the pilots train on: the public proxy, or the owners' private records (an "
                 "oracle, outside any privacy accounting, labelled so in every output).")

    levels: Annotated[int, Field(ge=2), Exact] = key(5, "Budgets tried (geometrically spaced).", "budgets")
    subsets: PosInt = key(3, "Owner subsets tried: all owners, half, a quarter, …", "subsets")
    replications: PosInt = key(2, "Runs per pilot, each on its own seed.", "runs")
    epsilon_low: PosFloat = key(1.0, "The smallest pilot budget.", "ε (privacy loss)")
    epsilon_high: PosFloat = key(100.0, "The largest pilot budget.", "ε (privacy loss)")
    floor: bool = key(True, "Fit the constant floor c₀ too.")


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
                    "stackelberg", "auction", "marginal"] = key(
        "posted_price", "How owners are paid for their ε: a posted price per unit ε, a price per record·ε, "
                        "a fixed offer, procurement within a budget, the learner's optimal price "
                        "(Stackelberg), a reverse auction, or payment by marginal contribution.")
    price: PosFloat | None = key(None, "Price per unit ε (the auction's reserve per unit ε).",
                                 "money per unit ε")
    price_per_record: PosFloat | None = key(None, "record_price: the price per record and unit ε.",
                                            "money per record per unit ε")
    budget: PosFloat | None = key(None, "The most the learner pays in total (unset: no cap).", "money")
    value: NonNegFloat = key(0.0, "What a perfect model (ψ = 0) is worth to the learner; a model is worth "
                                  "value·max(0, 1 − ψ̂).", "money")
    epsilon_min: PosFloat = key(0.1, "An owner sells at least this ε, or declines.", "ε (privacy loss)")
    epsilon_max: PosFloat = key(100.0, "An owner sells at most this ε.", "ε (privacy loss)")
    offer_epsilon: PosFloat | None = key(None, "The fixed ε of the take-it-or-leave-it offer, the auction "
                                               "and the marginal-contribution policy.", "ε (privacy loss)")
    winners: PosInt | None = key(None, "Auction: how many of the lowest bids win (unset: all owners).",
                                 "owners")
    contribution: Literal["shapley", "leave_one_out"] = key(
        "shapley", "Marginal policy: pay Shapley values or leave-one-out contributions.")
    shapley_samples: PosInt = key(500, "Random orders for sampled Shapley values (beyond 10 owners).",
                                  "orders")
    model_value: NonNegFloat = key(0.0, "What one unit of ψ improvement over its own model is worth to an "
                                        "owner (0: owners sell for money alone).", "money per unit ψ")
    costs: Costs = key(Costs(), "The owners' privacy costs C_i(ε).")
    forecast: ForecastConstants | Literal["law"] | None = key(
        None, "The ψ̂ the market negotiates with: unset, the law calibrated by pilot runs; \"law\", "
              "the law uncalibrated; a table {c0, c1, c2}, Theorem 2's constants.")
    pilots: Pilots = key(Pilots(), "The pilot runs that calibrate the forecast.")
    mode: Literal["static", "dynamic"] = key(
        "static", "static: the market settles once, before training; dynamic: it runs in time beside "
                  "training (prices, joins and leaves).")
    payment: Literal["on_compute", "on_delivery"] = key(
        "on_compute", "Dynamic market: pay an answer when it is computed, or only when it arrives.")
    period: PosFloat = key(1.0, "Dynamic market: how often the learner reprices.", "simulated time")
    rule: Literal["fixed", "progress"] = key(
        "fixed", "Dynamic market: keep the opening price, or steer it by the model's progress measured "
                 "on public data.")
    arrival_rate: NonNegFloat = key(0.0, "Dynamic market: the Poisson rate at which the pool's owners "
                                         "arrive.", "owners per unit simulated time")
    pool: NonNegInt = key(0, "Dynamic market: the last `pool` owners of the scenario arrive over time.",
                          "owners")

    @field_validator("forecast", mode="before")
    @classmethod
    def _forecast_word(cls, value: Any) -> Any:
        """The one word ``forecast`` accepts, with a message listing both forms."""
        if value is not None and value != "law" and not isinstance(value, dict | ForecastConstants):
            raise ValueError("should be 'law' or a table of Theorem 2's constants {c0, c1, c2}")
        return value


class Output(_Strict):
    """What a run writes besides the tables the contract requires."""

    metric_points: PosInt = key(200, "ψ is recorded at about this many iterations (0 and T included).",
                                "points")
    plots: bool = key(True, "Draw the figures (and put them in report.html).")


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

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")] = key(
        ..., "The scenario's name (letters, digits, _ . -): it names the output directory.")
    description: str = key("", "One line saying what the scenario shows (listed by `dpmarket scenarios`).")
    seed: Annotated[int, Field(ge=0)] = key(0, "The run's one seed: data (unless data.seed), schedule, "
                                               "clocks and noise are named streams split from it.")
    data: Data = key(Data(), "The owners and their records.")
    model: Model = key(Model(), "The convex model the learner trains.")
    privacy: Privacy = key(Privacy(), "Each owner's budget and how its answers are made private.")
    learner: Learner = key(Learner(), "The learning algorithm, its horizon T and its step.")
    network: Network = key(Network(), "Who talks to the learner, when, and what the channel does.")
    owners: list[OwnerSpec] = key([], "Per-owner settings ([[owners]] tables), applied to owners 0, 1, … "
                                      "in order (--set owners.K.KEY=VALUE reaches owner K).")
    output: Output = key(Output(), "What a run writes besides the tables.")
    market: Market | None = key(None, "A market in which owners sell ε to the learner (unset: no market, "
                                      "budgets from privacy.epsilon).")
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
        if self.privacy.sensitivity == "bounds":  # the clip bound is not used: the file reads as it did
            table["privacy"].pop("clip", None)
        if self.market is not None:
            table["privacy"].pop("epsilon", None)
            if self.market.mode == "static":  # a static market's file reads as before the market in time
                for key, unused in DYNAMIC_KEYS.items():  # (a sweep's base may set them for its cells)
                    if table["market"].get(key) == unused:
                        table["market"].pop(key)
        return table

    def to_toml(self) -> str:
        """The fully resolved scenario as TOML; loading it reproduces this scenario exactly."""
        return tomli_w.dumps(self.resolved_table())



# The keys of the market in time (market.mode = "dynamic"), with their values that mean "unused".
DYNAMIC_KEYS = {"mode": "static", "payment": "on_compute", "period": 1.0, "rule": "fixed",
                "arrival_rate": 0.0, "pool": 0}
POSTED = ("posted_price", "stackelberg")  # the policies that post a price per unit ε
