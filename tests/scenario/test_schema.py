"""Every key alone (dpmarket/scenario/schema.py): a value of the wrong type or out of its range is a
ScenarioError naming the key and the file. Rules that tie several keys together are
tests/scenario/test_checks.py's."""

from __future__ import annotations

import typing

import pytest
from helpers import OFFERED_MARKET, refusal, tiny

from dpmarket.errors import ScenarioError
from tests.schedule.sim.test_engine import build


@pytest.mark.parametrize("network,specs,key", [
    ({"mode": "request", "clock_rate": 0.0}, None, "network.clock_rate"),
    ({"mode": "request", "clock_rate": -1.0}, None, "network.clock_rate"),
    ({"mode": "request"}, [{"clock_rate": -2.0}], "owners.0.clock_rate"),
    ({"mode": "request"}, [{"clock_rate": 0.0}], "owners.0.clock_rate"),
    ({"mode": "request", "loss_probability": 1.0}, None, "network.loss_probability"),
    ({"mode": "request", "loss_probability": 1.5}, None, "network.loss_probability"),
    ({"mode": "request", "loss_probability": -0.1}, None, "network.loss_probability"),
    ({"mode": "request", "channels": 0}, None, "network.channels"),
    ({"mode": "request", "dropout": {"mean_online": 0.0, "mean_offline": 1.0}}, None,
     "network.dropout.mean_online"),
    ({"mode": "request", "outages": [{"start": -1.0, "end": 1.0}]}, None, "network.outages.0.start"),
    ({"mode": "request", "transmission_time": -0.1}, None, "network.transmission_time"),
    ({"mode": "request", "latency": -0.1}, None, "network.latency"),
    ({"mode": "request", "horizon": 0.0}, None, "network.horizon"),
    ({"mode": "request", "max_attempts": 0}, None, "network.max_attempts"),
    ({"mode": "request", "backoff": 0.0}, None, "network.backoff"),
    ({"mode": "radio"}, None, "network.mode"),
    ({"mode": "request", "speed": 3}, None, "network.speed"),
])
def test_bad_network_values_are_rejected_naming_the_key(network, specs, key):
    with pytest.raises(ScenarioError) as err:
        build(network, owners=2, specs=specs)
    assert err.value.key == key and f"test: {key}" in str(err.value)


@pytest.mark.parametrize("privacy, key, says", [
    ({"delta": 1.0}, "privacy.delta", "less than 1"),
    ({"delta": -1e-6}, "privacy.delta", "greater than or equal to 0"),
    ({"accountant": "moments", "delta": 1e-6}, "privacy.accountant", "'basic', 'rdp' or 'pld'"),
    ({"mechanism": "cauchy"}, "privacy.mechanism", "'laplace' or 'gaussian'"),
])
def test_bad_privacy_values_name_the_key(privacy, key, says):
    with pytest.raises(ScenarioError) as err:
        tiny(privacy=privacy)
    assert err.value.key == key and says in str(err.value)


@pytest.mark.parametrize("sections, key", [
    ({"privacy": {"sensitivity": "clip", "clip": 0.0}}, "privacy.clip"),
    ({"privacy": {"sensitivity": "clip", "clip": "sometimes"}}, "privacy.clip"),
    ({"learner": {"auto_stability": 1.5}}, "learner.auto_stability"),
])
def test_bad_automatic_settings_are_refused_naming_the_key(sections, key):
    err = refusal(sections)
    assert err.key == key and "bad.toml" in str(err)


@pytest.mark.parametrize("change, key", [
    ({"market": {**OFFERED_MARKET, "costs": {"kind": "cubic"}}}, "market.costs.kind"),
])
def test_bad_market_values_are_scenario_errors_naming_the_key(change, key):
    with pytest.raises(ScenarioError) as err:
        tiny(**change)
    assert err.value.key == key


# --- counts: every integer key is bounded by what numpy holds exactly (issue 43) ----------------------

SEEDS = {("Scenario", "seed"), ("Data", "seed")}  # identifiers, not counts: numpy seeds from any integer


def _integer_fields() -> list[tuple[type, str, object]]:
    """(table, key, a value just beyond 2^53 of the key's form) for every integer key of the schema."""
    from pydantic import BaseModel

    from dpmarket.scenario.keys import _members, is_model
    from dpmarket.scenario.schema import Scenario

    found, todo, seen = [], [Scenario], set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            for member, _ in _members(field.annotation):
                if is_model(member) and issubclass(member, BaseModel):
                    todo.append(member)
                elif member is int and (model.__name__, name) not in SEEDS:
                    found.append((model, name, 2**53 + 1))
                elif typing.get_origin(member) is list and typing.get_args(member)[0] is not float:
                    inner = [m for m, _ in _members(typing.get_args(member)[0])]
                    if int in inner:
                        found.append((model, name, [2**53 + 1]))
                    todo += [m for m in inner if is_model(m)]
    return found


@pytest.mark.parametrize("model, name, value", _integer_fields(),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_integer_key_is_bounded_by_what_numpy_holds(model, name, value):
    """learner.iterations = 10**40 was numpy's casting error deep inside a run, owners.0.records = 10**40
    an OverflowError: every count a scenario gives is refused beyond 2^53, with the reason."""
    from pydantic import ValidationError

    from dpmarket.system.counts import BEYOND_EXACT

    with pytest.raises(ValidationError) as caught:
        model.model_validate({name: value})
    mine = [e for e in caught.value.errors() if e["loc"][0] == name]
    assert any(BEYOND_EXACT in e["msg"] for e in mine), mine


def test_the_bound_is_named_in_the_scenario_error():
    with pytest.raises(ScenarioError, match=r"learner.iterations = 9007199254740993: at most 2\^53 = "
                                            r"9,007,199,254,740,992: numpy holds counts"):
        tiny(learner={"iterations": 2**53 + 1})
    assert tiny(learner={"iterations": 2**53}).learner.iterations == 2**53
