"""Tapes streamed in chunks: the same results wherever the chunk boundaries fall, in bounded memory.

A schedule emits its tape in chunks of a fixed number of updates while it runs (the SimPy engine
pauses at each full chunk) and the replay consumes them block by block. Here the chunks are made
7 updates long and the replay's blocks 5, so that boundaries of both kinds fall all over every run
(inside an owner's leave, a round, an overlapping exchange): every replication must still be the
inline run's (θ, ψ, times, counts, events.csv), and each way of mishandling a boundary must show.
"""

from __future__ import annotations

import gc
import json
import tracemalloc

import numpy as np
import pytest
from helpers import tiny

from dpmarket.data.problem import prepare
from dpmarket.experiment.grid import pin_data_seed
from dpmarket.output import results
from dpmarket.replay import kernel as replay_module
from dpmarket.runs import replications as replications_module
from dpmarket.runs import run as run_module
from dpmarket.runs.replications import run_cell
from dpmarket.schedule import scheduler as schedule_module
from dpmarket.schedule.protocol import record_points
from dpmarket.schedule.scheduler import IdealSchedules, NetworkSchedule, Recorder
from dpmarket.schedule.sim.network import build_network
from dpmarket.schedule.tape import Chunk, Tape
from tests.replay.test_kernel import CASES, STALE, dealt, mismatches, setup

SIZE, BLOCK = 7, 5
STREAMED = ("squared_async", "squared_capped_leaves", "squared_all_exhausted", "unequal_rates_caps", "sync",
            "sync_averaged_rates", "squared_clip", "request", "request_capped_logistic", *STALE, "broadcast",
            "market_decliners")


@pytest.fixture
def small_blocks(monkeypatch):
    """The replay's blocks 5 updates long (chunks are 7): their boundaries fall apart."""
    monkeypatch.setattr(replay_module, "CHUNK_LIMIT", BLOCK)


@pytest.mark.parametrize("case", STREAMED)
def test_chunk_boundaries_inside_the_runs_change_nothing(case, tmp_path, small_blocks):
    assert mismatches(case, tmp_path, size=SIZE) == []


