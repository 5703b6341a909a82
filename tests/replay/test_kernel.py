"""Schedule → replay → measure against the inline path.

For every loss, algorithm and network schedule, the batched replay of several
replications must give each replication's inline run: θ_L (or the synchronous model) within 10⁻¹²
relative at every recorded k, the same metrics (k, time, ψ), stop reason and refusals, and the
schedule's event rows must be the inline events.csv byte for byte. Each comparison is shown to fail
on a deliberately wrong kernel or schedule. The replay never applies an answer a ledger refused.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from helpers import saved_replications, tiny
from hypothesis import given
from hypothesis import strategies as st

from dpmarket.data.problem import prepare
from dpmarket.experiment.grid import pin_data_seed
from dpmarket.learning import kernels, measure
from dpmarket.privacy.cohort import build_owners, member_view
from dpmarket.replay import kernel as replay_module
from dpmarket.runs.inline import train
from dpmarket.runs.pilots import market_stage
from dpmarket.runs.replications import run_cell
from dpmarket.schedule import scheduler as schedule_module
from dpmarket.schedule.events import EventLog
from dpmarket.schedule.protocol import record_points
from dpmarket.schedule.scheduler import capacities, log_tape, network_tape
from dpmarket.schedule.sim.network import build_network
from dpmarket.schedule.tape import CHUNK

RELATIVE = 1e-12
SEEDS = (11, 12, 13, 14)
LONG = {"iterations": 150, "rho": 3.0}
MARKET = {"policy": "posted_price", "price": 1.0, "value": 10.0, "epsilon_min": 0.5, "epsilon_max": 20.0,
          "costs": {"kind": "quadratic", "coef": 0.5}, "forecast": {"c0": 0.01, "c1": 0.0, "c2": 2e4}}

REQUEST = {"mode": "request", "clock_rate": 2.0, "transmission_time": 0.05, "latency": 0.02,
           "loss_probability": 0.15, "dropout": {"mean_online": 3.0, "mean_offline": 1.0}}
BROADCAST = {"mode": "broadcast", "clock_rate": 0.6, "broadcast_interval": 0.5, "transmission_time": 0.1,
             "latency": 0.05, "loss_probability": 0.1, "channels": 2,
             "dropout": {"mean_online": 3.0, "mean_offline": 1.0}}
STALE = ("request_two_channels_sensing", "broadcast_no_collisions_clip")  # queries older than k − 1

CASES = {
    "squared_async": {},
    "squared_capped_leaves": {"privacy": {"split": "capped", "cap": 12}, "learner": LONG},
    "squared_all_exhausted": {"privacy": {"split": "capped", "cap": 5}},
    "unequal_rates_caps": {"owners": [{"cap": 4, "clock_rate": 3.0}, {"clock_rate": 0.5}, {"cap": 30}],
                           "privacy": {"split": "capped"}, "learner": LONG},
    "inverse_frequency": {"owners": [{"clock_rate": 3.0}, {}, {}],
                          "learner": {**LONG, "weighting": "inverse_frequency"}},
    "proof_step": {"learner": {**LONG, "theta_l_step": "proof"}},
    "gaussian_rdp": {"privacy": {"mechanism": "gaussian", "accountant": "rdp", "delta": 1e-6}},
    "laplace_pld_capped": {"privacy": {"accountant": "pld", "delta": 1e-6, "split": "capped", "cap": 9}},
    "squared_clip": {"privacy": {"sensitivity": "clip", "clip": 2.0, "epsilon": 5.0}},
    "logistic": {"data": {"kind": "card_fraud"}, "model": {"loss": "logistic"}},
    "hinge": {"data": {"kind": "card_fraud"}, "model": {"loss": "hinge"}},
    "logistic_clip": {"data": {"kind": "card_fraud"}, "model": {"loss": "logistic"},
                      "privacy": {"sensitivity": "clip", "clip": 0.8}, "learner": LONG},
    "hinge_clip_gaussian": {"data": {"kind": "card_fraud"}, "model": {"loss": "hinge"},
                            "privacy": {"sensitivity": "clip", "clip": 0.8, "mechanism": "gaussian",
                                        "accountant": "rdp", "delta": 1e-6}},
    "squared_clip_gaussian_capped": {"privacy": {"sensitivity": "clip", "clip": 1.0, "mechanism": "gaussian",
                                                 "delta": 1e-6, "split": "capped", "cap": 12},
                                     "learner": LONG},
    "sync": {"learner": {"algorithm": "sync", "iterations": 20, "rho": 3.0}},
    "sync_capped": {"learner": {"algorithm": "sync", "iterations": 20, "rho": 3.0},
                    "privacy": {"split": "capped", "cap": 7}},
    "sync_averaged_rates": {"learner": {"algorithm": "sync_averaged", "iterations": 20, "rho": 3.0},
                            "owners": [{"clock_rate": 2.0}, {}, {}]},
    "sync_logistic_clip": {"data": {"kind": "card_fraud"}, "model": {"loss": "logistic"},
                           "learner": {"algorithm": "sync_averaged", "iterations": 20, "rho": 3.0},
                           "privacy": {"sensitivity": "clip", "clip": 2.0}},
    "hinge_sync": {"data": {"kind": "card_fraud"}, "model": {"loss": "hinge"},
                   "learner": {"algorithm": "sync", "iterations": 20, "rho": 3.0}},
    "hinge_sync_clip": {"data": {"kind": "card_fraud"}, "model": {"loss": "hinge"},
                        "learner": {"algorithm": "sync", "iterations": 20, "rho": 3.0},
                        "privacy": {"sensitivity": "clip", "clip": 0.5}},
    "request": {"network": REQUEST, "data": {"owners": 5}, "learner": LONG},
    "request_capped_logistic": {"network": REQUEST, "data": {"owners": 5, "kind": "card_fraud"},
                                "model": {"loss": "logistic"}, "privacy": {"split": "capped", "cap": 12},
                                "learner": LONG},
    "request_two_channels_hinge_clip": {"network": {**REQUEST, "channels": 2}, "learner": LONG,
                                        "data": {"owners": 5, "kind": "card_fraud"},
                                        "model": {"loss": "hinge"},
                                        "privacy": {"sensitivity": "clip", "clip": 0.8}},
    "request_two_channels_sensing": {"network": {**REQUEST, "channels": 2, "carrier_sense": True,
                                                 "backoff": 0.1}, "data": {"owners": 5}, "learner": LONG},
    "broadcast": {"network": BROADCAST, "data": {"owners": 5}, "learner": LONG},
    "broadcast_no_collisions_clip": {"network": {**BROADCAST, "collisions": False, "clock_rate": 3.0},
                                     "data": {"owners": 5}, "learner": LONG,
                                     "privacy": {"sensitivity": "clip", "clip": 2.0}},
    "market_decliners": {"market": MARKET, "data": {"owners": 4},
                         "owners": [{"cost_coef": 0.05}, {"cost_coef": 0.5}, {"cost_coef": 10.0},
                                    {"cost_coef": 0.2}]},
}


@contextmanager
def recording(models: list):
    """Keep a copy of every model the inline run scores (the published θ at each recorded k: the
    run measures ψ of them together when it finishes, through measure.psis)."""
    scored = measure.psis

    def keeping(objective, thetas):
        models.extend(np.array(thetas, copy=True))
        return scored(objective, thetas)

    with patch.object(measure, "psis", keeping):
        yield


def setup(case: str):
    scenario = pin_data_seed(tiny(**CASES[case]))
    prepared = prepare(scenario)
    market = market_stage(scenario, prepared) if scenario.market is not None else None
    return scenario, prepared, market


def deal(market):
    return (None, None) if market is None else (market.outcome.members, market.outcome.epsilon)


def dealt(market) -> dict:
    """:func:`deal` as run_cell's keywords."""
    members, epsilons = deal(market)
    return {"members": members, "epsilons": epsilons}


