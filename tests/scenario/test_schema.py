"""Every key alone (dpmarket/scenario/schema.py): a value of the wrong type or out of its range is a
ScenarioError naming the key and the file. Rules that tie several keys together are
tests/scenario/test_checks.py's."""

from __future__ import annotations

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
