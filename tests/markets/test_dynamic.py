"""The market in time (market.mode = "dynamic"): closed forms, the privacy bill, utilities, determinism,
bad inputs."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import numpy as np
import pytest
from helpers import answers_outside_membership, tiny
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmarket.cli import main
from dpmarket.errors import MarketError
from dpmarket.markets.costs import Cost
from dpmarket.markets.dynamic import DynamicMarket
from dpmarket.output.summary import owner_rows
from dpmarket.output.timeseries import market_series
from dpmarket.runs.dynamic import NOT_A_MEMBER
from dpmarket.runs.replications import batched, replayable
from dpmarket.runs.run import execute

MARKET = {"policy": "posted_price", "price": 1.0, "value": 10.0, "epsilon_min": 0.5, "epsilon_max": 20.0,
          "costs": {"kind": "quadratic", "coef": 0.5}, "forecast": {"c0": 0.01, "c1": 0.0, "c2": 2e4}}
REQUEST = {"mode": "request", "transmission_time": 0.01, "latency": 0.005, "loss_probability": 0.2}
MARKET_ROWS = {"price", "payment", "join", "leave"}


def scenario(network=None, owners=None, privacy=None, seed=3, iterations=60, **market):
    """3 tiny owners; owner 2 (c = 10) declines a price of 1 (its best ε, 0.5, costs more than it pays)."""
    sections = {"market": {**MARKET, **market},
                "owners": owners if owners is not None else [{}, {}, {"cost_coef": 10.0}],
                "learner": {"iterations": iterations, "rho": 3.0}}
    if owners is not None and len(owners) > 3:
        sections["data"] = {"owners": len(owners)}
    if network:
        sections["network"] = network
    if privacy:
        sections["privacy"] = privacy
    s = tiny(**sections)
    return s.model_copy(update={"seed": seed})


def run(s, path: Path):
    """Run ``s``, events to ``path``; the result and the rows of events.csv. Every answer of a market
    in time is checked to come from an owner taking part at that instant."""
    result = execute(s, path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if s.market is not None and s.market.mode == "dynamic":
        assert answers_outside_membership(rows) == []
    return result, rows


def schedule(rows):
    """The rows of a run that are not the market's, without the market's column."""
    return [{k: v for k, v in r.items() if k != "amount"} for r in rows if r["kind"] not in MARKET_ROWS]


# --- the fixed price equals the static posted price --------------------------------------------------

CAPPED = {"split": "capped", "cap": 5}  # each owner's budget is spent after 5 answers, well before T


@pytest.mark.parametrize("network", [None, REQUEST])
def test_a_fixed_price_with_nothing_changing_is_the_static_posted_price(tmp_path, network):
    static, static_rows = run(scenario(network, privacy=CAPPED), tmp_path / "static.csv")
    dynamic, rows = run(scenario(network, privacy=CAPPED, mode="dynamic"), tmp_path / "dynamic.csv")
    assert schedule(rows) == static_rows  # the same exchanges, draw for draw
    assert dynamic.training.metrics == static.training.metrics
    before, after = owner_rows(static), owner_rows(dynamic)
    assert [r["participates"] for r in after] == [r["participates"] for r in before] == [True, True, False]
    for b, a in zip(before, after, strict=True):
        assert a["epsilon"] == b["epsilon"] and a["epsilon_spent"] == b["epsilon_spent"]
        # every budget was spent, so paying p per unit ε answer by answer pays the static p·ε_i
        assert a["payment"] == pytest.approx(b["payment"], rel=1e-12, abs=0)
        assert a["utility"] == pytest.approx(b["utility"], rel=1e-12, abs=0)
    # an owner leaves the market when its budget is spent, at the tick where it stops taking part
    retired = [r["owner"] for r in rows if r["detail"] == "budget spent: stops taking part"]
    assert [r["owner"] for r in rows if r["kind"] == "leave"] == retired and retired
    # a wrong input: another price sells other budgets and pays other amounts
    other, _ = run(scenario(network, privacy=CAPPED, mode="dynamic", price=1.2), tmp_path / "other.csv")
    assert owner_rows(other)[0]["payment"] != pytest.approx(before[0]["payment"], rel=1e-6)


def test_a_budget_not_spent_is_paid_per_unit_of_epsilon_spent(tmp_path):
    """T ends the run first: each owner is paid p times the ε it spent, not the ε it sold."""
    result, _ = run(scenario(REQUEST, mode="dynamic", price=1.5), tmp_path / "e.csv")
    for row in owner_rows(result):
        assert row["epsilon_spent"] < row["epsilon"] or not row["participates"]
        assert row["payment"] == pytest.approx(1.5 * row["epsilon_spent"], rel=1e-12, abs=1e-15)


# --- pay on delivery pays (1 − loss share) of pay on compute ---------------------------------------

WILLING = [{}, {}, {}]  # three owners at c = 0.5: ε = 2 each


def delivered_share(rows, owner: str) -> float:
    """Updates over responses of ``owner``: the share of its computed answers the learner received."""
    kinds = [r["kind"] for r in rows if r["owner"] == owner]
    return kinds.count("update") / kinds.count("response")


@pytest.mark.parametrize("seed", [3, 4])
def test_pay_on_delivery_pays_one_minus_the_loss_share_of_pay_on_compute(tmp_path, seed):
    compute, compute_rows = run(scenario(REQUEST, WILLING, mode="dynamic"), tmp_path / "c.csv")
    delivery, rows = run(scenario(REQUEST, WILLING, seed=seed, mode="dynamic", payment="on_delivery"),
                         tmp_path / "d.csv")
    paid_compute = [r["payment"] for r in owner_rows(compute)]
    paid_delivery = [r["payment"] for r in owner_rows(delivery)]
    lost = [r["payment_lost"] for r in owner_rows(delivery)]
    same = schedule(rows) == schedule(compute_rows)
    assert same == (seed == 3)  # common random numbers: the same seed, the same schedule
    shares = [delivered_share(rows, str(i)) for i in range(3)]
    assert min(shares) < 1  # losses happened
    expected = [share * paid for share, paid in zip(shares, paid_compute, strict=True)]
    matches = np.allclose(paid_delivery, expected, rtol=1e-12, atol=0)
    assert matches == same  # the identity holds on the same schedule, and fails on another
    if same:
        assert "leave" not in {r["kind"] for r in rows}
        assert np.allclose(np.add(paid_delivery, lost), paid_compute, rtol=1e-12, atol=0)


# --- the privacy bill and the owners' utilities, whatever the market does -------------------------

def violations(rows, owners) -> list[str]:
    """What breaks the rules in a run's events: an owner answering when the answer, paid at the
    price in force, would leave its utility negative; an owner taking part on after an answer lost
    on the way left its utility at the price in force negative, instead of leaving at that loss;
    ε spent beyond the budget sold."""
    coef = {str(o["owner"]): o["cost_coef"] for o in owners}
    price, paid, spent, found = None, dict.fromkeys(coef, 0.0), dict.fromkeys(coef, 0.0), []
    owed, taking_part, must_leave = dict.fromkeys(coef, 0.0), dict.fromkeys(coef, False), None
    step, sold = dict.fromkeys(coef, 0.0), {str(o["owner"]): o["epsilon"] for o in owners}
    for r in rows:
        who, kind = r["owner"], r["kind"]
        if must_leave is not None and kind != "tick":
            if (kind, who) != ("leave", must_leave):
                found.append(f"owner {must_leave} took part on with a negative utility at t = {r['time']}")
            must_leave = None
        if kind == "price":
            price = float(r["amount"])
        elif kind in ("join", "leave"):
            taking_part[who] = kind == "join"
        elif kind == "payment":
            paid[who] += float(r["amount"])
            owed[who] = 0.0
        elif kind in ("collision", "loss") and owed[who] > 0:  # the answer on the way is never paid for
            owed[who] = 0.0
            after = spent[who] + step[who]  # the next answer, paid at the price in force
            cost = float(Cost("quadratic", coef[who])(after))
            can_pay = after <= sold[who] * (1 + 1e-12)
            if taking_part[who] and can_pay and paid[who] + price * step[who] - cost < -1e-9:
                must_leave = who
        elif kind == "response":
            now = float(r["epsilon_spent"])
            cost = float(Cost("quadratic", coef[who])(now))
            step[who] = now - spent[who]
            owed[who] = price * step[who]
            if paid[who] + owed[who] - cost < -1e-9:
                found.append(f"owner {who} answered at a loss at t = {r['time']}")
            spent[who] = now
    for o in owners:
        if o["epsilon_spent"] > o["epsilon"] * (1 + 1e-12):
            found.append(f"owner {o['owner']} spent {o['epsilon_spent']} of a budget {o['epsilon']}")
    return found


@settings(max_examples=25, deadline=None)
@given(price=st.floats(0.3, 4.0), period=st.floats(0.05, 3.0), cap=st.integers(2, 12),
       coef=st.lists(st.floats(0.05, 3.0), min_size=3, max_size=3),
       rule=st.sampled_from(["fixed", "progress"]),
       payment=st.sampled_from(["on_compute", "on_delivery"]), budget=st.none() | st.floats(0.5, 20.0))
def test_no_owner_exceeds_its_budget_or_answers_at_a_loss(tmp_path_factory, price, period, cap, coef, rule,
                                                           payment, budget):
    owners = [{"cost_coef": c} for c in coef]
    extra = {} if budget is None else {"budget": budget}
    s = scenario(REQUEST, owners, {"split": "capped", "cap": cap}, iterations=40, mode="dynamic",
                 price=price, period=period, rule=rule, payment=payment, **extra)
    path = tmp_path_factory.mktemp("fuzz") / "events.csv"
    try:
        result, rows = run(s, path)
    except MarketError:  # nobody takes part at that price: refused before training
        return
    table = owner_rows(result)
    assert violations(rows, table) == []
    for o in result.owners:  # the ledger: never beyond the budget sold
        assert o.epsilon_spent <= o.epsilon * (1 + 1e-12)
    if payment == "on_compute":
        assert all(r["utility"] >= -1e-9 for r in table)
    else:  # the owner bears its lost answers, and no more: it never answered at an expected loss
        assert all(r["utility"] + r["payment_lost"] >= -1e-9 for r in table)
    if budget is not None:
        assert sum(r["payment"] for r in table) <= budget * (1 + 1e-12)


def test_the_check_finds_an_owner_paid_too_little(tmp_path):
    """The fuzz test's check itself fails on a run whose payments were tampered with."""
    result, rows = run(scenario(REQUEST, WILLING, mode="dynamic"), tmp_path / "e.csv")
    table = owner_rows(result)
    assert violations(rows, table) == []
    tampered = [{**r, "amount": str(float(r["amount"]) * 0.01)} if r["kind"] == "payment" else r
                for r in rows]
    assert violations(tampered, table)
    overspent = [{**table[0], "epsilon_spent": table[0]["epsilon"] * 1.01}, *table[1:]]
    assert violations(rows, overspent)