def inline(scenario, prepared, market, seed: int, events: Path):
    """The reference: the inline run of ``seed`` (run.train, as run.execute calls it), with its models."""
    models: list[np.ndarray] = []
    with recording(models):
        run = train(scenario.model_copy(update={"seed": seed}), prepared.consortium, prepared.objective,
                    *deal(market), events_path=events)
    metrics = run.training.metrics
    return run, metrics, np.array(models[:len(metrics.k)])


def replayed_events(scenario, prepared, market, cell, r: int, path: Path) -> None:
    """events.csv of replication r's schedule: its tape's rows, its answers paid by fresh owners'
    ledgers (ideal network), or the SimPy engine driving a recorder again with a file log."""
    owners = build_owners(scenario, prepared.consortium, prepared.objective, *deal(market))
    ids = [o.index for o in owners]
    view = member_view(scenario, ids, prepared.consortium.names)
    with EventLog(path, ids if view is not scenario else None) as log:
        if scenario.network.mode == "ideal":
            log_tape(cell.tapes[r], owners, log)
            return
        points = record_points(scenario.learner.iterations, scenario.output.metric_points)
        seeded = view.model_copy(update={"seed": cell.seeds[r]})
        tape, _, _ = network_tape(build_network(seeded, len(owners)),
                                  owners, [o.name for o in owners], points, log)
        assert np.array_equal(tape.owner, cell.tapes[r].owner)


