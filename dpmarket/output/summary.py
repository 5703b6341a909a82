"""What a run did, as plain rows and a nested summary: owners.csv's rows and summary.json's fields.

Shared by the run directory (:mod:`~dpmarket.output.results`), the report and the notebook API."""

from __future__ import annotations

import numpy as np

from dpmarket.learning.stepsize import STABILITY_LIMIT
from dpmarket.markets.outcome import learner_value
from dpmarket.privacy.guarantee import stated
from dpmarket.runs.diagnostics import after_run
from dpmarket.runs.run import RunResult
from dpmarket.system import reproducibility


def budgets(result: RunResult) -> list[float]:
    """Each owner's budget ε_i in the run: the scenario's, or what it sold in a market (0 if it
    declined)."""
    if result.market is None:
        return [o.epsilon for o in result.owners]
    return [float(e) for e in result.market.outcome.epsilon]


def network_load(result: RunResult) -> dict:
    """What went through the network, for the topology picture: exchanges and collisions per
    owner (scenario index; 0 for owners that declined a market), and per channel its
    utilisation, collided and total transmissions."""
    counts, N = result.training.log.counts_by_owner, len(result.consortium.names)
    channels, horizon = result.network.channels, result.training.time
    return {"exchanges": [counts[("update", i)] for i in range(N)],
            "collisions": [counts[("collision", i)] for i in range(N)],
            "utilisation": [ch.utilisation(horizon) for ch in channels],
            "collided": [ch.collided for ch in channels],
            "transmissions": [ch.transmissions for ch in channels]}


# --- oracle measurements: figures computed from the private records without noise ----------------------

ORACLE_NOTE = ("computed from the owners' private records without noise: measurements for the analyst (how "
               "good the model is, who benefits), not outputs of the protocol, and covered by no ε")
NO_ORACLE_NOTE = "left out (run --no-oracle): these files hold none of the oracle measurements listed"
# The table data report's counts that read the private rows beyond their number (they change between
# neighbouring datasets); the rest (rows read, hold-out, owners left out by size, encoding) is public.
ORACLE_DATA = ("rows_dropped_missing", "missing_by_column", "feature_values_clipped",
               "records_with_clipped_features", "labels_clipped", "unseen_categories")
RUN_ORACLE_KEYS = ("psi_final", "psi_zero", "f_star", "theta_star", "own_psi_median", "owners_benefiting",
                   "step_curvature_max", "psi_floor_predicted", "clipped_share", "psi_simulated",
                   "learner_surplus_simulated")


def oracle_statement(files: dict[str, list[str]], written: bool = True) -> dict:
    """The ``oracle`` key of a summary: which figures of which files are oracle measurements."""
    return {"note": ORACLE_NOTE if written else NO_ORACLE_NOTE, "written": written, **files}


PSI_STATISTICS = ["psi_mean", "psi_median", "psi_q25", "psi_q75", "psi_std", "psi_zero", "own_psi_first",
                  "own_psi_median", "benefit_share_mean"]
# The oracle measurements of the other outputs, by file: a replicated run, a sweep, a policy comparison.
REPLICATIONS_ORACLE = {"summary.json": PSI_STATISTICS, "replications.csv": ["psi_final", "owners_benefiting"],
                       "owners.csv": ["own_psi", "benefit_share"], "metrics.csv": ["psi"],
                       "figures": ["psi_band.png"]}
SWEEP_ORACLE = {"sweep.csv": PSI_STATISTICS + ["forecast"],
                "sweep_owners.csv": ["own_psi", "psi_median", "benefits"],
                "sweep.json": ["forecast"],  # Theorem 2's constants fitted to the cells' ψ
                "figures": ["psi_epsilon.png", "psi_records.png", "collaboration.png", "owner_benefit.png",
                            "convergence.png"]}
MARKET_ORACLE = {"policies.csv": ["psi_mean", "psi_sd", "psi_min", "psi_max", "learner_surplus_simulated"],
                 "figures": ["psi_payment.png"]}


