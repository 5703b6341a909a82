"""Replay benchmark: replicated ideal-network runs against a bare numpy loop of Algorithm 1, the
papers' grid end to end against the same grid simulated exchange by exchange, ny_hospitals end to end.

Run from the repository root:  python benchmarks/bench_replay.py [--quick]

1. Cost per replication-update, lending_banks (3 banks × 250,000 loans, p = 10, T = 1,000, the
   scenario as shipped). The reference is a bare numpy loop of Algorithm 1 (np.clip,
   rng.laplace per update) on the same sufficient statistics, step sizes and noise scales, one run
   after another; it is checked first to compute what the package computes: fed replication r's
   tape and its owners' own noise streams, its final θ_L must equal the replay's within 10⁻¹².
   Measured: (a) the replay in-process (``replications.run_cell``: R tapes drawn, R × N noise
   streams, the batched kernel, ψ at the 201 recorded points), per replication-update; (b) the
   default executor (``run --replications`` as the command runs it: a process pool of 2, data built
   in the workers, one saved file per replication, tables and figures) with R replications of T and
   4T updates, and with 5R replications of T: the cost of one more replication-update is the slope
   in T, (t(R, 4T) − t(R, T)) / (3RT); the slope in R adds what each replication costs once (its
   streams, its saved record, its metric rows), printed per replication; t(R, T)/(RT) all in, for
   information (pool start-up, data, figures). Target: (b)'s cost per replication-update ≤ 1/20 of
   the bare loop's per update (goal 1/100). (c) With numba installed (extra ``fast``), the compiled
   kernel (``DPMARKET_KERNEL=numba``): the replay in-process and the kernel's own calls per
   replication-update, whether its models equal the numpy replay's bit for bit, and in fresh
   processes numba's import, the kernel's first call with an empty cache (compilation) and with
   the cache filled.
2. The papers' grid: ``python -m dpmarket sweep scenarios/lending_banks.toml --grid
   privacy.epsilon=1,3,10,30,100 --grid data.records=10000,…,250000 --replications 100`` as a
   subprocess, end to end (figures and report included). Reference in the same run: the same grid
   on the same executor (process × 2) with every replication simulated exchange by exchange (the
   path before the replay), in-process; the two sweep.csv must be byte-identical. Target ≤ 10 s.
3. ``python -m dpmarket run scenarios/ny_hospitals.toml`` as a subprocess (a single run: simulated
   exchange by exchange), median of 3. Target < 2 s.
4. Request-mode replications: ny_hospitals (86 hospitals, request network with losses and dropouts,
   T = 1,000) through ``run_cell`` — each replication's SimPy engine driving a recorder, then the
   replay and ψ — per replication-exchange, against a bare SimPy model of the same three-message
   exchange (a clock and an availability process per owner, a process per exchange), thread CPU
   time, interleaved rounds, median ratio. Target ≤ 2 × (goal 1.2 ×).

5. Tapes streamed in chunks: mobile_devices (10,000 phones, broadcast mode, 100,000 exchanges),
   ``run`` and ``run --replications 2`` (process × 2) as subprocesses: wall time, CPU time and peak
   RSS of the process tree. Targets: each < 30 s and < 1 GiB. References in the same run, thread CPU
   in-process: the data stage and the owners; the SimPy engine driving the recorder alone (its whole
   tape kept, events counted, nothing learnt: what the engine costs); the replay of that tape alone;
   the run exchange by exchange (the engine computing every answer, lost and collided ones included),
   which is what ``run`` did before.

Prints the load average at start and end, figures and PASS/FAIL; always exits 0 (it is a report).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import simpy
from timing import best_of

from dpmarket import rng
from dpmarket.data.problem import prepare
from dpmarket.data.proxy import resolve_step
from dpmarket.experiment import study, task
from dpmarket.experiment.grid import pin_data_seed
from dpmarket.privacy.cohort import build_owners
from dpmarket.replay import compiled
from dpmarket.replay.kernel import replay
from dpmarket.runs.inline import train
from dpmarket.runs.pilots import market_stage
from dpmarket.runs.replications import run_cell
from dpmarket.scenario.loading import load
from dpmarket.schedule.protocol import make_learner, record_points
from dpmarket.schedule.scheduler import capacities, network_tape
from dpmarket.schedule.sim.network import build_network

ROOT = Path(__file__).resolve().parent.parent
LENDING, NY = ROOT / "scenarios" / "lending_banks.toml", ROOT / "scenarios" / "ny_hospitals.toml"
GRID = ["privacy.epsilon=1,3,10,30,100", "data.records=10000,25000,50000,100000,250000"]
MOBILE = ROOT / "scenarios" / "mobile_devices.toml"
RATIO_TARGET, RATIO_GOAL, GRID_TARGET, NY_TARGET = 1 / 20, 1 / 100, 10.0, 2.0
MOBILE_SECONDS, MOBILE_GIB = 30.0, 1.0
MEASURED = ("import resource, subprocess, sys; "
            "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(u.ru_utime + u.ru_stime, u.ru_maxrss)")  # the command's tree: CPU seconds, peak KiB


def constants(cell) -> tuple:
    """What the bare loop precomputes: owners' A_i, b_i, 2/n_i, n_i/n, noise scales, the steps."""
    c = cell.replayed[0].batch.c
    owners = cell.owners
    return ([o.data.stats.A for o in owners], [o.data.stats.b for o in owners],
            [2.0 / o.data.n for o in owners], c._share, [o.scale for o in owners],
            c.N, c.lam, c.theta_max, c.step_owner, c.step_central)