def mismatches(case: str, tmp_path: Path, size: int = CHUNK) -> list[str]:
    """Where the replay of ``SEEDS`` (tapes in chunks of ``size`` updates) differs from the inline
    runs (empty when they agree)."""
    tmp_path.mkdir(exist_ok=True)
    scenario, prepared, market = setup(case)
    cell = run_cell(scenario, SEEDS, prepared.consortium, prepared.objective, **dealt(market), keep=True,
                    size=size)
    found = []
    for r, seed in enumerate(SEEDS):
        run, metrics, models = inline(scenario, prepared, market, seed, tmp_path / f"inline-{r}.csv")
        ours = cell.metrics[r]
        batched = np.array([cell.model(r, k) for k in ours.k])
        if ours.k != metrics.k or ours.time != metrics.time:
            found.append(f"seed {seed}: recorded k or times differ")
        elif not np.allclose(batched, models, rtol=RELATIVE, atol=RELATIVE * np.max(np.abs(models))):
            found.append(f"seed {seed}: θ differs by {np.max(np.abs(batched - models)):.2e}")
        if ours.psi != metrics.psi:
            found.append(f"seed {seed}: ψ differs")
        facts, t = cell.facts[r], run.training
        reason = run.network.stop_reason if run.network else t.stop_reason
        if (facts.stop_reason, facts.counts, facts.time) != (reason, t.log.counts, t.time):
            found.append(f"seed {seed}: stop reason, event counts or time differ")
        replayed_events(scenario, prepared, market, cell, r, tmp_path / f"replay-{r}.csv")
        if (tmp_path / f"replay-{r}.csv").read_bytes() != (tmp_path / f"inline-{r}.csv").read_bytes():
            found.append(f"seed {seed}: events.csv differs")
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_replay_gives_the_inline_runs(case, tmp_path):
    assert mismatches(case, tmp_path) == []