def run_oracle(result: RunResult) -> dict[str, list[str]]:
    """The oracle measurements of a run directory, by file (summary.json keys dotted)."""
    keys = [k for k in RUN_ORACLE_KEYS if k not in ("psi_simulated", "learner_surplus_simulated")
            or result.market is not None]
    if result.consortium.report is not None:
        keys += [f"data.{k}" for k in ORACLE_DATA]
    if result.market is not None and result.scenario.market.pilots.data == "owners" \
            and result.scenario.market.forecast is None:  # pilots on the private records: the deal too
        keys += ["forecast", "psi_forecast", "learner_surplus", "learner_value"]
    figures = ["psi.png"] + (["market_timeline.png"] if result.market is not None
                             and result.market.dynamic is not None else [])
    return {"summary.json": keys, "owners.csv": ["own_psi", "benefits"], "metrics.csv": ["psi"],
            "figures": figures}


def _present(document: dict, key: str) -> bool:
    """Whether the dotted ``key`` is in ``document``."""
    head, _, rest = key.partition(".")
    return head in document and (not rest or rest in (document[head] or {}))


def public_only(document: dict, oracle: dict[str, list[str]]) -> dict:
    """``document`` (summary.json) without the keys ``oracle`` lists for it (dotted: nested)."""
    out = dict(document)
    for key in oracle["summary.json"]:
        head, _, rest = key.partition(".")
        if rest and isinstance(out.get(head), dict):
            out[head] = {k: v for k, v in out[head].items() if k != rest}
        else:
            out.pop(head, None)
    return out


def owner_rows(result: RunResult, oracle: bool = True) -> list[dict]:
    """One dict per scenario owner with the columns of ``owners.csv``, every row with the same keys
    (market runs: every owner, with its market columns; an owner that declined has ε = 0, no
    answers, ``participates = false`` and no training or network figures); without ``oracle``,
    no oracle column (own_psi, benefits)."""
    rows = _owner_rows(result)
    if not oracle:
        for row in rows:
            row.pop("own_psi", None)
            row.pop("benefits", None)
    return rows


def _owner_rows(result: RunResult) -> list[dict]:
    counts = result.training.log.counts_by_owner
    roster, network = result.roster, None
    rows = []
    for i, own in enumerate(result.own_psi):
        k = roster.slot(i)
        row = _training_columns(result, k, counts) if k is not None else _absent(result, i)
        row.update({"own_psi": float(own), "benefits": bool(k is not None and result.psi_final < own)})
        if k is not None:
            network = _network_columns(result, k, counts)
            row.update(network)
        rows.append(row)
    blank = dict.fromkeys(network or {}, "")  # a decliner took no part in the network either
    for i, row in enumerate(rows):
        if roster.slot(i) is None:
            row.update(blank)
        if result.market is not None:
            row.update(_market_columns(result.market.outcome, i))
            if result.market.own_psi is not None:  # what the owner decided with: public, not own_psi
                row["own_psi_public"] = float(result.market.own_psi[i])
        if result.market is not None and result.market.dynamic is not None:
            row.update(_dynamic_columns(result, i, row))
    return rows


def _dynamic_columns(result: RunResult, i: int, row: dict) -> dict:
    """A market in time: ε is the budget the owner sold (0 if it never joined); how often it joined
    and left, and what lost answers would have been paid (pay-on-delivery). ``payment`` and ``cost``
    are then what it received and the cost of the ε it spent."""
    market, outcome = result.market.dynamic, result.market.outcome
    slot = result.roster.slot(i)
    book = market.book
    joined = bool(outcome.participates[i])
    return {"epsilon": float(outcome.epsilon[i]), "benefits": bool(row["benefits"] and joined),
            "joins": book.joins[slot] if slot is not None else 0,
            "leaves": book.leaves[slot] if slot is not None else 0,
            "payment_lost": float(book.lost[slot]) if slot is not None else 0.0}