def bare_loop(consts: tuple, sequence: list[int], noise=None, gen=None) -> np.ndarray:
    """Algorithm 1 as a plain numpy loop over the owner ``sequence``; ``noise(i)`` gives owner i's next
    noise vector, else ``gen.laplace`` of its scale. Returns the final θ_L."""
    A, b, two_n, share, scale, N, lam, tmax, a_i, a_L = consts
    p = len(b[0])
    theta_L, theta = np.zeros(p), np.zeros((N, p))
    for i in sequence:
        bar = 0.5 * (theta_L + theta[i])
        q = two_n[i] * (A[i] @ bar - b[i])
        q = q + (noise(i) if noise is not None else gen.laplace(0.0, scale[i], p))
        g = 2.0 * lam * bar
        theta[i] = np.clip(bar - a_i * (g / (2 * N) + share[i] * q), -tmax, tmax)
        theta_L = np.clip(bar - a_L * g, -tmax, tmax)
    return theta_L


def same_computation(scenario, prepared, cell, seeds) -> float:
    """max |Δθ_L| / max |θ_L| between the bare loop fed each replication's tape and noise and the replay."""
    consts, worst = constants(cell), 0.0
    for r, seed in enumerate(seeds):
        fresh = build_owners(scenario.model_copy(update={"seed": seed}), prepared.consortium,
                             prepared.objective)
        theta = bare_loop(consts, cell.tapes[r].owner.tolist(), lambda i, f=fresh: f[i].noise.draw())
        ours = cell.model(r, cell.facts[r].updates)
        worst = max(worst, float(np.max(np.abs(theta - ours)) / np.max(np.abs(ours))))
    return worst


FIRST_CALL = ("import time; t0 = time.perf_counter(); import numba; t1 = time.perf_counter(); "
              "import numpy as np; from dpmarket.replay import compiled; z = np.zeros; "
              "compiled.async_block(z((1, 2)), z((2, 2)), z((1, 2), dtype=np.int64), 0, (z((2, 2, 2)), "
              "z((2, 2)), z(2), z(2)), learner=(0.1, 0.1, 0.1, 1.0, False), "
              "block=(z((1, 1), dtype=np.int64), np.ones(1, dtype=np.int64), z((1, 2)), "
              "z((1, 1), dtype=np.int64), z((1, 1)), np.full(1, -1, dtype=np.int64)), "
              "models=z((0, 1, 2))); print(t1 - t0, time.perf_counter() - t1)")