RECORD_CASES = [name for name, table in CASES.items()  # answers that read the owners' records
                if table.get("model", {}).get("loss", "squared") != "squared"
                or table.get("privacy", {}).get("sensitivity") == "clip"]


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
@pytest.mark.parametrize("case", RECORD_CASES)
def test_replay_gives_the_inline_runs_under_the_compiled_record_kernel(case, tmp_path, monkeypatch):
    """DPMARKET_KERNEL=numba: the run and the replay both answer from the compiled record kernel, which
    gives each point the bits it has alone, so they agree as under numpy (and the kernel did run)."""
    from dpmarket.learning import compiled

    calls, right = [], compiled.gradients

    def counted(*args):
        calls.append(args[4].shape[0])
        return right(*args)

    monkeypatch.setenv(kernels.VARIABLE, "numba")
    monkeypatch.setattr(compiled, "gradients", counted)
    assert mismatches(case, tmp_path) == []
    assert calls and max(calls) > 1  # the replay asked an owner for several replications' points at once


RIGHT_DRAW, RIGHT_TIMES = replay_module.Noise._draw, schedule_module.IdealSchedules._times
RIGHT_OF, RIGHT_EVERY = replay_module.Answers.of, replay_module.Answers.every
RIGHT_QUERY, RIGHT_APPLY = schedule_module.Recorder.query, schedule_module.Recorder.apply


def shifted_noise(self, r, slot, count):
    """A wrong kernel: the j-th answer carries its owner's (j+1)-th draw (answer index off by one)."""
    if self.drawn[r, slot] == 0 and count:
        self.kinds[slot].standard(self.stream(r, slot), 1, self.dim)
    return RIGHT_DRAW(self, r, slot, count)


def wrong_owner(self, slots, thetas, gathered=None):
    """A wrong kernel: every answer comes from the next owner's data."""
    return RIGHT_OF(self, (slots + 1) % len(self.owners), thetas)


def wrong_every(self, thetas):
    """A wrong synchronous kernel: the first owner answers from the last owner's data."""
    out = RIGHT_EVERY(self, thetas)
    out[:, 0] = out[:, -1]
    return out


def late_times(self, rows, waits):
    """A wrong schedule: every exchange stamped with the previous tick's time."""
    last = self.last[rows].copy()
    times = RIGHT_TIMES(self, rows, waits)
    return np.concatenate((last[:, None], times[:, :-1]), axis=1) if times.shape[1] else times


def test_some_network_updates_use_query_points_older_than_the_last_update():
    """Two channels, or a broadcast slot that applies several answers, make exchanges overlap: the
    replay then needs θ_L as it was when each query was sent (its ring of recent θ_L)."""
    for case in STALE:
        scenario, prepared, market = setup(case)
        cell = run_cell(scenario, SEEDS, prepared.consortium, prepared.objective, **dealt(market), keep=True)
        assert max(t.staleness for t in cell.tapes) > 0, case


def early_apply(self, owner, theta_bar, answer, time, channel=None):
    """A wrong network schedule: each update stamped with the time its query was sent."""
    return RIGHT_APPLY(self, owner, theta_bar, answer, self.sent[owner], channel)


def noting_query(self, owner, time, channel=None):
    self.sent = {**getattr(self, "sent", {}), owner: time}
    return RIGHT_QUERY(self, owner, time, channel)


@pytest.mark.parametrize("case", list(CASES))
def test_the_comparison_fails_on_a_wrong_kernel_or_schedule(case, tmp_path, monkeypatch):
    """Every equality test above fails with an answer index off by one, answers from the wrong owner,
    or update times off (one tick late in the ideal network, the query's time in a network)."""
    monkeypatch.setattr(replay_module.Noise, "_draw", shifted_noise)
    assert any("θ differs" in m for m in mismatches(case, tmp_path / "noise"))
    monkeypatch.undo()
    monkeypatch.setattr(replay_module.Answers, "of", wrong_owner)
    monkeypatch.setattr(replay_module.Answers, "every", wrong_every)
    assert any("θ differs" in m for m in mismatches(case, tmp_path / "owner"))
    monkeypatch.undo()
    if CASES[case].get("network", {}).get("mode", "ideal") == "ideal":
        monkeypatch.setattr(schedule_module.IdealSchedules, "_times", late_times)
    else:
        monkeypatch.setattr(schedule_module.Recorder, "query", noting_query)
        monkeypatch.setattr(schedule_module.Recorder, "apply", early_apply)
    found = mismatches(case, tmp_path / "time")
    assert any("events.csv" in m for m in found) and any("times differ" in m for m in found)


