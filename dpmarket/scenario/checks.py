"""Rules that tie several scenario keys together; each failure names the key a user should change.

The schema (:mod:`~dpmarket.scenario.schema`) checks every key alone; :func:`check_consistency`
checks what only makes sense together (a table's keys with ``data.source = "table"``, δ > 0 where an
accountant needs it, a policy's settings, the market in time's keys), after validation.
"""

from __future__ import annotations

from typing import Any

from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.scenario.messages import short as _short
from dpmarket.scenario.schema import (
    CLASSIFICATION_KINDS,
    DYNAMIC_KEYS,
    POSTED,
    SYNTHETIC_ONLY,
    TABLE_ONLY,
    Market,
    Scenario,
    Table,
)


def check_consistency(s: Scenario, source: str, *, swept: bool = False) -> None:
    """Rules that tie several keys together; each names the key a user should change.

    ``swept``: ``s`` is the base of a sweep, whose grid gives each cell its own values; the rules
    are then checked on every cell, where a refusal names the key that cell's grid changed. Checked
    alone, a base made static by default with ``--set market.arrival_rate`` was refused naming
    market.arrival_rate although ``--grid market.mode=dynamic`` switched every cell to a market in
    time (and ``--grid market.mode=static,dynamic`` must name market.mode in its static cell)."""
    if swept:
        return

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
    if p.sensitivity == "bounds" and p.clip != "auto":  # "auto", the default, is no setting of its own
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
    """``"auto"`` is derived for Algorithm 1 (the hinge loss borrows the logistic loss's curvature,
    :func:`dpmarket.data.proxy.step_scenario`)."""
    lr = s.learner
    if lr.rho != "auto":
        return
    if lr.algorithm != "async":
        fail("learner.rho", "auto", f"is derived for Algorithm 1 (async); learner.algorithm = "
             f"{lr.algorithm!r} needs a number")


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


def _check_dynamic(s: Scenario, fail) -> None:
    """The market in time: its keys only in dynamic mode, and what each of them needs."""
    m = s.market
    if m.mode == "static":
        for key, unused in DYNAMIC_KEYS.items():
            if getattr(m, key) != unused:
                if "mode" in m.model_fields_set:  # static in so many words: a dynamic file switched back
                    fail("market.mode", m.mode, f"market.{key} = {getattr(m, key)!r} is set, which only a "
                         "market in time uses: remove it, or keep market.mode = 'dynamic'")
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


# The progress rule reprices every market.period; more repricings than this per exchange, even with
# every owner taking part, and a run is all repricing (market.period = 1e-9 never ended).
REPRICINGS_PER_EXCHANGE = 1000


def fastest_exchanges(s: Scenario) -> float | None:
    """An upper bound of the exchanges per unit of simulated time: the owners' clocks added up (every
    exchange begins at a tick), and in broadcast mode at most one per slot and channel; None where the
    owners are known only once a table is read."""
    if s.data.source != "synthetic":
        return None
    ticks = sum(s.owner_value(i, "clock_rate") for i in range(s.data.owners))
    if s.network.mode == "broadcast":
        return min(ticks, s.network.channels / s.network.broadcast_interval)
    return ticks


def _check_progress(s: Scenario, fail) -> None:
    """The adaptive rule weighs measured progress in money, on public data only, and reprices at a
    pace the network's exchanges can follow."""
    m = s.market
    rate = fastest_exchanges(s)
    if rate is not None and m.period * rate * REPRICINGS_PER_EXCHANGE < 1.0:
        fail("market.period", m.period, f"reprices more than {REPRICINGS_PER_EXCHANGE:,} times per exchange "
             f"even if every owner takes part (at most {rate:.4g} exchanges per unit of time): "
             f"use at least {1.0 / (rate * REPRICINGS_PER_EXCHANGE):.3g}")
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
    if m is None or m.model_value == 0:
        for i, o in enumerate(s.owners):
            if o.own_psi is not None:
                fail(f"owners.{i}.own_psi", o.own_psi, "only used when owners value the model "
                     "(market.model_value > 0)")
    if m is None:
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