def numba_costs() -> dict:
    """numba's import and the kernel's first call in fresh processes: with an empty cache directory
    (compilation), then with the cache it left (what every later process pays)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**_env(), "NUMBA_CACHE_DIR": cache}
        runs = [subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, cwd=ROOT,
                               env=env, check=True).stdout.split() for _ in range(2)]
    return {"import": float(runs[1][0]), "compile": float(runs[0][1]), "cached": float(runs[1][1])}


def compiled_kernel(scenario, prepared, seeds, cell) -> dict:
    """(c): the replay with the compiled kernel in-process, per replication-update, and the kernel's own
    calls; whether its models are the numpy replay's bit for bit."""
    spent, right = [0.0], compiled.async_block  # the kernel's seconds in each run

    def timed(*args, **kwargs):
        start = time.perf_counter()
        done = right(*args, **kwargs)
        spent[-1] += time.perf_counter() - start
        return done

    def run():
        spent.append(0.0)
        return run_cell(scenario, seeds, prepared.consortium, prepared.objective)

    os.environ[compiled.VARIABLE], compiled.async_block = "numba", timed
    try:
        fast = run()  # compiles, or loads the cached kernel
        spent.clear()
        replayed = best_of(3, run)
    finally:
        os.environ.pop(compiled.VARIABLE)
        compiled.async_block = right
    R, T = len(seeds), scenario.learner.iterations
    same = all(np.array_equal(a.models, b.models) and np.array_equal(a.final, b.final)
               for a, b in zip(fast.replayed, cell.replayed, strict=True))
    return {"replay_us": 1e6 * replayed / (R * T), "kernel_us": 1e6 * min(spent) / (R * T), "same": same,
            **numba_costs()}


def executor_seconds(scenario, reps: int, iterations: int, directory: Path) -> float:
    """Wall seconds of ``run --replications reps`` on the default executor (process x 2), in-process
    as the command runs it: data built in the workers, saved replications, tables and figures."""
    learner = scenario.learner.model_copy(update={"iterations": iterations})
    base = scenario.model_copy(update={"learner": learner})
    plan = study.make_plan("replications", base, [], reps, str(LENDING))
    return best_of(1, lambda: study.run_replications(plan, directory, study.Execution("process", 2)))


def per_update(quick: bool) -> dict:
    """Part 1: µs per update of the bare loop, per replication-update of the replay and the executor."""
    scenario = pin_data_seed(load(LENDING))
    prepared = prepare(scenario)
    R, T = (20 if quick else 100), scenario.learner.iterations
    seeds = rng.replication_seeds(scenario.seed, R)
    cell = run_cell(scenario, seeds, prepared.consortium, prepared.objective, keep=True)
    out = {"R": R, "T": T, "agree": same_computation(scenario, prepared, cell, seeds[:5])}
    consts, sequence = constants(cell), cell.tapes[0].owner.tolist()
    gen = np.random.default_rng(0)
    out["bare_us"] = 1e6 * best_of(3, lambda: bare_loop(consts, sequence, gen=gen)) / T
    replay = best_of(3, lambda: run_cell(scenario, seeds, prepared.consortium, prepared.objective))
    out["replay_us"] = 1e6 * replay / (R * T)
    out["numba"] = compiled_kernel(scenario, prepared, seeds, cell) if compiled.available() else None
    with tempfile.TemporaryDirectory() as tmp:
        t = {(r, n): executor_seconds(scenario, r, n, Path(tmp) / f"r{r}-{n}")
             for r, n in ((R, T), (R, 4 * T), (5 * R, T))}
    out["slope_T_us"] = 1e6 * (t[R, 4 * T] - t[R, T]) / (R * 3 * T)  # per update: the kernel's share
    out["slope_R_us"] = 1e6 * (t[5 * R, T] - t[R, T]) / (4 * R * T)  # per replication, spread over T
    out["per_replication_ms"] = 1e3 * (t[5 * R, T] - t[R, T]) / (4 * R) - 1e-3 * out["slope_T_us"] * T
    out["executor_total_us"] = 1e6 * t[R, T] / (R * T)
    out["executor_seconds"] = t
    return out