# -- privacy: the replay applies only what the ledgers paid ----------------------------------------


def test_the_replay_refuses_a_tape_with_an_answer_beyond_a_ledger_or_out_of_order():
    scenario, prepared, _ = setup("squared_all_exhausted")  # m_i = 5 answers, then every owner leaves
    cell = run_cell(scenario, SEEDS[:1], prepared.consortium, prepared.objective, keep=True)
    tape = cell.tapes[0]
    assert tape.answers_per_owner(3).tolist() == [5, 5, 5] == capacities(cell.owners).tolist()
    learner = cell.replayed[0].batch.c
    owners = cell.owners
    extra = schedule_module.Tape(np.r_[tape.owner, 0], np.r_[tape.time, tape.time[-1] + 1.0],
                                 np.r_[tape.answer, 5], (), "iterations", False)
    with pytest.raises(RuntimeError, match="refused answers are never applied"):
        replay_module.replay(learner, owners, [extra.chunks()], SEEDS[:1], capacities(owners), at=[0])
    swapped = tape.answer.copy()
    first = np.flatnonzero(tape.owner == 0)[:2]
    swapped[first] = swapped[first[::-1]]
    disorder = schedule_module.Tape(tape.owner, tape.time, swapped, (), "iterations", False)
    with pytest.raises(RuntimeError, match="out of order"):
        replay_module.replay(learner, owners, [disorder.chunks()], SEEDS[:1], capacities(owners), at=[0])
    with pytest.raises(RuntimeError, match="ledger refuses"):  # writing its events pays from the ledgers
        log_tape(extra, build_owners(scenario, prepared.consortium, prepared.objective), EventLog(None))


@st.composite
def ideal_schedules(draw) -> dict:
    """A tiny ideal-network scenario: 1–5 owners with random budgets, caps and clock rates."""
    n = draw(st.integers(1, 5))
    split = draw(st.sampled_from(["horizon", "capped"]))
    caps = st.one_of(st.none(), st.integers(1, 25)) if split == "capped" else st.none()
    owners = [{k: v for k, v in {"epsilon": draw(st.sampled_from([0.5, 5.0, 50.0])),
                                 "clock_rate": draw(st.sampled_from([None, 0.3, 1.0, 4.0])),
                                 "cap": draw(caps)}.items()
               if v is not None} for _ in range(n)]
    algorithm = draw(st.sampled_from(["async", "async", "sync", "sync_averaged"]))
    privacy = {"split": split}
    return {"data": {"owners": n, "records": 120}, "owners": owners, "privacy": privacy,
            "learner": {"algorithm": algorithm, "iterations": draw(st.integers(1, 90)), "rho": 3.0},
            "seed": draw(st.integers(0, 10_000))}


@given(ideal_schedules())
def test_random_schedules_replay_as_the_inline_runs(table):
    """Tapes hold no more answers than each ledger pays and write the inline events byte for byte; the
    replay of the tape gives the inline run's ψ at every recorded k."""
    import tempfile

    seed = table.pop("seed")
    scenario = pin_data_seed(tiny(**table))
    prepared = prepare(scenario)
    cell = run_cell(scenario, (seed,), prepared.consortium, prepared.objective, keep=True)
    tape = cell.tapes[0]
    assert np.all(tape.answers_per_owner(len(cell.owners)) <= capacities(cell.owners))
    with tempfile.TemporaryDirectory() as tmp:
        run, metrics, _ = inline(scenario, prepared, None, seed, Path(tmp) / "inline.csv")
        replayed_events(scenario, prepared, None, cell, 0, Path(tmp) / "replay.csv")
        assert (Path(tmp) / "replay.csv").read_bytes() == (Path(tmp) / "inline.csv").read_bytes()
    assert (cell.metrics[0].k, cell.metrics[0].psi) == (metrics.k, metrics.psi)
    assert tape.stop_reason == run.training.stop_reason