def test_overlapping_exchanges_cross_chunk_boundaries_in_these_cases():
    """The stale cases above do test the kept query points: some update's query was sent in an
    earlier chunk than its own (and so, with blocks of 5, in an earlier block)."""
    for case in STALE:
        scenario, prepared, market = setup(case)
        cell = run_cell(scenario, (11, 12, 13, 14), prepared.consortium, prepared.objective, **dealt(market),
                        keep=True, size=SIZE)
        crossing = [np.sum(t.query // SIZE < np.arange(t.updates) // SIZE) for t in cell.tapes]
        assert sum(crossing) > 0, case


def dropped_asked(asked, end):
    """A mishandled boundary: the queries a later chunk's update uses are not handed on."""
    _, rest = RIGHT_SPLIT(asked, end)
    return replay_module.NO_ASKED, rest


def restarted_times(self, rows, waits):
    """A mishandled boundary: each chunk's times summed from 0 instead of the last tick's time."""
    self.last[rows] = 0.0
    return RIGHT_TIMES(self, rows, waits)


def lost_last_update(self):
    """A mishandled boundary: the update that filled a chunk is not handed on with it."""
    chunk = RIGHT_TAKE(self)
    if chunk.updates < 2:
        return chunk
    return Chunk(chunk.start, chunk.owner[:-1], chunk.time[:-1], chunk.answer[:-1],
                 None if chunk.query is None else chunk.query[:-1], chunk.leaves, chunk.asked)


def rounds_from_zero(self, together):
    """A mishandled boundary: every chunk of rounds numbers its answers from 0."""
    done = self.done
    RIGHT_ROUNDS(self, together)
    for r in together:
        c = self.queues[r][-1]
        self.queues[r][-1] = Chunk(c.start, c.owner, c.time, c.answer - done, rounds=True)


RIGHT_SPLIT, RIGHT_TIMES = replay_module._split_asked, IdealSchedules._times
RIGHT_TAKE, RIGHT_ROUNDS = Recorder.take, IdealSchedules._draw_rounds


@pytest.mark.parametrize("wrong, cases, expected", [
    ((replay_module, "_split_asked", dropped_asked), STALE, "did not say to keep"),
    ((IdealSchedules, "_times", restarted_times), ("squared_async", "squared_capped_leaves"), "times differ"),
    ((Recorder, "take", lost_last_update), ("request", "broadcast"), "missing or repeated"),
    ((IdealSchedules, "_draw_rounds", rounds_from_zero), ("sync",), "out of order"),
])
def test_a_mishandled_chunk_boundary_shows(wrong, cases, expected, tmp_path, monkeypatch, small_blocks):
    """Each mishandling gives a different run (a difference found by the comparison) or stops the
    replay (an error naming what is wrong), never a silent result."""
    monkeypatch.setattr(*wrong)
    for case in cases:
        try:
            found = mismatches(case, tmp_path / case, size=SIZE)
        except RuntimeError as exc:
            found = [str(exc)]
        assert any(expected in m for m in found), (case, found)


def test_a_whole_tape_cuts_into_chunks_and_joins_back():
    scenario, prepared, market = setup("request_two_channels_sensing")
    cell = run_cell(scenario, (11,), prepared.consortium, prepared.objective, keep=True)
    tape = cell.tapes[0]
    chunks = list(tape.chunks(SIZE))
    assert [c.start for c in chunks] == list(range(0, tape.updates, SIZE))
    assert max(c.updates for c in chunks) == SIZE
    again = Tape.of(chunks, tape.stop_reason, False)
    assert np.array_equal(again.owner, tape.owner) and np.array_equal(again.time, tape.time)
    assert np.array_equal(again.query, tape.query) and np.array_equal(again.answer, tape.answer)
    named = {(int(o), int(q)) for c in chunks if c.asked is not None for o, q in zip(*c.asked, strict=True)}
    crossing = np.flatnonzero(tape.query // SIZE < np.arange(tape.updates) // SIZE)
    assert named == {(int(tape.owner[j]), int(tape.query[j])) for j in crossing} != set()


def test_the_engine_pauses_at_every_full_chunk():
    """A network schedule hands its tape out as the engine goes: chunks of the set size (an update at
    the same instant may join the one that filled it), the engine paused in between."""
    scenario = pin_data_seed(tiny(network={"mode": "request", "clock_rate": 2.0, "transmission_time": 0.05,
                                           "latency": 0.02}, learner={"iterations": 200, "rho": 3.0}))
    prepared = prepare(scenario)
    cell = run_cell(scenario, (5,), prepared.consortium, prepared.objective)
    owners, names = cell.owners, [o.name for o in cell.owners]
    schedule = NetworkSchedule(build_network(scenario, len(owners)),
                               owners, names, record_points(200, 10), size=SIZE)
    sizes, times = [], []
    for chunk in schedule.chunks():
        sizes.append(chunk.updates)
        times.append(schedule.recorder.time)  # where the engine stands while the chunk is handed out
    assert sum(sizes) == 200 and len(sizes) == -(-200 // SIZE)
    assert all(SIZE <= s <= SIZE + 1 for s in sizes[:-1])
    assert times == sorted(times) and times[0] < times[-1] / 10  # the engine had not run ahead


def test_a_finished_schedule_frees_its_engine_without_the_cyclic_collector():
    """Once a network schedule has handed out its last chunk, its engine is taken apart: its stages,
    availability chains and exchanges' state are freed by reference counting, not left as cyclic
    garbage (a batch of replications would pile up thousands of objects per run until a collection)."""
    from dpmarket.schedule.sim.availability import Alternating
    from dpmarket.schedule.sim.engine import Engine
    from dpmarket.schedule.sim.exchange import Requests
    from dpmarket.schedule.sim.queue import Stage

    network = {"mode": "request", "clock_rate": 2.0, "transmission_time": 0.05, "latency": 0.02,
               "dropout": {"mean_online": 5.0, "mean_offline": 1.0}}
    scenario = pin_data_seed(tiny(network=network, learner={"iterations": 200, "rho": 3.0}))
    prepared = prepare(scenario)
    cell = run_cell(scenario, (5,), prepared.consortium, prepared.objective)
    names = [o.name for o in cell.owners]
    kinds = (Engine, Stage, Alternating, Requests)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        network = build_network(scenario, len(cell.owners))
        schedule = NetworkSchedule(network, cell.owners, names, record_points(200, 10))
        updates = sum(chunk.updates for chunk in schedule.chunks())
        left = [type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds)]
    finally:
        if was:
            gc.enable()
    assert updates == 200 and schedule.network.stop_reason == "iterations"
    assert left == []


def peak_bytes(iterations: int) -> int:
    """Peak memory traced while two replications of an ideal run of ``iterations`` updates are
    scheduled, replayed and measured, in chunks of 512 updates."""
    scenario = pin_data_seed(tiny(learner={"iterations": iterations, "rho": 3.0}))
    prepared = prepare(scenario)
    tracemalloc.start()
    run_cell(scenario, (1, 2), prepared.consortium, prepared.objective, size=512)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.slow
def test_memory_does_not_grow_with_the_number_of_exchanges(monkeypatch):
    """Four times the updates, about the same peak memory (a whole tape would be four times larger:
    32 bytes per update and replication, 3.8 MB at 60,000 updates × 2)."""
    monkeypatch.setattr(replay_module, "CHUNK_LIMIT", 512)
    short, long = peak_bytes(15_000), peak_bytes(60_000)
    assert long < 1.3 * short and long - short < 1_000_000, (short, long)


@pytest.mark.slow
def test_the_bound_is_what_streaming_buys(monkeypatch):
    """The test above fails when the replay holds whole tapes (blocks as long as the runs)."""
    monkeypatch.setattr(replay_module, "CHUNK_LIMIT", 10**9)
    monkeypatch.setattr(replay_module, "BLOCK_VALUES", 10**12)
    short, long = peak_bytes(15_000), peak_bytes(60_000)
    assert long > 2 * short


# -- one run alone: the learner itself replays the tape ---------------------------------------------

SINGLE = ("request", "request_two_channels_sensing", "broadcast", "broadcast_no_collisions_clip",
          "request_capped_logistic")


def run_files(scenario, out) -> dict[str, bytes]:
    """Every file of the run directory of ``scenario`` (summary.json without its wall time)."""
    results.run_and_write(scenario.model_copy(update={"output": scenario.output.model_copy(
        update={"plots": True})}), out)
    found = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix != ".html"}
    summary = json.loads(found.pop("summary.json"))
    summary.pop("wall_seconds")
    return {**found, "summary.json": json.dumps(summary, sort_keys=True).encode()}


@pytest.mark.parametrize("case", SINGLE)
def test_a_single_network_run_is_scheduled_with_the_files_of_the_run_exchange_by_exchange(
        case, tmp_path, monkeypatch, small_blocks):
    """``run`` in a network: the engine's recorder and the replay by the learner itself (chunks of 7)
    write the files the run exchange by exchange writes, byte for byte (figures included)."""
    scenario = pin_data_seed(tiny(**CASES[case], seed=11))
    monkeypatch.setattr(schedule_module, "CHUNK", SIZE)
    scheduled = run_files(scenario, tmp_path / "scheduled")
    assert set(scheduled) >= {"events.csv", "metrics.csv", "owners.csv", "summary.json", "psi.png",
                              "timeline.png", "topology.png", "channels.csv"}
    monkeypatch.setattr(run_module, "batched", lambda scenario, replications: False)
    assert run_files(scenario, tmp_path / "inline") == scheduled
    monkeypatch.setattr(run_module, "batched", replications_module.batched)
    monkeypatch.setattr(replay_module.Answers, "one", too_large)
    wrong = run_files(scenario, tmp_path / "wrong")  # answers 1 % too large: the same schedule, another model
    assert wrong["events.csv"] == scheduled["events.csv"]
    assert wrong["summary.json"] != scheduled["summary.json"]


RIGHT_ONE = replay_module.Answers.one


def too_large(self, slot, theta):
    """A wrong single-run kernel: every exact answer 1 % too large."""
    return 1.01 * RIGHT_ONE(self, slot, theta)