def paper_grid(quick: bool) -> dict:
    """Part 2: the sweep as a subprocess, replayed; the same grid simulated inline as the reference."""
    reps = 10 if quick else 100
    with tempfile.TemporaryDirectory() as tmp:
        grid = [a for g in GRID for a in ("--grid", g)]
        cmd = [sys.executable, "-m", "dpmarket", "sweep", str(LENDING), *grid, "--replications", str(reps),
               "--out", f"{tmp}/replayed", "--quiet"]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=_env())
        replayed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        base = load(LENDING, ["output.plots=true"])
        plan = study.make_plan("sweep", base, GRID, reps, str(LENDING))
        switches = task.batched, study.replayable
        task.batched, study.replayable = (lambda s, n: False), (lambda s: False)  # forked workers see it
        try:
            start = time.perf_counter()
            study.run_sweep(plan, Path(tmp) / "inline", study.Execution("process", 2))
            inline = time.perf_counter() - start
        finally:
            task.batched, study.replayable = switches
        tables = [(Path(tmp) / name / "sweep.csv").read_bytes() for name in ("replayed", "inline")]
        same = tables[0] == tables[1]
    return {"replications": reps, "replayed": replayed, "inline": inline, "same": same}


def ny_end_to_end(repeats: int) -> list[float]:
    """Part 3: ``run scenarios/ny_hospitals.toml`` as a subprocess, wall seconds."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats + 1):
            start = time.perf_counter()
            cmd = [sys.executable, "-m", "dpmarket", "run", str(NY), "--out", f"{tmp}/r{i}", "--quiet"]
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=_env())
            times.append(time.perf_counter() - start)
    return times[1:]  # the first warms the file cache and the bytecode


def bare_request_model(owners: int, updates: int, net, seed: int) -> float:
    """A bare SimPy model of ny_hospitals' request-mode exchange, written as a researcher would: a
    Poisson clock and an on/off availability process per owner; a tick of a free, online owner
    starts an exchange process of three messages (request, query, answer), each taking the
    transmission time plus the latency, lost if the learner is busy or the owner went offline.
    Thread CPU seconds per completed exchange."""
    env, gen = simpy.Environment(), np.random.default_rng(seed)
    busy, learner, online, done, count = [False] * owners, [False], [True] * owners, env.event(), [0]
    hop = net.transmission_time + net.latency

    def exchange(i):
        yield env.timeout(hop)
        if learner[0] or not online[i]:
            busy[i] = False
            return
        learner[0] = True
        yield env.timeout(hop)
        yield env.timeout(hop)
        learner[0] = busy[i] = False
        if online[i]:
            count[0] += 1
            if count[0] >= updates and not done.triggered:
                done.succeed()

    def clock(i):
        while True:
            for wait in gen.exponential(1.0, 64).tolist():
                yield env.timeout(wait)
                if online[i] and not busy[i]:
                    busy[i] = True
                    env.process(exchange(i))

    def availability(i):
        while True:
            yield env.timeout(gen.exponential(net.dropout.mean_online))
            online[i] = False
            yield env.timeout(gen.exponential(net.dropout.mean_offline))
            online[i] = True

    for i in range(owners):
        env.process(clock(i))
        env.process(availability(i))
    start = time.thread_time()
    env.run(until=done)
    return (time.thread_time() - start) / count[0]


def request_engine(quick: bool) -> dict:
    """Part 4: ny_hospitals' request-mode replications (engine schedule, replay, ψ) per replication-
    exchange against the bare SimPy model, interleaved rounds, thread CPU time."""
    scenario = pin_data_seed(load(NY))
    prepared = prepare(scenario)
    market = market_stage(scenario, prepared)
    deal = (market.outcome.members, market.outcome.epsilon)
    R = 5 if quick else 20
    seeds = rng.replication_seeds(scenario.seed, R)
    ratios, ours, bare = [], [], []
    for rnd in range(2 if quick else 3):
        start = time.thread_time()
        cell = run_cell(scenario, seeds, prepared.consortium, prepared.objective, deal[0], epsilons=deal[1])
        per = (time.thread_time() - start) / sum(f.updates for f in cell.facts)
        ref = statistics.median(bare_request_model(len(cell.owners), scenario.learner.iterations,
                                                   scenario.network, rnd * 10 + s) for s in range(3))
        ours.append(per)
        bare.append(ref)
        ratios.append(per / ref)
    return {"R": R, "ours_us": 1e6 * statistics.median(ours), "bare_us": 1e6 * statistics.median(bare),
            "ratio": statistics.median(ratios)}


def measured_command(args: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (GiB, the largest process of its tree) of
    ``python -m dpmarket *args`` in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURED, sys.executable, "-m", "dpmarket", *args],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), check=True)
    wall = time.perf_counter() - start
    cpu, rss = done.stdout.split()
    return wall, float(cpu), int(rss) / 2**20  # KiB → GiB


def mobile_streamed(quick: bool) -> dict:
    """Part 5: mobile_devices run and replicated as subprocesses; engine, replay and the run exchange
    by exchange alone in-process (thread CPU)."""
    sets = ["--set", "learner.iterations=10000"] if quick else []
    with tempfile.TemporaryDirectory() as tmp:
        single = measured_command(["run", str(MOBILE), "--out", f"{tmp}/run", "--quiet", *sets])
        twice = measured_command(["run", str(MOBILE), "--replications", "2", "--out", f"{tmp}/reps",
                                  "--quiet", *sets])
    scenario = load(MOBILE, sets[1:])
    start = time.thread_time()
    prepared = prepare(scenario)
    owners = build_owners(scenario, prepared.consortium, prepared.objective)
    data = time.thread_time() - start
    lr, m = scenario.learner, scenario.model
    points = record_points(lr.iterations, scenario.output.metric_points)
    start = time.thread_time()
    tape, _, _ = network_tape(build_network(scenario, len(owners)), owners, [o.name for o in owners], points)
    engine = time.thread_time() - start
    sizes = np.array([o.data.n for o in owners])
    rho = resolve_step(scenario, prepared.consortium, sizes).rho
    learner = make_learner(lr.algorithm, sizes, prepared.objective.p, lr.iterations, rho,
                           lam=m.regularization,
                           theta_max=m.theta_max, theta_l_step=lr.theta_l_step, weighting=lr.weighting)
    start = time.thread_time()
    replay(learner, owners, [tape.chunks()], [scenario.seed], capacities(owners), at=points.tolist())
    replayed = time.thread_time() - start
    start = time.thread_time()
    train(scenario, prepared.consortium, prepared.objective)
    inline = time.thread_time() - start
    return {"updates": tape.updates, "single": single, "twice": twice, "data": data, "engine": engine,
            "replay": replayed, "inline": inline}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def load_text() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL  <<<"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer replications (a smoke test)")
    args = parser.parse_args()
    print(f"bench_replay: {os.cpu_count()} CPUs, load average {load_text()} at start"
          f"{'  (--quick: smoke test, figures are rough)' if args.quick else ''}")
    u = per_update(args.quick)
    R, T = u["R"], u["T"]
    print(f"\n1. cost per replication-update, lending_banks (N = 3, p = 10), R = {R} and {5 * R}, T = {T:,} "
          f"and {4 * T:,}")
    bare = u["bare_us"]
    t = u["executor_seconds"]
    lines = [("bare numpy loop of Algorithm 1, one run", bare, "µs per update (best of 3)"),
             (f"replay in-process (run_cell, R = {R})", u["replay_us"], f"= 1/{bare / u['replay_us']:.0f}"),
             ("default executor (process x 2), per update", u["slope_T_us"],
              f"= 1/{bare / u['slope_T_us']:.0f}  (R = {R}: T = {T:,} {t[R, T]:.2f} s, T = {4 * T:,} "
              f"{t[R, 4 * T]:.2f} s)"),
             (f"   … with each replication's fixed costs, T = {T:,}", u["slope_R_us"],
              f"= 1/{bare / u['slope_R_us']:.0f}  ({5 * R} replications: {t[5 * R, T]:.2f} s; "
              f"{u['per_replication_ms']:.2f} ms per replication: streams, saved record, metric rows)"),
             (f"default executor, R = {R} all in", u["executor_total_us"],
              "(pool start-up, data, files, figures)")]
    for label, value, note in lines:
        print(f"   {label:48s} {value:8.3f} µs  {note}")
    print(f"   bare loop fed the tapes and noise = replay: max relative |Δθ_L| {u['agree']:.1e}")
    nb = u["numba"]
    if nb is None:
        print("   compiled kernel: numba is not installed (extra 'fast'); numpy alone measured")
    else:
        kernel = nb["kernel_us"]
        print(f"   {'compiled kernel (numba): replay in-process':48s} {nb['replay_us']:8.3f} µs  "
              f"= 1/{bare / nb['replay_us']:.0f};  the kernel's calls alone {kernel:.3f} µs "
              f"= 1/{bare / kernel:.0f} (goal 1/100)")
        print(f"   its models = the numpy replay's bit for bit: {'yes' if nb['same'] else 'NO  <<<'}")
        print(f"   numba in a fresh process: import {nb['import']:.2f} s; the kernel's first call "
              f"{nb['compile']:.2f} s compiling (empty cache), {nb['cached']:.2f} s with the cache filled")
    ratio = u["slope_T_us"] / u["bare_us"]
    g = paper_grid(args.quick)
    print(f"\n2. the papers' grid: 5 ε x 5 n x {g['replications']} replications, T = 1,000, process x 2")
    print(f"   sweep, replayed (subprocess, end to end)      {g['replayed']:7.2f} s")
    print(f"   same grid simulated inline (in-process)       {g['inline']:7.2f} s   "
          f"= {g['inline'] / g['replayed']:.1f} x")
    print(f"   sweep.csv byte-identical: {'yes' if g['same'] else 'NO  <<<'}")
    ny = ny_end_to_end(3)
    print(f"\n3. run scenarios/ny_hospitals.toml (subprocess): median {statistics.median(ny):.2f} s "
          f"({', '.join(f'{t:.2f}' for t in ny)})")
    e = request_engine(args.quick)
    print(f"\n4. request-mode replications, ny_hospitals (86 hospitals, T = 1,000), R = {e['R']}, thread CPU")
    print(f"   engine schedule + replay + ψ          {e['ours_us']:7.1f} µs per replication-exchange")
    print(f"   bare SimPy model of the exchange      {e['bare_us']:7.1f} µs per exchange   "
          f"ratio {e['ratio']:.2f} x (median of rounds)")
    mo = mobile_streamed(args.quick)
    print(f"\n5. mobile_devices, tapes streamed in chunks (10,000 phones, {mo['updates']:,} exchanges)")
    for label, (wall, cpu, gib) in (("run (subprocess)", mo["single"]),
                                    ("run --replications 2 (process x 2)", mo["twice"])):
        print(f"   {label:36s} wall {wall:6.1f} s, CPU {cpu:6.1f} s, peak {gib:.2f} GiB")
    print(f"   in-process, thread CPU: data and owners {mo['data']:.1f} s; the SimPy engine driving the "
          f"recorder alone {mo['engine']:.1f} s; the replay of its tape {mo['replay']:.1f} s")
    print(f"   reference: the run exchange by exchange (engine computing every answer) {mo['inline']:.1f} s")
    print(f"\nload average at end: {load_text()}")
    print("\nsummary")
    rows = [("replication-update / bare update", f"1/{1 / ratio:.0f}", "≤ 1/20 (goal 1/100)",
             ratio <= RATIO_TARGET and u["agree"] <= 1e-12),
            ("papers' grid end to end", f"{g['replayed']:.1f} s", f"≤ {GRID_TARGET:g} s",
             g["replayed"] <= GRID_TARGET and g["same"]),
            ("ny_hospitals end to end", f"{statistics.median(ny):.2f} s", f"< {NY_TARGET:g} s",
             statistics.median(ny) < NY_TARGET)]
    rows.append(("request-mode replication-exchange", f"{e['ratio']:.2f} x", "≤ 2 x (goal 1.2 x)",
                 e["ratio"] <= 2.0))
    for label, (wall, _, gib) in (("mobile_devices run", mo["single"]),
                                  ("mobile_devices --replications 2", mo["twice"])):
        rows.append((label, f"{wall:.1f} s {gib:.2f} GiB", f"< {MOBILE_SECONDS:g} s, < {MOBILE_GIB:g} GiB",
                     wall < MOBILE_SECONDS and gib < MOBILE_GIB))
    for name, measured, target, ok in rows:
        print(f"   {name:34s} {measured:>15s}  {target:>20s}  {verdict(ok)}")
    if ratio > RATIO_GOAL:
        print(f"   goal 1/100 not met: 1/{1 / ratio:.0f}")
    scale = " (quick: the grid target is for 100 replications)" if args.quick else ""
    print(f"   {scale}" if scale else "", end="")


if __name__ == "__main__":
    main()