# -- experiments: the same bytes whether replayed or simulated, on any executor ---------------------


def experiment_files(directory: Path) -> dict:
    """Every saved replication (whichever task saved it) and result table of an experiment directory."""
    saved = {f"replication {key}": json.dumps(record, sort_keys=True)
             for key, record in saved_replications(directory).items()}
    return {**saved, **{p.name: p.read_bytes() for p in sorted(directory.glob("*.csv"))}}


@pytest.mark.parametrize("kind", ["sweep", "replications"])
def test_experiments_are_byte_identical_replayed_or_simulated(kind, tmp_path, monkeypatch):
    """A sweep (ε × n, an owner whose budget runs out and leaves) and a replicated run give the same saved
    replications and tables replayed in batches (serially or on two processes) as simulated one
    exchange at a time; a wrong kernel does not."""
    from dpmarket.experiment import study, task

    base = tiny(privacy={"split": "capped"}, owners=[{"cap": 30}, {}, {}], learner=LONG)
    grid = ["privacy.epsilon=1,10", "data.records=200,400"] if kind == "sweep" else []
    plan = study.make_plan(kind, base, grid, 5, "t.toml")
    run = study.run_sweep if kind == "sweep" else study.run_replications
    run(plan, tmp_path / "serial", study.Execution("serial"))
    run(plan, tmp_path / "process", study.Execution("process", 2))
    monkeypatch.setattr(task, "batched", lambda scenario, replications: False)
    run(plan, tmp_path / "inline", study.Execution("serial"))
    monkeypatch.undo()
    inline = experiment_files(tmp_path / "inline")
    assert len(inline) == 5 * len(plan.cells) + (2 if kind == "sweep" else 3)
    assert experiment_files(tmp_path / "serial") == inline == experiment_files(tmp_path / "process")
    records = [json.loads(b) for n, b in inline.items() if n.startswith("replication ")]
    assert any(r["refusals"] > 0 and r["stop_reason"] == "iterations" for r in records)
    monkeypatch.setattr(replay_module.Noise, "_draw", shifted_noise)
    run(plan, tmp_path / "wrong", study.Execution("serial"))
    assert experiment_files(tmp_path / "wrong") != inline


def test_market_pilots_and_policy_runs_are_replayed_with_the_inline_numbers(tmp_path, monkeypatch):
    """The forecast's pilots (each budget and subset's replications one cell) and the policies' runs of
    ``market`` give, replayed, the numbers of the runs exchange by exchange; a wrong kernel does not."""
    from dpmarket.experiment import compare

    base = tiny(data={"owners": 4, "records": 400}, owners=[{"cost_coef": c} for c in (0.05, 0.5, 10.0, 0.2)],
                market={**MARKET, "budget": 5.0, "forecast": "law",
                        "pilots": {"levels": 3, "subsets": 2, "replications": 3}})

    def outcome(name: str):
        c = compare.compare(base, ["posted_price", "procurement"], replications=4, cache=tmp_path / name)
        return c.forecast, [r.psi.tolist() for r in c.results]

    replayed = outcome("replayed")
    monkeypatch.setattr("dpmarket.runs.pilots.batched", lambda scenario, n: False)  # the pilots'
    monkeypatch.setattr("dpmarket.experiment.policy_runs.batched", lambda scenario, n: False)  # the policies'
    # the inline path must not reach the kernel
    monkeypatch.setattr("dpmarket.runs.replications.replay", None)
    inline = outcome("inline")
    monkeypatch.undo()
    assert replayed == inline and [len(p) for p in replayed[1]] == [4, 4]
    monkeypatch.setattr(replay_module.Noise, "_draw", shifted_noise)
    assert outcome("wrong") != inline