def _training_columns(result: RunResult, k: int, counts) -> dict:
    """What training did with the owner in slot k (its position among the participants)."""
    o = result.owners[k]
    return {"owner": o.index, "name": o.name, "records": o.data.n, "epsilon": o.epsilon,
            "queries": counts[("query", o.index)], "answers": o.ledger.answers,
            "refusals": counts[("refusal", o.index)], "epsilon_spent": o.epsilon_spent,
            "answer_cap": o.answers_allowed, "noise_scale": o.scale, "mechanism": o.mechanism,
            "delta": _owner_delta(o), "sensitivity": o.sensitivity, "accountant_used": o.accountant}


def _owner_delta(owner) -> float:
    """The δ of the owner's guarantee: 0 for Laplace answers under basic composition (pure ε-DP,
    whatever privacy.delta says), else its δ_i."""
    return 0.0 if owner.guarantee.pure else float(owner.delta)


def _absent(result: RunResult, i: int) -> dict:
    """The training columns of an owner that declined the market: it answered nothing."""
    return {"owner": i, "name": result.consortium.names[i],
            "records": int(result.consortium.sizes[i]), "epsilon": 0.0, "queries": 0,
            "answers": 0, "refusals": 0, "epsilon_spent": 0.0, "answer_cap": 0, "noise_scale": "",
            "mechanism": "", "delta": "", "sensitivity": "", "accountant_used": ""}


def _market_columns(outcome, i: int) -> dict:
    """The market's terms for owner i."""
    return {"cost_coef": float(outcome.coef[i]),
            "payment": float(outcome.payment[i]), "cost": float(outcome.cost[i]),
            "utility": float(outcome.utility[i]), "participates": bool(outcome.participates[i])}


def _network_columns(result: RunResult, k: int, counts) -> dict:
    """Per-owner communication figures (clock rate, channel, exchanges, losses, downtime) of the
    owner in slot k among the participants (the engine's arrays are per slot, events per owner)."""
    net, i = result.network, result.owners[k].index
    return {
        "clock_rate": result.scenario.owner_value(i, "clock_rate"),
        "channel": int(net.channel_of[k]) if net else "",
        "exchanges": counts[("update", i)], "ticks": counts[(_tick_kind(result), i)],
        "collisions": counts[("collision", i)], "losses": counts[("loss", i)],
        "dropouts": counts[("dropout", i)], "downtime": float(net.downtime[k]) if net else 0.0,
    }


def _tick_kind(result: RunResult) -> str:
    """The event counted as a clock tick: the ideal network logs no ``tick``, every tick there is
    an exchange begun by a ``query`` (see dpmarket.output.timeline.tick_kind)."""
    return "query" if result.network is None else "tick"


def summary(result: RunResult, oracle: bool = True) -> dict:
    """The ``summary.json`` content (the contract's fields first), with ``oracle`` naming the
    oracle measurements of the run directory; without ``oracle`` (``run --no-oracle``) none of them."""
    full = _summary(result)
    listed = run_oracle(result)
    listed["summary.json"] = [k for k in listed["summary.json"] if _present(full, k)]
    full["oracle"] = oracle_statement(listed, oracle)
    if oracle:
        return full
    # a diagnostic whose figures read the private records is an oracle measurement too
    full["diagnostics"] = [d for d in full["diagnostics"] if not d["oracle"]]
    return public_only(full, listed)


