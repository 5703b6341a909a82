"""What spans.csv, the timeline picture, the interactive view and the Chrome trace cost (issue 27).

1. ``run scenarios/ny_hospitals.toml`` as a user types it, with the timeline outputs (spans.csv,
   timeline.png from spans, report.html's interactive timeline) and without them
   (``dpmarket.output.results.WRITE_SPANS = False``: no spans, no timeline picture, no interactive
   view), interleaved, median of the repeats; then ``timeline RUN --trace`` on that run, in-process
   (imports warm: what writing the trace adds to the work) and as a command. Target: writing spans
   (spans.csv and the sinks of the picture and the interactive view, timed in-process) and the trace
   add at most 10 % to the run's CPU time. The run with timelines against the run without is printed
   too, with a 1.10 line: it also counts drawing the new timeline.png, which the run without does not
   draw at all (earlier releases drew the papers' picture there).
2. ``run scenarios/mobile_devices.toml`` (10,000 phones, 100,000 exchanges) with spans on: wall time
   and the peak RSS of the process tree (targets < 30 s, < 1 GiB, as bench_replay's), spans.csv's
   rows; then ``timeline RUN --trace``: wall, size, and the file parsed back (json.load) with its
   event count.

``--part 1`` or ``--part 2`` runs one part only. ``--baseline DIR`` adds, in part 1, the same
command run with the package of another checkout (e.g. ``git archive main | tar -x -C /tmp/main``):
the code before the timelines, whose run drew the old timeline.png with one figure helper.
``--quick``: 2 repeats and no mobile_devices. Always exits 0; FAIL is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = (
    "import sys; import dpmarket.output.results as r; r.WRITE_SPANS = {spans}; "
    "from dpmarket.cli import main; sys.exit(main(sys.argv[1:]))"
)
TREE = (
    "import resource, subprocess, sys, time; t = time.perf_counter(); "
    "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL); w = time.perf_counter() - t; "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(w, u.ru_maxrss, rc)"
)


def command(spans: bool, scenario: str, out: Path, package: Path = ROOT) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": str(package)}
    return [sys.executable, "-c", RUN.format(spans=spans), "run", scenario, "--out", str(out), "--quiet"], env


def rows(path: Path) -> int:
    """Data rows of a CSV file."""
    with open(path, encoding="utf-8") as fh:
        return sum(1 for _ in fh) - 1


def kilobytes(path: Path) -> float:
    return path.stat().st_size / 1e3


def timed(args: list[str], env: dict | None = None) -> float:
    return timed_cpu(args, env)[0]


def timed_cpu(args: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall seconds, and CPU seconds of the command's whole process tree (user + system): what other
    load on the machine inflates least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def spans_cost(scenario: str, out: Path) -> float:
    """Thread CPU seconds of writing spans.csv and feeding the timeline's sinks (the lanes picture's
    and report.html's interactive view's data) in one in-process run of ``scenario``."""
    from dpmarket.output import results
    from dpmarket.output.figures.painter import Painter
    from dpmarket.scenario.loading import load

    spent, write = [0.0], results.write_spans

    def timed_write(*args, **kwargs):
        start = time.thread_time()
        try:
            return write(*args, **kwargs)
        finally:
            spent[0] += time.thread_time() - start

    results.write_spans = timed_write
    try:
        results.run_and_write(load(scenario), out, progress=False, painter=Painter(enabled=False))
    finally:
        results.write_spans = write
    return spent[0]


def part_one(repeats: int, baseline: Path | None, work: Path) -> None:
    scenario = str(ROOT / "scenarios" / "ny_hospitals.toml")
    cases = {"with timelines": (True, ROOT), "without (WRITE_SPANS off)": (False, ROOT)}
    if baseline is not None:
        cases["baseline checkout"] = (True, baseline)
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(repeats):
        for c, (name, (spans, package)) in enumerate(cases.items()):
            args, env = command(spans, scenario, work / f"ny-{c}-{r}", package)
            wall, cpu = timed_cpu(args, env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    wall = {name: statistics.median(t) for name, t in walls.items()}
    cpu = {name: statistics.median(t) for name, t in cpus.items()}
    run_dir = work / "ny-0-0"  # with the timelines
    from dpmarket.output.timeline import write_trace

    write_trace(run_dir, work / "warm.json")  # imports and caches warm
    start = time.perf_counter()
    write_trace(run_dir, work / "ny.json")
    trace_s = time.perf_counter() - start
    command_s = timed(
        [sys.executable, "-m", "dpmarket", "timeline", str(run_dir), "--trace", str(work / "c.json")]
    )
    print(f"1. ny_hospitals `run`, median of {repeats} (load average {os.getloadavg()[0]:.1f} at the end)")
    for name in cases:
        print(
            f"   {name:28s} {wall[name]:6.3f} s wall {cpu[name]:6.3f} s CPU   "
            f"(walls: {', '.join(f'{t:.2f}' for t in walls[name])})"
        )
    print(
        f"   spans.csv {rows(run_dir / 'spans.csv'):,} rows; "
        f"report.html {kilobytes(run_dir / 'report.html'):.0f} kB"
    )
    print(
        f"   trace in-process {trace_s:.3f} s ({kilobytes(work / 'ny.json') / 1e3:.2f} MB); "
        f"`timeline --trace` as a command {command_s:.2f} s"
    )
    spans_s = spans_cost(scenario, work / "ny-spans")
    base = "without (WRITE_SPANS off)"
    share = (spans_s + trace_s) / cpu[base]
    print(
        f"   spans.csv and its sinks {spans_s:.3f} s + trace {trace_s:.3f} s, in-process = {share:.1%} "
        f"of the run without them (CPU)   target <= 10%   {'PASS' if share <= 0.10 else 'FAIL  <<<'}"
    )
    print("   the ratios below also count drawing the new timeline.png (the run without draws none)")
    ratio = (wall["with timelines"] + trace_s) / wall[base]
    print(
        f"   (run with timelines + trace) / run without = {ratio:.3f} wall   (1.10 line)   "
        f"{'within' if ratio <= 1.10 else 'above'} it; "
        f"{(cpu['with timelines'] + trace_s) / cpu[base]:.3f} in CPU time"
    )
    if baseline is not None:
        print(
            f"   run with timelines / baseline checkout = "
            f"{wall['with timelines'] / wall['baseline checkout']:.3f} "
            f"wall, {cpu['with timelines'] / cpu['baseline checkout']:.3f} CPU"
        )


def part_two(work: Path) -> None:
    out = work / "mobile"
    for spans in (False, True):  # without spans first; the run with them leaves its directory
        args, env = command(spans, str(ROOT / "scenarios" / "mobile_devices.toml"), out)
        result = subprocess.run(
            [sys.executable, "-c", TREE, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=True
        )
        wall, peak_kib, rc = result.stdout.split()
        wall, peak = float(wall), int(peak_kib) / 2**20
        if not spans:
            print(
                f"2. mobile_devices `run` without spans: {wall:.1f} s wall, peak RSS {peak:.2f} GiB, "
                f"exit {rc}"
            )
            continue
        print(
            f"   with spans: {wall:.1f} s wall, peak RSS {peak:.2f} GiB, exit {rc}; spans.csv "
            f"{rows(out / 'spans.csv'):,} rows ({kilobytes(out / 'spans.csv') / 1e3:.0f} MB)   "
            f"targets < 30 s, < 1 GiB   {'PASS' if wall < 30 and peak < 1 else 'FAIL  <<<'}"
        )
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "dpmarket", "timeline", str(out), "--trace", str(work / "m.json")],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    trace_s = time.perf_counter() - start
    start = time.perf_counter()
    with open(work / "m.json", encoding="utf-8") as fh:
        document = json.load(fh)
    parse_s = time.perf_counter() - start
    print(
        f"   `timeline --trace`: {trace_s:.1f} s, {kilobytes(work / 'm.json') / 1e3:.1f} MB, "
        f"{len(document['traceEvents']):,} events, parsed back in {parse_s:.1f} s; "
        f"owners: {document['otherData']['owners']}; detail: {document['otherData']['detail']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout whose package is the reference")
    parser.add_argument("--part", type=int, choices=(1, 2), help="run only this part")
    args = parser.parse_args()
    print(f"load average at start: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="bench-timeline-") as temp:
        if args.part != 2:
            part_one(2 if args.quick else args.repeats, args.baseline, Path(temp))
        if not args.quick and args.part != 1:
            part_two(Path(temp))


if __name__ == "__main__":
    main()
