"""Small builders shared by the tests: tiny scenarios and statistical checks with derived thresholds."""

from __future__ import annotations

import csv
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
import tomli_w
from scipy import stats

from dpmarket.errors import ScenarioError
from dpmarket.scenario.loading import validate
from dpmarket.scenario.schema import Scenario
from dpmarket.system.reproducibility import differences, event_differences

GOLDEN = Path(__file__).resolve().parent / "golden"  # figures recorded once, compared under the contract

ROOT = Path(__file__).resolve().parents[1]  # the repository

# Three owners of 300 records with 3 features, ρ = 3: the core of every small scenario here. It keeps
# the privacy defaults of releases before issue 25 (the papers' set-up: every owner budgets T answers,
# Ξ from the declared bounds; quantiles 0.999 where a test turns capping or clipping on), so that the
# tests written against it keep their meaning; tests of the defaults build their scenarios without it.
PAPER_PRIVACY = {"split": "horizon", "sensitivity": "bounds", "cap_quantile": 0.999, "clip_quantile": 0.999}
SMALL = {"data": {"owners": 3, "records": 300, "features": 3}, "learner": {"rho": 3.0},
         "privacy": PAPER_PRIVACY}

# A posted-price market with constant forecast terms (no pilot runs): price 1 for a value of 10,
# ε within [0.5, 20], quadratic costs of coefficient 0.5.
FORECAST = {"c0": 0.01, "c1": 0.0, "c2": 2e4}
MARKET = {"policy": "posted_price", "price": 1.0, "value": 10.0, "epsilon_min": 0.5, "epsilon_max": 20.0,
          "costs": {"kind": "quadratic", "coef": 0.5}, "forecast": FORECAST}
# MARKET's terms with every policy's lever set (each policy reads its own); the caller picks the policy.
EVERY_LEVER = {**{k: v for k, v in MARKET.items() if k != "policy"}, "offer_epsilon": 2.0, "budget": 5.0,
               "winners": 2, "price_per_record": 0.01}

OFFERED_MARKET = {**MARKET, "offer_epsilon": 2.0}  # every policy of the market stage can settle it

def merged(table: dict, sections: dict) -> dict:
    """``table`` with ``sections`` merged in: a dict into the section of its name, anything else
    in place of it (a new table; ``table`` is left as it was)."""
    table = dict(table)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(table.get(key), dict):
            table[key] = {**table[key], **value}
        else:
            table[key] = value
    return table


def tiny(**sections) -> Scenario:
    """A small valid scenario; keyword arguments are merged into its sections.

    It keeps the correlated generator with an intercept (the defaults before conditioned data),
    so that the many tests written against it keep their meaning; tests of the defaults say so.
    """
    table = merged(SMALL, {"name": "tiny", "seed": 3, "data": {"generator": "correlated"},
                           "model": {"intercept": True}, "learner": {"iterations": 60},
                           "output": {"metric_points": 10, "plots": False}})
    return validate(merged(table, sections), "test")


def refusal(sections: dict, file: str = "bad.toml") -> ScenarioError:
    """The ScenarioError that validating a three-owner scenario with ``sections`` merged in raises
    (read as ``file``); fails the test if it validates."""
    table = merged({"name": "b", "data": {"owners": 3, "records": 300}}, sections)
    try:
        validate(table, file)
    except ScenarioError as err:
        return err
    raise AssertionError(f"{sections} validated")


def small_toml(**sections) -> str:
    """The text of a small scenario file: :data:`SMALL` (the package's default generator) with
    ``sections`` merged in, for tests that hand a file to the command line."""
    return tomli_w.dumps(merged(SMALL, sections))


def tiny_toml(**sections) -> str:
    """The file most command-line tests run: "tiny", seed 5, 80 iterations, 20 metric points,
    no figures; ``sections`` are merged in (``output={"plots": True}`` draws them)."""
    table = merged(SMALL, {"name": "tiny", "seed": 5, "learner": {"iterations": 80},
                           "output": {"metric_points": 20, "plots": False}})
    return tomli_w.dumps(merged(table, sections))


def market_toml(**market) -> str:
    """A file of :data:`MARKET` ("m", seed 4, 60 iterations) with ``market`` changes to its terms."""
    return small_toml(name="m", seed=4, learner={"iterations": 60},
                      output={"metric_points": 10, "plots": False}, market={**MARKET, **market})