# --- only members answer ---------------------------------------------------------------------------

@pytest.mark.parametrize("network, payment", [
    (REQUEST, "on_compute"), (REQUEST, "on_delivery"),
    ({"mode": "broadcast", "transmission_time": 0.01, "latency": 0.005, "broadcast_interval": 0.2},
     "on_compute"),
])
def test_every_answer_comes_from_an_owner_taking_part_at_that_instant(tmp_path, network, payment):
    """Issue 24: a query arrives a round trip after its owner asked (or at the next broadcast slot);
    a repricing in between could make the owner leave, and it answered anyway (paid and charged
    outside the market: 5 or 6 answers in each of these runs). Progress runs repricing every time
    unit, hundreds of leaves: every answer is a member's (run() checks each), and an owner that left
    before its query came declines it (a refusal row)."""
    owners = [{"cost_coef": c} for c in (0.1, 0.2, 0.3, 0.4, 0.1)]
    s = scenario(network, owners, mode="dynamic", rule="progress", period=1.0, iterations=1500,
                 payment=payment, privacy={"split": "capped"})
    _, rows = run(s, tmp_path / "e.csv")
    assert sum(r["kind"] == "leave" for r in rows) > 100 and sum(r["kind"] == "response" for r in rows) > 1000
    declined = [r for r in rows if r["detail"] == NOT_A_MEMBER]
    assert declined and all(r["kind"] == "refusal" for r in declined)
    # the check itself: a response moved after its owner's leave is found
    leave = next(i for i, r in enumerate(rows) if r["kind"] == "leave")
    who = rows[leave]["owner"]
    moved = rows[:leave + 1] + [{**rows[leave], "kind": "response"}] + rows[leave + 1:]
    assert answers_outside_membership(moved) == [f"owner {who} answered at t = {rows[leave]['time']} "
                                                 "outside the market"]