def _summary(result: RunResult) -> dict:
    s, t, counts = result.scenario, result.training, result.training.log.counts
    own = result.own_psi
    return {
        "scenario": s.name, "seed": s.seed, "owners": len(result.consortium.names),
        "records": int(result.consortium.sizes.sum()), "iterations": t.k,
        "psi_final": result.psi_final, "psi_zero": result.psi_zero, "collisions": counts["collision"],
        "dropouts": counts["dropout"],
        "wall_seconds": round(result.wall_seconds, 3),
        "iterations_planned": s.learner.iterations, "stop_reason": result.stop_reason,
        "algorithm": s.learner.algorithm, "loss": s.model.loss,
        "refusals": counts["refusal"], "queries": counts["query"], "losses": counts["loss"],
        "idle_slots": counts["idle"], "ticks": counts[_tick_kind(result)], "requests": counts["request"],
        "network_mode": s.network.mode,
        "channel_utilisation": _utilisation(result),
        "simulated_time": t.time, "sensitivity": result.owners[0].xi,
        **privacy_summary(s),
        "accountants_used": accountants_used(result.owners),
        "f_star": result.objective.f_star,
        "theta_star": [float(v) for v in result.objective.theta_star],
        "theta_final": [float(v) for v in t.learner.model],
        "own_psi_median": float(np.median(own)),
        "owners_benefiting": int(np.sum((result.psi_final < own) & result.roster.participates)),
        "epsilon_spent_max": max(o.epsilon_spent for o in result.owners),
        "step_curvature_max": result.step_curvature,
        **_learner_summary(result),
        **_data_summary(result),
        **_market_summary(result),
        "diagnostics": [d.to_dict() for d in after_run(result)],
        "reproducibility": reproducibility.statement(),
    }


def privacy_summary(scenario) -> dict:
    """Which mechanism and accountant made the owners' guarantee, in ``summary.json``
    and for which neighbouring relation (:func:`dpmarket.privacy.guarantee.stated`)."""
    return stated(scenario)


def accountants_used(owners) -> dict[str, int]:
    """How many participants' noise rests on each accountant: the scenario's, or basic composition
    where it proves the guarantee with less noise (dpmarket/privacy/accounting.py, ``calibration``)."""
    used: dict[str, int] = {}
    for o in owners:
        used[o.accountant] = used.get(o.accountant, 0) + 1
    return dict(sorted(used.items()))


def _learner_summary(result: RunResult) -> dict:
    """ρ and where it came from, its public stability number, the floor law's prediction, and
    the clip bound with the share of per-example gradients it clipped at the final model."""
    step = result.step
    out = {"rho": step.rho, "rho_source": step.source, "stability_number": step.stability,
           "stability_limit": STABILITY_LIMIT, "psi_floor_predicted": result.floor_predicted}
    if result.clipped_share is not None:
        out.update({"clip_bound": result.owners[0].clip, "clipped_share": result.clipped_share})
    return out


def _data_summary(result: RunResult) -> dict:
    """Table data: what was read, held out, dropped and clipped (nothing for synthetic owners)."""
    report = result.consortium.report
    return {} if report is None else {"data": report}


def _market_summary(result: RunResult) -> dict:
    """The market's figures for ``summary.json`` (nothing without a [market] section)."""
    if result.market is None:
        return {}
    o, f = result.market.outcome, result.market.forecast
    return {**_static_market(result, o, f), **_dynamic_summary(result)}


def _dynamic_summary(result: RunResult) -> dict:
    """A market in time's figures: its settings, prices, joins and leaves, payments lost."""
    market = result.market.dynamic
    if market is None:
        return {}
    m, o, book = result.scenario.market, result.market.outcome, market.book
    return {"market_mode": "dynamic", "payment": m.payment, "rule": m.rule, "period": m.period,
            "price_opening": market.opening_price, "price_final": market.price,
            "joins": sum(book.joins), "leaves": sum(book.leaves), "arrivals": market.arrived,
            "payment_lost": float(sum(book.lost)),
            "owners_benefiting": int(np.sum((result.psi_final < result.own_psi) & o.participates))}


def _static_market(result: RunResult, o, f) -> dict:
    """The deal's figures (a market in time: its realized payments)."""
    return {"policy": o.policy, "participants": int(o.participates.sum()),
            "price": o.price, "psi_forecast": o.psi_forecast, "psi_simulated": result.psi_final,
            "total_payment": o.spend, "learner_value": o.value, "learner_surplus": o.surplus,
            "learner_surplus_simulated": learner_value(result.scenario.market.value,
                                                       result.psi_final) - o.spend,
            "forecast": {**f.to_dict(), "source": result.market.source}}


def _utilisation(result: RunResult) -> list[float]:
    if result.network is None:
        return []
    return [ch.utilisation(result.training.time) for ch in result.network.channels]