def budgeted_market_toml() -> str:
    """"tinymarket" (seed 5, 60 iterations): a posted price under a budget of 3 to owners of
    lognormal cost coefficients, ε at least 0.5; the file of the market and forecast commands' tests."""
    market = {"policy": "posted_price", "price": 1.0, "value": 10.0, "budget": 3.0, "offer_epsilon": 2.0,
              "epsilon_min": 0.5, "forecast": FORECAST,
              "costs": {"kind": "quadratic", "coef": 0.5, "distribution": "lognormal", "sigma": 0.5}}
    return small_toml(name="tinymarket", seed=5, learner={"iterations": 60}, output={"plots": False},
                      market=market)


def reproduces(actual: str, expected: str, what: str) -> None:
    """Asserts that ``actual`` reproduces ``expected``, a text recorded earlier (perhaps on another
    machine), under the reproducibility contract (:mod:`dpmarket.system.reproducibility`): the words
    and integers exactly, every other figure within the contract's tolerance or the precision it is
    printed with; an ``events.csv`` (``what`` names the file) row by row, its schedule exactly. Every
    comparison with a stored figure goes through here, never through a hash."""
    found = (event_differences if what.endswith("events.csv") else differences)(expected, actual)
    assert not found, f"{what} does not reproduce the recorded figures:\n" + "\n".join(found)


def wait_for(condition, timeout: float = 60.0):
    """Poll ``condition`` until it returns something true (returned), or fail after ``timeout`` s.
    Tests wait for what they wait for, never a fixed time: the deadline is only patience, generous
    for a machine whose cores other jobs share."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"still waiting after {timeout} s")


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux: from /proc; any of its threads may have started them)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(FileNotFoundError, ProcessLookupError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """``pid``'s whole process tree stopped (SIGSTOP) for the block and continued after (SIGCONT), so
    that what the test checks in the block cannot change under it, whatever the machine's load. Each
    process is stopped before its children are read (a stopped process starts none). A signal sent
    to a stopped process waits, and is handled once it continues."""
    tree, todo = [], [pid]
    while todo:
        member = todo.pop()
        with suppress(ProcessLookupError):
            os.kill(member, signal.SIGSTOP)
            tree.append(member)
        wait_for(lambda member=member: _stopped(member), timeout=300)
        todo += children(member)
    try:
        yield
    finally:
        for member in tree:
            with suppress(ProcessLookupError):
                os.kill(member, signal.SIGCONT)


def _stopped(pid: int) -> bool:
    """Stopped, or gone (its state letter in /proc: T, or no such process)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "TtZX"
    except (FileNotFoundError, ProcessLookupError):
        return True


def clip_l1(grads: np.ndarray, bound: float) -> np.ndarray:
    """Reference per-example clipping on the full (n, p) gradient matrix: each row scaled down to
    L1 norm ≤ ``bound`` (with the package's 10⁻¹² margin). The package clips margins instead, in
    one pass; the tests compare the two."""
    norms = np.abs(grads).sum(axis=1)
    factor = np.minimum(1.0, bound * (1.0 - 1e-12) / np.maximum(norms, np.finfo(float).tiny))
    return grads * factor[:, None]


def ks_accepts(samples: np.ndarray, dist, alpha: float = 1e-4) -> bool:
    """Kolmogorov–Smirnov: the sample fits ``dist`` at level ``alpha`` (critical value from n)."""
    result = stats.kstest(samples, dist.cdf)
    return bool(result.pvalue > alpha)


def chi2_accepts(counts: np.ndarray, probabilities: np.ndarray, alpha: float = 1e-4) -> bool:
    """Pearson chi-square goodness of fit of ``counts`` to ``probabilities`` at level ``alpha``."""
    counts = np.asarray(counts, dtype=float)
    expected = counts.sum() * np.asarray(probabilities, dtype=float)
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    return statistic < stats.chi2.ppf(1 - alpha, len(counts) - 1)


def mean_within(samples: np.ndarray, theory: float, z: float = 5.0) -> bool:
    """The sample mean is within ``z`` standard errors (estimated from the sample) of ``theory``."""
    se = np.std(samples, ddof=1) / np.sqrt(len(samples))
    return bool(abs(np.mean(samples) - theory) <= z * se)


def proportion_within(successes: int, trials: int, p: float, z: float = 5.0) -> bool:
    """A binomial proportion is within ``z`` standard errors (from the theory p) of p."""
    se = np.sqrt(p * (1 - p) / trials)
    return bool(abs(successes / trials - p) <= z * se)


