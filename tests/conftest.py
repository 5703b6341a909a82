"""Test-suite configuration: the Hypothesis fuzz suite is deterministic (fixed seeds, as every
statistical test here) and leaves no example database in the checkout."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dpmarket",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("dpmarket")