# --- a market in time that stalls ------------------------------------------------------------------

def test_a_market_whose_owners_all_went_offline_stops_after_its_stall_rule(tmp_path):
    """Every owner offline from t = 5 until 10⁹, no horizon: the engine sleeps, but the progress rule
    repriced every period for ever. It stops after STALL_REPRICINGS repricings without an update."""
    from dpmarket.markets.dynamic import STALL_REPRICINGS

    network = {**REQUEST, "outages": [{"start": 5.0, "end": 1e9}]}
    s = scenario(network, WILLING, mode="dynamic", rule="progress", period=1.0, iterations=10**6)
    result, rows = run(s, tmp_path / "e.csv")
    assert result.stop_reason == f"stalled: {STALL_REPRICINGS:,} repricings without an update"
    last_update = max(float(r["time"]) for r in rows if r["kind"] == "update")
    prices = [float(r["time"]) for r in rows if r["kind"] == "price"]
    assert last_update < 6.0 and len(prices) <= STALL_REPRICINGS + 10
    assert max(prices) == pytest.approx(STALL_REPRICINGS + int(last_update), abs=2.0)


def test_the_progress_rule_measures_the_model_only_when_it_changed(tmp_path, monkeypatch):
    """The same model has the same ψ: a period without an update reuses the last measurement (the
    events are those of measuring every period: the same bytes)."""
    from dpmarket.runs import dynamic as dynamic_run

    calls = []
    real = dynamic_run.public_quality

    def counted(*args):
        quality = real(*args)
        return lambda theta: calls.append(1) or quality(theta)

    s = scenario(REQUEST, WILLING, mode="dynamic", rule="progress", period=0.01, iterations=100, value=1.0)
    with monkeypatch.context() as always:  # the reference measures at every period
        start, ticks = DynamicMarket.start, itertools.count()
        always.setattr(DynamicMarket, "start", lambda self, *a: start(self, *a[:4], lambda: next(ticks)))
        execute(s, tmp_path / "always.csv")
    monkeypatch.setattr(dynamic_run, "public_quality", counted)
    _, rows = run(s, tmp_path / "e.csv")
    repricings = sum(r["kind"] == "price" for r in rows) - 1
    assert len(calls) <= 1 + 100 < repricings  # the opening, then at most once per update
    assert (tmp_path / "e.csv").read_bytes() == (tmp_path / "always.csv").read_bytes()


