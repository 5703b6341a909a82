"""Scenario files: TOML in, a validated and fully resolved :class:`Scenario` out.

Every default lives in the pydantic schema below and nowhere else. Unknown keys, wrong types
and impossible values are rejected with a :class:`~dpmarket.errors.ScenarioError` naming the
file, the dotted key path and the offending value. ``--set dotted.key=value`` overrides are
applied to the raw table before validation, so they are checked exactly like file contents.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dpmarket.errors import _MISSING, ScenarioError

PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


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


class Data(_Strict):
    """Synthetic owners: how many, how large, how different, and the declared bounds."""

    kind: Literal["length_of_stay", "interest_rate", "card_fraud"] = "interest_rate"
    owners: PosInt = 3
    records: PosInt | list[PosInt] | SizeDistribution = 10_000
    features: PosInt = 10
    shift: NonNegFloat = 0.0
    label_noise: NonNegFloat | None = None
    feature_bound: PosFloat = 1.0
    label_bound: PosFloat = 3.0
    seed: Annotated[int, Field(ge=0)] | None = None


class Model(_Strict):
    """The convex model: loss ℓ, regulariser g(θ) = λθᵀθ, box Θ = {‖θ‖∞ ≤ θmax}."""

    loss: Literal["squared", "logistic", "hinge"] = "squared"
    regularization: PosFloat = 1e-5
    theta_max: PosFloat = 1.0
    intercept: bool = True


class Privacy(_Strict):
    """Owners' budgets and how each answer is made private."""

    epsilon: PosFloat = 1.0
    split: Literal["horizon", "capped"] = "horizon"
    cap: PosInt | None = None
    cap_quantile: Annotated[float, Field(gt=0, lt=1)] = 0.999
    sensitivity: Literal["bounds", "clip"] = "bounds"
    clip: PosFloat | None = None


class Learner(_Strict):
    """The learning algorithm, its horizon T and step constant ρ."""

    algorithm: Literal["async", "sync", "sync_averaged"] = "async"
    iterations: PosInt = 1000
    rho: PosFloat = 1.0
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
    shift: NonNegFloat | None = None
    cap: PosInt | None = None
    clock_rate: PosFloat | None = None
    channel: Annotated[int, Field(ge=0)] | None = None
    mean_online: PosFloat | None = None
    mean_offline: PosFloat | None = None
    outages: list[Window] | None = None


class Output(_Strict):
    """What a run writes besides the tables the contract requires."""

    metric_points: PosInt = 200
    plots: bool = True


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

    def owner_value(self, index: int, key: str) -> Any:
        """An owner's setting: its [[owners]] override if any, else the scenario-wide default."""
        spec = self.owners[index] if index < len(self.owners) else None
        value = getattr(spec, key) if spec is not None else None
        if value is not None:
            return value
        net = self.network
        defaults = {"epsilon": self.privacy.epsilon, "shift": self.data.shift,
                    "cap": self.privacy.cap, "name": None, "records": None,
                    "clock_rate": net.clock_rate, "channel": index % net.channels,
                    "mean_online": net.dropout.mean_online,
                    "mean_offline": net.dropout.mean_offline, "outages": net.outages}
        return defaults[key]

    def to_toml(self) -> str:
        """The fully resolved scenario as TOML; loading it reproduces this scenario exactly."""
        return tomli_w.dumps(self.model_dump(mode="json", exclude_none=True))


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
    if not part.isdigit() or int(part) >= len(node):
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
    if len(s.owners) > s.data.owners:
        fail("owners", f"{len(s.owners)} tables", f"more [[owners]] than data.owners = {s.data.owners}")
    classify = s.data.kind in CLASSIFICATION_KINDS
    if classify == (s.model.loss == "squared"):
        need = "'logistic' or 'hinge'" if classify else "'squared'"
        fail("model.loss", s.model.loss, f"data.kind = {s.data.kind!r} needs {need}")
    p = s.privacy
    if p.sensitivity == "clip" and p.clip is None:
        fail("privacy.clip", _MISSING, "sensitivity = 'clip' needs the L1 bound privacy.clip")
    if p.sensitivity == "bounds" and p.clip is not None:
        fail("privacy.clip", p.clip, "only used with privacy.sensitivity = 'clip'")
    _check_network(s, fail)
    if p.split != "capped":
        if p.cap is not None:
            fail("privacy.cap", p.cap, "only used with privacy.split = 'capped'")
        for i, o in enumerate(s.owners):
            if o.cap is not None:
                fail(f"owners.{i}.cap", o.cap, "only used with privacy.split = 'capped'")


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
    for text_override in overrides:
        keys, value = parse_override(text_override)
        apply_override(table, keys, value, f"{source} (--set {text_override})")
    label = source if not overrides else f"{source} (with --set {' '.join(overrides)})"
    _resolve_trace(table, path, label)
    return validate(table, label)


def _resolve_trace(table: dict, path: Path, source: str) -> None:
    """Make ``network.availability`` absolute (relative to the scenario file) and check it exists."""
    net = table.get("network")
    trace = net.get("availability") if isinstance(net, dict) else None
    if not isinstance(trace, str):
        return
    resolved = Path(trace) if Path(trace).is_absolute() else (path.parent / trace).resolve()
    if not resolved.is_file():
        raise ScenarioError(source, "network.availability", trace, "no such file")
    net["availability"] = str(resolved)
