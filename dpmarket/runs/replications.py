"""Replications of one cell: schedule → replay → measure.

The replications of a cell share everything but their seed: the owners' data (``Prepared``), the
market's deal, the owners' budgets, caps and noise scales, the learner's constants. So the owners
are built once; each seed's tape is drawn (:mod:`dpmarket.schedule.scheduler`: the ideal network's clocks,
or the SimPy engine driving a :class:`~dpmarket.schedule.scheduler.Recorder`) and streamed in chunks into the
replay, which applies the tapes together (:mod:`dpmarket.replay.kernel`), and ψ is measured at every
recorded iteration of every replication in one call (:mod:`dpmarket.learning.measure`). Each replication's
metrics, stop reason, event counts and time are those its run exchange by exchange
(:func:`dpmarket.runs.inline.train` with that seed) gives. Who talks when never depends on the model in
any network dpmarket simulates; a learner that chose owners from the model would have to stay on
the inline path (:func:`replayable`).

A single run in a network goes this way too (:func:`scheduled_run`): the engine's recorder writes
the run's events.csv, and the replay computes only the answers that were applied, where the run
exchange by exchange computes an answer for every response, lost or collided ones included.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dpmarket.data import Consortium
from dpmarket.data.proxy import resolve_step
from dpmarket.learning import measure
from dpmarket.learning.learner import AsyncLearner, SyncLearner
from dpmarket.learning.objective import Objective
from dpmarket.learning.stepsize import StepSize
from dpmarket.privacy.cohort import build_owners, ideal_rates, member_view, query_shares
from dpmarket.privacy.owners import DataOwner
from dpmarket.replay.kernel import Observer, Replayed, replay
from dpmarket.runs.inline import Cast, Trained, step_curvature
from dpmarket.scenario.schema import Scenario
from dpmarket.schedule.events import EventLog
from dpmarket.schedule.protocol import Metrics, make_learner, record_points
from dpmarket.schedule.scheduler import IdealSchedules, NetworkSchedule, capacities
from dpmarket.schedule.sequence import OwnerSequence
from dpmarket.schedule.sim.network import build_network
from dpmarket.schedule.tape import CHUNK, Chunk, Tape
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of

SCHEDULED = ("ideal", "request", "broadcast")  # network modes whose schedule ignores the model
BATCH_MIN = 2  # replications from which the ideal network's runs are replayed (one alone: as fast inline)
ENGINE_OWNERS = 40_000  # owners of the SimPy engines running side by side (their state is in memory)


def replayable(scenario: Scenario) -> bool:
    """Whether the scenario's runs can be scheduled before learning (who talks when does not depend
    on the model): every network mode dpmarket has, unless a market in time runs beside it (its
    prices, hence who takes part when, follow the model's measured progress)."""
    dynamic = scenario.market is not None and scenario.market.mode == "dynamic"
    return scenario.network.mode in SCHEDULED and not dynamic


def batched(scenario: Scenario, replications: int) -> bool:
    """Whether ``replications`` runs of ``scenario`` go through schedule → replay → measure (the
    results are the same either way): in a network always, as the replay computes only the answers
    applied; in the ideal network from :data:`BATCH_MIN` replications (every answer is applied
    there, and one run alone costs the same either way)."""
    if not replayable(scenario):
        return False
    return replications >= BATCH_MIN or scenario.network.mode != "ideal"


def record_reads(scenario: Scenario, sizes: np.ndarray, dim: int) -> float:
    """Record × feature reads of one run of ``scenario`` by owners of ``sizes`` with ``dim`` coefficients:
    its answers (where they read records: a loss other than squared, or clipping), and its ψ at the
    recorded points (a loss other than squared); what ``DPMARKET_KERNEL=auto`` weighs against numba's
    start-up (:func:`dpmarket.learning.kernels.resolve`)."""
    sizes = np.asarray(sizes, dtype=float)
    lr, loss = scenario.learner, scenario.model.loss
    reads = 0.0
    if loss != "squared" or scenario.privacy.sensitivity == "clip":
        if lr.algorithm == "async":
            reads += lr.iterations * float(query_shares(scenario, np.arange(len(sizes))) @ sizes)
        else:
            reads += lr.iterations * float(sizes.sum())
    if loss != "squared":
        reads += len(record_points(lr.iterations, scenario.output.metric_points)) * float(sizes.sum())
    return reads * dim


@dataclass(frozen=True)
class Facts:
    """What a replication's run reports besides its model: why it stopped, its events per kind, the
    time on its clock when it stopped, and its updates."""

    stop_reason: str
    counts: Counter
    time: float
    updates: int


@dataclass
class Cell:
    """The replications of a cell: shared owners and step, each seed's metrics and facts, the replayed
    models (per group of replications run side by side) and, if asked for, each seed's whole tape."""

    owners: list[DataOwner]  # built once; their ledgers are untouched (each replication pays copies)
    step: StepSize
    seeds: list[int]
    metrics: list[Metrics]
    facts: list[Facts]
    replayed: list[Replayed]
    tapes: list[Tape] | None = None

    def model(self, r: int, k: int) -> np.ndarray:
        """Replication r's model after update k (a recorded update, or its last)."""
        for group in self.replayed:
            if r < len(group.updates):
                return group.model(r, k)
            r -= len(group.updates)
        raise IndexError(r)


def run_cell(scenario: Scenario, seeds: Sequence[int], consortium: Consortium, objective: Objective,
             members: np.ndarray | None = None, *, epsilons: np.ndarray | None = None,
             series: bool = True, keep: bool = False, size: int = CHUNK,
             observer: Observer | None = None) -> Cell:
    """Every replication ``seeds`` of ``scenario`` on the owners' data ``consortium`` and
    ``objective``, with the participants ``members`` at ``epsilons`` (default: everyone at the
    scenario's budgets), as :func:`dpmarket.runs.inline.train` runs each. ``series`` false measures ψ
    only at the last update (what pilots and policy comparisons keep); ``keep`` keeps each whole
    tape (for inspection); ``size``: updates per chunk of tape; ``observer`` sees every answer applied
    (an audit's adversary; told where each group of replications starts, ``observer.offset``)."""
    owners = build_owners(scenario, consortium, objective, members, epsilons)
    lr, m = scenario.learner, scenario.model
    sizes = np.array([o.data.n for o in owners], dtype=np.int64)
    step = resolve_step(scenario, consortium, sizes)
    learner = make_learner(lr.algorithm, sizes, objective.p, lr.iterations, step.rho, lam=m.regularization,
                           theta_max=m.theta_max, theta_l_step=lr.theta_l_step, weighting=lr.weighting)
    view = member_view(scenario, [o.index for o in owners], consortium.names)
    points = record_points(lr.iterations, scenario.output.metric_points)
    at = points if series else np.zeros(0, dtype=np.int64)
    cell = Cell(owners, step, list(seeds), [], [], [], [] if keep else None)
    for group in _groups(view, len(owners), list(seeds)):
        chunks: list[list[Chunk]] = [[] for _ in group]
        if observer is not None:
            observer.offset = len(cell.facts)  # the group's first replication among ``seeds``
        with _engines_collected(view.network.mode != "ideal"):
            replayed, facts, measured = _run_group(view, owners, learner, group, points, at=at, size=size,
                                                   chunks=chunks if keep else None, series=series,
                                                   observer=observer)
        cell.facts.extend(facts)
        cell.metrics.extend(measured_psi(objective, replayed, measured))
        cell.replayed.append(replayed)
        if keep:
            rounds = not isinstance(learner, AsyncLearner)
            cell.tapes.extend(Tape.of(c, f.stop_reason, rounds) for c, f in zip(chunks, facts, strict=True))
    return cell


def _run_group(view: Scenario, owners: list[DataOwner], learner: AsyncLearner | SyncLearner,
               group: list[int], points: np.ndarray, *, at: np.ndarray, size: int,
               chunks: list[list[Chunk]] | None, series: bool,
               observer: Observer | None = None) -> tuple[Replayed, list[Facts], list[Metrics]]:
    """The seeds ``group`` scheduled and replayed together: the replayed models, each seed's facts and
    the iterations and times to measure (each seed's chunks also appended to ``chunks``, if given).
    Nothing of the schedules outlives the call (see :func:`_engines_collected`)."""
    run = _IdealGroup(view, owners, group, points, size) if view.network.mode == "ideal" else \
        _NetworkGroup(view, owners, group, points, size)
    tapes = [run.chunks(r) if chunks is None else _kept(run.chunks(r), chunks[r]) for r in range(len(group))]
    replayed = replay(learner, owners, tapes, group, capacities(owners), at=at.tolist(),
                      expected=view.learner.iterations, observer=observer)
    facts = run.facts()
    return replayed, facts, run.measured(series, facts)


@contextmanager
def _engines_collected(engines: bool) -> Iterator[None]:
    """With ``engines`` (a network group), pause CPython's cyclic collector while the group's SimPy
    engines live, then run one young collection (if it was on).

    An engine is a few thousand container objects per replication, and the engines of a group all
    live until the replay has taken their tapes. With the collector on, its young collections scan
    them again and again and move them to the oldest generation, where once enough have piled up a
    full collection scans the whole heap (the data included): about 3 µs of the 21 µs per
    replication-exchange on ny_hospitals (86 owners, T = 1,000). Each engine is taken apart when its
    run ends (:meth:`Engine.close`), so reference counting frees it; the young collection at the end
    frees what is still cyclic (the SimPy environments, processes and broadcast slots).
    """
    if not engines:
        yield
        return
    from dpmarket.schedule.sim.engine import collector_paused  # deferred: SimPy is needed only here

    was = gc.isenabled()
    with collector_paused():
        yield
    if was:
        gc.collect(0)


def _kept(chunks: Iterator[Chunk], into: list[Chunk]) -> Iterator[Chunk]:
    """``chunks``, each also appended to ``into`` (to keep a whole tape)."""
    for chunk in chunks:
        into.append(chunk)
        yield chunk


def _groups(view: Scenario, owners: int, seeds: list[int]) -> list[list[int]]:
    """The seeds in groups replayed together: all of them in the ideal network; in a network, as many
    as keep :data:`ENGINE_OWNERS` owners in the engines running side by side."""
    size = len(seeds) if view.network.mode == "ideal" else max(1, ENGINE_OWNERS // max(1, owners))
    return [seeds[i:i + size] for i in range(0, len(seeds), size)] or [[]]


class _IdealGroup:
    """The ideal network's schedules of some seeds, drawn together a chunk at a time."""

    def __init__(self, view: Scenario, owners: list[DataOwner], seeds: list[int], points: np.ndarray,
                 size: int) -> None:
        lr = view.learner
        self.owners, self.points = len(owners), points
        self.schedules = IdealSchedules(lr.algorithm, capacities(owners), lr.iterations, seeds,
                                        ideal_rates(view, len(owners)), size=size)
        self.times = np.zeros((len(seeds), len(points)))  # per seed, the time of each recorded update

    def chunks(self, r: int) -> Iterator[Chunk]:
        """Replication r's chunks, noting the times of the recorded updates as they go by."""
        for chunk in self.schedules.chunks(r):
            a, b = np.searchsorted(self.points, [chunk.start + 1, chunk.end + 1])
            self.times[r, a:b] = chunk.time[self.points[a:b] - chunk.start - 1]
            yield chunk

    def facts(self) -> list[Facts]:
        s, out = self.schedules, []
        for r in range(len(self.times)):
            asked = s.updates[r] * (self.owners if s.rounds else 1)  # every owner answers each round
            counts = Counter(query=asked, response=asked, update=s.updates[r], refusal=s.leaves[r])
            out.append(Facts(s.stop_reason[r], counts, s.end_time(r), s.updates[r]))
        return out

    def measured(self, series: bool, facts: list[Facts]) -> list[Metrics]:
        """The iterations each run records (every point reached, then the last update; or the last
        only) and their times."""
        out = []
        for r, f in enumerate(facts):
            reached = int(np.searchsorted(self.points, f.updates, side="right")) if series else 0
            ks, times = self.points[:reached].tolist(), self.times[r, :reached].tolist()
            if not ks or ks[-1] != f.updates:
                ks.append(f.updates)
                times.append(self.schedules.end_time(r))
            out.append(Metrics(ks, times, []))
        return out


class _NetworkGroup:
    """The SimPy engine's schedules of some seeds (one engine per seed, side by side, each paused at
    every full chunk until the replay has taken it)."""

    def __init__(self, view: Scenario, owners: list[DataOwner], seeds: list[int], points: np.ndarray,
                 size: int) -> None:
        names = [o.name for o in owners]
        network = build_network(view, len(owners))
        self.schedules = [NetworkSchedule(replace(network, seed=seed), owners, names, points, size=size)
                          for seed in seeds]

    def chunks(self, r: int) -> Iterator[Chunk]:
        return self.schedules[r].chunks()

    def facts(self) -> list[Facts]:
        return [Facts(s.network.stop_reason, s.recorder.log.counts, s.recorder.time, s.recorder.k)
                for s in self.schedules]

    def measured(self, series: bool, facts: list[Facts]) -> list[Metrics]:
        """The iterations and times each run recorded (all of them, or the last only)."""
        out = []
        for s in self.schedules:
            m = s.recorder.metrics
            out.append(m if series else Metrics([m.k[-1]], [m.time[-1]], []))
        return out


def final_psis(scenario: Scenario, seeds: Sequence[int], consortium: Consortium, objective: Objective,
               members: np.ndarray | None = None, *, epsilons: np.ndarray | None = None) -> list[float]:
    """ψ at the end of each replication ``seeds`` (:func:`run_cell` measuring only there)."""
    cell = run_cell(scenario, seeds, consortium, objective, members, epsilons=epsilons, series=False)
    return [m.psi[-1] for m in cell.metrics]


def measured_at(points: np.ndarray, updates: int) -> list[int]:
    """The iterations the inline run records: every point reached, then the last update."""
    ks = points[points <= updates].tolist()
    return ks if ks and ks[-1] == updates else [*ks, updates]


def measured_psi(objective: Objective, replayed: Replayed, measured: list[Metrics]) -> list[Metrics]:
    """Each replication's ψ series (k and time as recorded, ψ of its model after update k), ψ of
    every replication's models in one batch."""
    R, p = replayed.final.shape
    table = np.concatenate([replayed.models.reshape(-1, p), replayed.final])
    at = np.asarray(replayed.at, dtype=np.int64)
    rows = []  # each replication's rows of ``table``: its model at each recorded k, the last one last
    for r, m in enumerate(measured):
        ks = np.asarray(m.k, dtype=np.int64)
        rows.append(np.where(ks == replayed.updates[r], len(at) * R + r,
                             np.minimum(np.searchsorted(at, ks), max(len(at) - 1, 0)) * R + r))
    psi = measure.psis(objective, table)
    return [Metrics(list(m.k), list(m.time), psi[row].tolist())
            for m, row in zip(measured, rows, strict=True)]


def scheduled_run(scenario: Scenario, consortium: Consortium, objective: Objective,
                  members: np.ndarray | None = None, epsilons: np.ndarray | None = None,
                  *, events_path: Path | None = None, progress: bool | Progress = False) -> Trained:
    """One run in a network through schedule → replay → measure, with what :func:`dpmarket.runs.inline.train`
    gives: the engine's recorder writes events.csv and pays the owners' ledgers, the replay of its
    tape (streamed in chunks as the engine goes) computes the model, ψ is measured at the recorded
    iterations; the recorder, holding the learner's state and the owner of every update, is the
    run's training."""
    cast = Cast.of(scenario, consortium, objective, members, epsilons)
    owners, learner, step, ids, view = cast.owners, cast.learner, cast.step, cast.ids, cast.view
    lr = scenario.learner
    points = record_points(lr.iterations, scenario.output.metric_points)
    sequence = OwnerSequence(ids, len(consortium.names), lr.iterations)
    bar = progress_of(progress).phase("training", total=lr.iterations, unit="update")
    with EventLog(events_path, ids if view is not scenario else None) as log, bar as bar:
        schedule = NetworkSchedule(build_network(view, len(owners)), owners, [o.name for o in owners], points,
                                   log)
        replayed = replay(learner, owners, [_noted(schedule.chunks(), sequence)], [scenario.seed],
                          capacities(owners), at=points.tolist(), progress=bar)
    training = schedule.recorder
    (training.metrics,) = measured_psi(objective, replayed, [training.metrics])
    training.learner, training.sequence = replayed.batch.learner, sequence  # the one replication's
    curvature = step_curvature(learner, objective, owners)
    return Trained(training.owners, training, schedule.network, curvature, step)


def _noted(chunks: Iterator[Chunk], sequence: OwnerSequence) -> Iterator[Chunk]:
    """``chunks``, their owners appended to ``sequence`` as they go by (the timeline's i_k)."""
    for chunk in chunks:
        sequence.extend(chunk.owner)
        yield chunk