def test_a_period_no_network_can_follow_is_refused(tmp_path, capsys):
    """market.period = 1e-9 never ended: a billion repricings per exchange."""
    path = tmp_path / "s.toml"
    path.write_text(scenario().to_toml())
    args = ["run", str(path), "--out", str(tmp_path / "out"), "--set", "market.mode='dynamic'", "--set",
            "market.rule='progress'", "--set", "market.period=1e-9"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "market.period = 1e-09: reprices more than 1,000 times per exchange" in err
    assert not (tmp_path / "out").exists()


# --- determinism, arrivals, the adaptive rule ------------------------------------------------------

def test_market_events_are_deterministic_per_seed(tmp_path):
    s = scenario(REQUEST, WILLING + [{}], mode="dynamic", rule="progress", payment="on_delivery",
                 period=0.5, pool=1, arrival_rate=0.5)
    execute(s, tmp_path / "a.csv")
    execute(s, tmp_path / "b.csv")
    execute(s.model_copy(update={"seed": 4}), tmp_path / "c.csv")
    a, b, c = ((tmp_path / f"{n}.csv").read_bytes() for n in "abc")
    assert a == b and a != c
    kinds = {line.split(b",")[1] for line in a.splitlines()[1:]}
    assert {b"price", b"payment", b"join"} <= kinds


def test_pool_owners_arrive_over_time_and_join_at_the_price(tmp_path):
    s = scenario(REQUEST, WILLING + [{}, {}], mode="dynamic", pool=2, arrival_rate=2.0)
    result, rows = run(s, tmp_path / "e.csv")
    joins = [r for r in rows if r["kind"] == "join"]
    assert [r["owner"] for r in joins if r["detail"] == "opening"] == ["0", "1", "2"]
    arrived = [r for r in joins if r["detail"] == "arrived"]
    assert [r["owner"] for r in arrived] == ["3", "4"] and all(float(r["time"]) > 0 for r in arrived)
    assert sum(1 for r in rows if r["kind"] == "update" and r["owner"] in {"3", "4"}) > 0


def test_the_progress_rule_moves_the_price_and_owners_follow(tmp_path):
    s = scenario(REQUEST, WILLING, mode="dynamic", rule="progress", period=0.5, iterations=200, value=1.0)
    result, rows = run(s, tmp_path / "e.csv")
    prices = [float(r["amount"]) for r in rows if r["kind"] == "price"]
    assert len(set(prices)) > 1 and min(prices) >= 0.1 - 1e-12 and max(prices) <= 10.0 + 1e-12
    assert all("public psi" in r["detail"] for r in [r for r in rows if r["kind"] == "price"][1:])


def test_market_series_reads_price_participants_and_spend(tmp_path):
    out = tmp_path / "run"
    s = scenario(REQUEST, WILLING, mode="dynamic", rule="progress", period=0.5)
    path = tmp_path / "s.toml"
    path.write_text(s.to_toml())
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    with open(out / "events.csv", newline="") as f:
        assert answers_outside_membership(csv.DictReader(f)) == []
    series = market_series(out)
    summary_paid = sum(r["payment"] for r in csv_rows(out / "owners.csv", float))
    assert series.spend[-1] == pytest.approx(summary_paid, rel=1e-12)
    assert series.participants[0] >= 0 and series.participants.max() <= 3
    assert np.all(np.diff(series.time) >= 0) and len(series.psi) > 1


def csv_rows(path: Path, kind):
    with open(path, newline="") as f:
        return [{"payment": kind(r["payment"])} for r in csv.DictReader(f)]


def test_dynamic_runs_are_never_replayed():
    static = scenario(REQUEST)
    dynamic = scenario(REQUEST, mode="dynamic")
    assert replayable(static) and batched(static, 5)
    assert not replayable(dynamic) and not batched(dynamic, 5)


def test_a_static_scenario_file_does_not_mention_the_market_in_time():
    from dpmarket.scenario.schema import DYNAMIC_KEYS

    assert not set(DYNAMIC_KEYS) & set(scenario().resolved_table()["market"])
    assert set(DYNAMIC_KEYS) <= set(scenario(mode="dynamic").resolved_table()["market"])


# --- bad input: one line naming the key, exit 2, nothing written -----------------------------------

@pytest.mark.parametrize("sets, key", [
    (["market.mode=dynamic", "market.period=0"], "market.period"),
    (["market.mode=dynamic", "market.period=-2"], "market.period"),
    (["market.mode=dynamic", "market.arrival_rate=0.5"], "market.arrival_rate"),
    (["market.mode=dynamic", "market.rule='progress'", "market.value=0"], "market.value"),
    (["market.rule='progress'"], "market.rule"),
    (["market.mode=dynamic", "market.policy='auction'", "market.offer_epsilon=2"], "market.policy"),
])
def test_bad_dynamic_settings_are_one_line_exit_2_nothing_written(tmp_path, capsys, sets, key):
    path = tmp_path / "s.toml"
    path.write_text(scenario().to_toml())
    args = ["run", str(path), "--out", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key} = " in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_switching_a_dynamic_scenario_back_to_static_names_market_mode(tmp_path, capsys):
    """The file's pool and arrival rate are the market in time's; the key the user just changed is
    market.mode, and the message names it (it named market.arrival_rate, which the user never touched)."""
    path = tmp_path / "s.toml"
    path.write_text(scenario(REQUEST, WILLING + [{}], mode="dynamic", pool=1, arrival_rate=0.5).to_toml())
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--set", "market.mode='static'"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (": market.mode = 'static': market.arrival_rate = 0.5 is set, which only a market in time uses: "
            "remove it, or keep market.mode = 'dynamic'") in err
    assert not out.exists()