def saved_replications(directory: Path) -> dict[tuple[int, int], dict]:
    """Every replication saved in an experiment directory's ``tasks/`` (a file per task, or per
    replication as older versions wrote them), by (cell, replication)."""
    found = {}
    for path in sorted((Path(directory) / "tasks").glob("c*.json")):
        document = json.loads(path.read_bytes())
        for record in document.get("records", [document]):
            found[record["cell"], record["replication"]] = record
    return found


def answers_outside_membership(rows) -> list[str]:
    """The ``response`` rows of a market in time whose owner was not taking part at that instant,
    by its own ``join`` and ``leave`` rows (events.csv rows as dicts, in the log's order: a row
    logged after a leave at the same time comes after it). An answer outside the market would be
    paid and charged for an owner that had left (issue 24)."""
    member: dict[str, bool] = {}
    found = []
    for r in rows:
        if r["kind"] in ("join", "leave"):
            member[r["owner"]] = r["kind"] == "join"
        elif r["kind"] == "response" and not member.get(r["owner"], False):
            found.append(f"owner {r['owner']} answered at t = {r['time']} outside the market")
    return found


# ------------------------------------------------------------------ experiments (tests/experiment/)

GRID = ["privacy.epsilon=1,10", "data.records=200,400"]
SWEEP_FILES = ("sweep.csv", "sweep_owners.csv")


def plan(kind="sweep", grid=GRID, replications=3, **sections):
    """An experiment's plan on :func:`tiny` (``sections`` change it): a sweep over ``grid``, or
    ``kind="replications"``."""
    from dpmarket.experiment.study import make_plan

    return make_plan(kind, tiny(**sections), grid if kind == "sweep" else [], replications, "t.toml")


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def files(directory: Path, names=SWEEP_FILES) -> dict[str, bytes]:
    return {n: (directory / n).read_bytes() for n in names}


def published(directory: Path) -> dict[str, bytes]:
    """Every result file of an experiment directory, with the JSON document's how-it-was-made
    keys (executor, workers, scheduler, reused replications, wall time) left out."""
    from dpmarket.experiment import publish

    out = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            out[path.name] = path.read_bytes()
    for name in ("sweep.json", "summary.json"):
        if name in out:
            out[name] = json.dumps(publish.what_was_computed(json.loads(out[name]))).encode()
    return out


def market_scenario(owners: list | None = None, **market) -> Scenario:
    """3 tiny owners in :data:`OFFERED_MARKET` (``market`` changes it); owner 2 is so averse (c = 10)
    that a price of 1 cannot buy ε_min = 0.5... almost."""
    specs = owners if owners is not None else [{}, {}, {"cost_coef": 10.0}]
    return tiny(market={**OFFERED_MARKET, **market}, owners=specs)


def copies_chain(owners: int, pull: float, kicks, clip: bool = False, fixed: bool = False,
                 replications: int = 4000, updates: int = 1000) -> tuple[np.ndarray, float]:
    """Algorithm 1's copies on one coordinate (θmax = 1, θ* = 0): owners asked uniformly, each copy's
    step pulled towards 0 by (N+1)·pull and kicked by owner i's ``kicks[i]`` (a scalar: every owner
    alike) times fresh Laplace noise of unit variance — or, with ``fixed``, by ``kicks[i]`` itself at
    every exchange (an owner's gradient at θ*) — and clipped to [−1, 1] with ``clip``. Returns θ_L²
    per replication and E m², m the mean of the N + 1 copies."""
    gen = np.random.default_rng(29)
    kicks = np.broadcast_to(np.asarray(kicks, dtype=float), (owners,))
    theta, copy, rows = np.zeros(replications), np.zeros((replications, owners)), np.arange(replications)
    for _ in range(updates):
        i = gen.integers(0, owners, replications)
        bar = 0.5 * (theta + copy[rows, i])
        noise = 1.0 if fixed else gen.laplace(0.0, 1.0 / np.sqrt(2.0), replications)
        step = bar - (owners + 1) * pull * bar + kicks[i] * noise
        theta = bar
        copy[rows, i] = np.clip(step, -1.0, 1.0) if clip else step
    mean = (theta + copy.sum(axis=1)) / (owners + 1)
    return theta**2, float(np.mean(mean**2))


class HangError(AssertionError):
    """Raised by :func:`deadline`: the block did not end in time (it would have hung)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail the block with :class:`HangError` if it runs longer than ``seconds`` of wall time (main thread,
    POSIX): a test of a refusal that used to hang fails on the old code instead of hanging itself."""
    def expire(signum, frame):
        raise HangError(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
