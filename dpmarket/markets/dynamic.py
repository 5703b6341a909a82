"""The market in time (``market.mode = "dynamic"``): prices, payments, joins and leaves as events.

The policy's posted price opens the market; then, beside the owners and the learner in the
simulation, the learner pays for each answer (``market.payment``: when the owner computes it, or
only when the learner receives it — the owner's ε is spent either way), reprices every
``market.period`` (``market.rule``), and owners join and leave by their utility. Pool owners
(the last ``market.pool`` of the scenario) arrive at Poisson times. The SimPy layer only
schedules: this module decides, and logs each decision as a row of ``events.csv``.

An owner's **budget** ε_i is fixed when it first joins (its best response to the price then, on
[ε_min, ε_max]) and is its ledger's hard limit: no price, join or leave ever lets its ε spent
exceed it. Its **utility** is payments received − C_i(ε spent) (+ its value of the shared model,
with ``market.model_value``). It takes part while the next answer, paid at the current price,
would leave that utility non-negative: u_next = paid + gain + p·δ_i − C_i(s_i + δ_i) ≥ 0, with δ_i
the ε of one answer. It leaves when that fails, or when its budget is spent; it returns when the
price rises enough. An owner that has not joined yet joins when its best response leaves it a
non-negative utility, as in the static posted price. With a constant price and pay-on-compute,
u_next is the static utility at the ε spent, so nobody ever leaves but for a spent budget: the
static posted-price outcome, paid per answer.

Rules: ``"fixed"`` keeps the price. ``"progress"`` is a controller on the learner's measured
surplus: every period the learner measures ψ of its published model on public data (the public
twin of synthetic data, or the hold-out; never the owners' records), values the period's
progress at value·(ψ_before − ψ_now), and compares it with what it paid in the period. A budget
is fixed when its owner joins, so a price buys participation, not more ε: the price rises by a
factor 1 + STEP when nothing was bought, or when the money bought more value than it cost while
some present owner is out; it falls by that factor when the money bought less than it cost; else
it holds — always within [p₀/BAND, p₀·BAND]. It stops paying for a model that no longer improves;
owners leave as the price falls and come back when it rises.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import numpy as np

from dpmarket.markets.costs import Cost
from dpmarket.markets.forecast import Forecaster
from dpmarket.markets.outcome import Outcome
from dpmarket.markets.sellers import Sellers
from dpmarket.privacy.mechanisms import ComposedLedger
from dpmarket.privacy.owners import DataOwner
from dpmarket.scenario.schema import Market

STEP = 0.25  # the progress rule's price change per period: × 1.25 or ÷ 1.25
# The progress rule's repricings in a row without a single update, after which the run stops ("stalled"):
# nothing the market does brings an exchange (too few owners take part for the network, or none can),
# and a run without a horizon would reprice for ever. At 1,000 repricings per exchange (the most
# validation lets market.period allow with every owner taking part) this is ten exchanges' worth.
STALL_REPRICINGS = 10_000
BAND = 10.0  # the progress rule keeps the price within [p₀/10, 10 p₀]
OUT, IN, GONE = 0, 1, 2  # an owner's state: not taking part now, taking part, budget spent (for good)


def next_charge(owner: DataOwner) -> float:
    """The ε the owner's next answer will charge (its even share, or the accountant's step)."""
    ledger = owner.ledger
    if isinstance(ledger, ComposedLedger):
        return float(ledger.curve.after(ledger.answers + 1)) - ledger.spent_float
    return float(owner.charge)


@dataclass
class Book:
    """Per roster slot: what the market knows of each owner (arrays indexed by slot)."""

    state: list[int]
    present: list[bool]  # arrived (pool owners arrive over time)
    sold: list[float]  # ε_i, fixed at the first join (0 until then)
    paid: list[float]
    pending: list[float]  # pay-on-delivery: owed for the answer in flight, paid if it arrives
    lost: list[float]  # pay-on-delivery: what lost answers would have been paid
    gain: list[float]
    joins: list[int]
    leaves: list[int]
    history: list[tuple[float, float, int, float]] = field(default_factory=list)  # t, price, in, spend


class DynamicMarket:
    """The market process of one run; slots are the roster's (the simulation's owner numbers)."""

    def __init__(self, settings: Market, sellers: Sellers, forecast: Forecaster, opening: Outcome,
                 roster: list[int], *, owners: list[DataOwner], record: Callable,
                 rebuild: Callable[[int, float], DataOwner],
                 measure: Callable[[], float] | None = None) -> None:
        self.m, self.sellers, self.forecast, self.opening = settings, sellers, forecast, opening
        self.roster, self.owners, self.record, self.rebuild = roster, owners, record, rebuild
        self.measure = measure
        self.price = self.opening_price = float(opening.price)
        self.cost = [Cost(sellers.cost.kind, float(np.asarray(sellers.cost.coef)[i])) for i in roster]
        pool = set(roster[len(roster) - settings.pool:]) if settings.pool else set()
        n = len(roster)
        self.book = Book([OUT] * n, [i not in pool for i in roster], [0.0] * n, [0.0] * n, [0.0] * n,
                         [0.0] * n, [0.0] * n, [0] * n, [0] * n)
        self.arrivals_left = [j for j, i in enumerate(roster) if i in pool]
        self.env = None
        self.stop: Callable[[str], None] = lambda reason: None
        self.spent = 0.0  # the learner's payments so far
        self.arrived = 0

    # -- the run ---------------------------------------------------------------------------
    def start(self, env, stop: Callable[[str], None], model: Callable[[], np.ndarray],
              arrivals: np.random.Generator | None, updates: Callable[[], int] = lambda: 0) -> None:
        """Post the opening price, let the opening coalition join, start repricing and arrivals.
        ``updates`` counts the learner's updates (the model changes only there)."""
        self.env, self.stop, self.model, self.updates = env, stop, model, updates
        self._price_row("opening price" if self.m.rule == "fixed" else "opening price (progress rule)")
        for j, i in enumerate(self.roster):
            if self.book.present[j] and self.opening.participates[i]:
                self._join(j, float(self.opening.epsilon[i]), float(self.opening.gain[i]), "opening")
        self._snapshot()
        if self.m.rule == "progress":
            self.last_psi, self.last_spent = self.measure(), 0.0
            env.process(self._reprice())
        if self.arrivals_left:
            env.process(self._arrivals(arrivals))
        self._close_if_stuck()

    def _reprice(self) -> Generator:
        """The progress rule, every period: a step up when the period's money bought more value
        (measured on public data) than it cost, or bought nothing; else a step down. The model is
        measured again only if it changed (an update) since the last period: the same model has the
        same ψ. After :data:`STALL_REPRICINGS` periods in a row without an update the run stops."""
        measured_at, idle = self.updates(), 0
        while True:
            yield self.env.timeout(self.m.period)
            updates = self.updates()
            idle = idle + 1 if updates == measured_at else 0
            if idle >= STALL_REPRICINGS:
                self.stop(f"stalled: {STALL_REPRICINGS:,} repricings without an update")
                return
            psi = self.measure() if updates != measured_at else self.last_psi
            measured_at, spend = updates, self.spent - self.last_spent
            gained = self.m.value * (self.last_psi - psi)
            factor = self._step(gained, spend)
            self.price = float(np.clip(self.price * factor, self.opening_price / BAND,
                                       self.opening_price * BAND))
            self.last_psi, self.last_spent = psi, self.spent
            self._price_row(f"public psi {psi:.6g}: value gained {gained:.4g} "
                            f"{'>' if gained > spend else '<='} paid {spend:.4g}")
            self.review()

    def _step(self, gained: float, spend: float) -> float:
        """The progress rule's price factor. A budget is fixed when its owner joins, so a higher
        price buys participation, not more ε: up when nothing was bought, or when progress was worth
        its cost and a present owner is out; down when it was not; else held."""
        out = any(p and s == OUT for p, s in zip(self.book.present, self.book.state, strict=True))
        if spend == 0 or (gained > spend and out):
            return 1.0 + STEP
        return 1.0 / (1.0 + STEP) if gained <= spend else 1.0

    def _arrivals(self, gen: np.random.Generator) -> Generator:
        """Pool owners arrive one by one, at the times of a Poisson process of ``arrival_rate``."""
        while self.arrivals_left:
            yield self.env.timeout(gen.exponential(1.0 / self.m.arrival_rate))
            j = self.arrivals_left.pop(0)
            self.book.present[j] = True
            self.arrived += 1
            self._consider(j, "arrived")
            self._snapshot()
            self._close_if_stuck()

    def review(self) -> None:
        """At a new price every present owner decides again: stay, leave, join or return."""
        for j in range(len(self.roster)):
            state = self.book.state[j]
            if state == IN and not self._willing(j):
                self._leave(j, OUT, f"utility would fall below 0 at price {self.price:.6g}")
            elif state == OUT and self.book.present[j]:
                self._consider(j, f"price {self.price:.6g}")
        self._snapshot()
        self._close_if_stuck()

    # -- hooks of the simulation -------------------------------------------------------------
    def member(self, j: int) -> bool:
        """Whether owner j takes part now (joined and not left since): only a member answers."""
        return self.book.state[j] == IN

    def takes_part(self, j: int) -> bool:
        """Whether owner j may answer now (called at its tick). An owner whose budget is spent is
        let through once more, so that the simulation logs its refusal and retires it."""
        book = self.book
        if book.state[j] != IN:
            return False
        if self.owners[j].exhausted:
            self._leave(j, GONE, "budget spent")
            self._close_if_stuck()  # the simulation ends only when every owner is spent; the market sooner
            return True
        if not self._willing(j):
            self._leave(j, OUT, f"utility would fall below 0 at price {self.price:.6g}")
        elif not self._affordable(j):
            self._leave(j, OUT, "the learner's budget cannot pay the answer")
        else:
            return True
        self._close_if_stuck()
        return False

    def computed(self, j: int, charged: float, time: float) -> None:
        """Owner j computed an answer charging ``charged`` of ε: paid now, or owed until delivery."""
        book, amount = self.book, self.price * charged
        if self.m.payment == "on_compute":
            self._pay(j, amount, time, "computed")
            return
        book.lost[j] += book.pending[j]  # an answer still owed when the next is computed never arrived
        book.pending[j] = amount

    def delivered(self, j: int, time: float) -> None:
        """The learner received owner j's answer: pay-on-delivery pays what it owed for it."""
        if self.m.payment == "on_delivery" and self.book.pending[j] > 0:
            amount, self.book.pending[j] = self.book.pending[j], 0.0
            self._pay(j, amount, time, "delivered")

    def lost(self, j: int, time: float) -> None:
        """Owner j's answer never reached the learner. Pay-on-delivery owes nothing for it: the owner
        bears the loss (its ε is spent either way). It decides again at once, as at a new price: if
        its utility at the current price (its next answer paid) is now below 0, it leaves then, not
        at its next tick or repricing. It never answers at an expected loss, so its utility stays at
        least −(the payments it lost), whatever the network does."""
        book = self.book
        if self.m.payment != "on_delivery" or book.pending[j] == 0:
            return
        book.lost[j] += book.pending[j]
        book.pending[j] = 0.0
        if book.state[j] == IN and not self.owners[j].exhausted and not self._willing(j):
            why = f"an answer lost on the way: utility would fall below 0 at price {self.price:.6g}"
            self._leave(j, OUT, why)
            self._close_if_stuck()

    def finish(self) -> None:
        """At the end of the run an answer still owed was not delivered: it is lost."""
        for j in range(len(self.roster)):
            self.book.lost[j] += self.book.pending[j]
            self.book.pending[j] = 0.0
        self._snapshot()

    # -- decisions -----------------------------------------------------------------------------
    def _willing(self, j: int) -> bool:
        """u_next ≥ 0: the next answer, paid at the current price, leaves j's utility non-negative."""
        owner, book = self.owners[j], self.book
        delta, spent = next_charge(owner), owner.epsilon_spent
        cost = self.cost[j]
        return book.paid[j] + book.gain[j] + self.price * delta - float(cost(spent + delta)) >= 0.0

    def _affordable(self, j: int) -> bool:
        """Whether the learner's budget (if any) covers what it owes and the next answer."""
        if self.m.budget is None:
            return True
        owed = self.spent + sum(self.book.pending)
        return owed + self.price * next_charge(self.owners[j]) <= self.m.budget

    def _consider(self, j: int, why: str) -> None:
        """An owner out of the market joins (first time: its best response) or returns."""
        if self.book.joins[j] == 0:
            eps = float(self.cost[j].best_response(self.price, self.m.epsilon_min, self.m.epsilon_max))
            gain = self._gain(j, eps)
            if self.price * eps - float(self.cost[j](eps)) + gain >= 0:
                self._join(j, eps, gain, why)
        elif not self.owners[j].exhausted and self._willing(j) and self._affordable(j):
            self._join(j, self.book.sold[j], self.book.gain[j], why)

    def _gain(self, j: int, eps: float) -> float:
        """Owner j's value of the shared model if it joins the owners taking part now (forecast)."""
        s = self.sellers
        if s.model_value == 0:
            return 0.0
        epsilons, members = np.zeros(s.count), np.zeros(s.count, bool)
        for k, i in enumerate(self.roster):
            if self.book.state[k] == IN:
                epsilons[i], members[i] = self.book.sold[k], True
        i = self.roster[j]
        epsilons[i], members[i] = eps, True
        psi = float(self.forecast.coalitions(epsilons, s.records, members)[0])
        return float(s.gains(psi, members)[i])

    def _join(self, j: int, eps: float, gain: float, why: str) -> None:
        book = self.book
        if book.joins[j] == 0:
            book.sold[j], book.gain[j] = eps, gain
            if self.owners[j].epsilon != eps:  # its noise is calibrated to the budget it sells now
                self.owners[j] = self.rebuild(j, eps)
        book.state[j] = IN
        book.joins[j] += 1
        self.record(self._now(), "join", j, eps, self.owners[j].epsilon_spent, why)

    def _leave(self, j: int, state: int, why: str) -> None:
        book = self.book
        book.state[j] = state
        book.leaves[j] += 1
        self.record(self._now(), "leave", j, self.utility(j), self.owners[j].epsilon_spent, why)

    def _pay(self, j: int, amount: float, time: float, how: str) -> None:
        self.book.paid[j] += amount
        self.spent += amount
        self.record(time, "payment", j, amount, self.owners[j].epsilon_spent, how)

    def _close_if_stuck(self) -> None:
        """End the run when nobody takes part and nothing can change that: no arrival to come, and
        a price that cannot rise (the fixed rule, or the progress rule at its ceiling)."""
        if IN in self.book.state or self.arrivals_left:
            return
        if self.m.rule == "progress" and self.price < self.opening_price * BAND:
            return
        self.stop("no owner takes part in the market")

    # -- what happened ---------------------------------------------------------------------------
    def utility(self, j: int) -> float:
        """Owner j's utility so far: payments received − C(ε spent) + its value of the model."""
        if self.book.joins[j] == 0:
            return 0.0
        return self.book.paid[j] - float(self.cost[j](self.owners[j].epsilon_spent)) + self.book.gain[j]

    def _price_row(self, why: str) -> None:
        self.record(self._now(), "price", -1, self.price, None, why)

    def _snapshot(self) -> None:
        self.book.history.append((self._now(), self.price, self.book.state.count(IN), self.spent))

    def _now(self) -> float:
        return float(self.env.now) if self.env is not None else 0.0

    def realized(self) -> Outcome:
        """The market's outcome over the run, per scenario owner: ε sold, payments received, the
        cost of the ε spent, the model's value to it; ``participates``: joined at least once."""
        s, o = self.sellers, self.opening
        eps, pay, cost, gain = (np.zeros(s.count) for _ in range(4))
        joined = np.zeros(s.count, bool)
        for j, i in enumerate(self.roster):
            if self.book.joins[j]:
                eps[i], pay[i], gain[i] = self.book.sold[j], self.book.paid[j], self.book.gain[j]
                joined[i] = True
                cost[i] = float(self.cost[j](self.owners[j].epsilon_spent))
        return Outcome(o.policy, eps, pay, cost, gain, joined, o.psi_forecast, o.value, self.price, o.coef)