def test_an_adaptive_rule_without_public_data_is_refused(tmp_path, capsys, monkeypatch):
    """Table data without a hold-out: nothing public measures the model, so the progress rule is refused."""
    from tests.data.test_table import market_scenario

    monkeypatch.chdir(tmp_path)
    market = 'policy = "posted_price"\nprice = 1.0\nmode = "dynamic"\nrule = "progress"\nvalue = 5.0\n'
    market_scenario(tmp_path, 'standardize = false\n', market)
    assert main(["run", "m.toml", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "market.rule = 'progress'" in err and "public" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.toml", "t.csv"]


def test_an_owner_leaves_at_the_loss_that_sinks_its_utility(tmp_path):
    """Pay-on-delivery: an owner whose first answer is lost has paid its cost and been paid nothing, so
    at a price below its marginal cost it leaves at that loss (a leave row right after it), and it
    bears no more than the payments it lost. The check finds a log with those leave rows removed."""
    lossy = {**REQUEST, "loss_probability": 0.2}
    s = scenario(lossy, WILLING, {"split": "capped", "cap": 3}, mode="dynamic", payment="on_delivery")
    result, rows = run(s, tmp_path / "e.csv")
    table = owner_rows(result)
    after_loss = [r for r in rows if r["kind"] == "leave" and r["detail"].startswith("an answer lost")]
    assert after_loss and violations(rows, table) == []
    assert all(r["utility"] + r["payment_lost"] >= -1e-9 for r in table)
    kept = [r for r in rows if not (r["kind"] == "leave" and r["detail"].startswith("an answer lost"))]
    assert any("took part on with a negative utility" in v for v in violations(kept, table))
