"""Reproducibility across machines: the same commands under other CPU kernels, compared file by file.

Run from the repository root:  python benchmarks/bench_reproducibility.py [--quick] [--keep DIR]

A user's machine differs from ours in its CPU, so OpenBLAS picks another kernel and numpy other vector
loops, and the last bits of sums differ. This script emulates such machines on this one, each in its
own child processes (this process and the test suite leave the environment as they find it):

- ``OPENBLAS_CORETYPE`` set to each OpenBLAS kernel this CPU can execute (Prescott: SSE3; Sandybridge:
  AVX; Haswell: AVX2 and FMA; SkylakeX: AVX-512), the kernel OpenBLAS would pick on older or newer
  processors;
- ``NPY_DISABLE_CPU_FEATURES`` turning off numpy's AVX-512 loops (a processor without AVX-512) or its
  AVX2 loops too (an older one), with the matching OpenBLAS kernel;
- ``OPENBLAS_NUM_THREADS`` of 1 and 8 (a one-core machine, a large server).

Every "machine" runs the same commands — every bundled scenario, a replicated run, a sweep, the
forecast, a policy comparison with the property table, the dynamic market, Gaussian answers under
the RDP and PLD accountants, the logistic and hinge losses, the audit — into a fresh directory (the
forecast calibrated afresh: no cache is shared). Each file is compared with the first machine's:

- ``events.csv`` must hold the same rows with the same schedule (time, kind, owner, iteration, channel,
  detail) character for character, its figures (ε spent, a market's amounts) as floats below;
- in every other text file (CSV, JSON, TOML, the printed console text, report.html) the words must be
  identical and the numbers are compared; the script prints, per command and file, the largest
  relative difference and where it is, and the largest over all, which the contract's tolerance
  (:data:`dpmarket.system.reproducibility.RELATIVE`) must exceed;
- figures (PNG) are compared by their bytes, and a difference reported but not counted (a line drawn
  a 10⁻¹⁶ further is a pixel's antialiasing).

Prints the table and PASS/FAIL against the contract; always exits 0 (a report, not a test).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dpmarket.scenario.schema import POLICIES
from dpmarket.system.reproducibility import (
    ABSOLUTE,
    NUMBER,
    RELATIVE,
    _unit,
    event_differences,
    within,
    without_wall_clock,
)

ROOT = Path(__file__).resolve().parent.parent
NOT_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"
NOT_AVX2 = "X86_V3 " + NOT_AVX512

# name -> (environment, the CPU flags it needs). The first is the machine as found.
MACHINES = {
    "as found": ({}, set()),
    "SkylakeX": ({"OPENBLAS_CORETYPE": "SkylakeX"}, {"avx512f"}),
    "Haswell": ({"OPENBLAS_CORETYPE": "Haswell"}, {"avx2", "fma"}),
    "Haswell, numpy without AVX-512": (
        {"OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": NOT_AVX512}, {"avx2", "fma"}),
    "Sandybridge, numpy without AVX2": (
        {"OPENBLAS_CORETYPE": "Sandybridge", "NPY_DISABLE_CPU_FEATURES": NOT_AVX2}, {"avx"}),
    "Prescott, numpy without AVX2": (  # Linux calls SSE3 "pni"
        {"OPENBLAS_CORETYPE": "Prescott", "NPY_DISABLE_CPU_FEATURES": NOT_AVX2}, {"pni"}),
    "1 BLAS thread": ({"OPENBLAS_NUM_THREADS": "1"}, set()),
    "8 BLAS threads": ({"OPENBLAS_NUM_THREADS": "8"}, set()),
}

PLD_GAUSSIAN = ["--set", "privacy.mechanism='gaussian'", "--set", "privacy.accountant='pld'",
                "--set", "privacy.delta=1e-6"]
RDP_GAUSSIAN = ["--set", "privacy.mechanism='gaussian'", "--set", "privacy.accountant='rdp'",
                "--set", "privacy.delta=1e-6"]
LOGISTIC = ["--set", "data.kind='card_fraud'", "--set", "model.loss='logistic'",
            "--set", "model.intercept=true"]

# name -> dpmarket arguments; OUT is replaced by the command's output directory.
COMMANDS = {
    "ny_hospitals": ["run", "ny_hospitals", "--out", "OUT"],
    "ny_hospitals dynamic": ["run", "ny_hospitals", "--out", "OUT", "--set", "market.mode='dynamic'",
                             "--set", "market.payment='on_delivery'", "--set", "market.rule='progress'"],
    "lending_banks": ["run", "lending_banks", "--out", "OUT"],
    "lending_banks gaussian pld": ["run", "lending_banks", "--out", "OUT", *PLD_GAUSSIAN],
    "lending_banks laplace pld": ["run", "lending_banks", "--out", "OUT", "--set", "privacy.accountant='pld'",
                                  "--set", "privacy.delta=1e-7", "--set", "privacy.epsilon=0.5"],
    "lending_banks gaussian rdp sync": ["run", "lending_banks", "--out", "OUT", *RDP_GAUSSIAN, "--set",
                                        "learner.algorithm='sync'", "--set", "learner.iterations=50"],
    "lending_banks logistic": ["run", "lending_banks", "--out", "OUT", *LOGISTIC],
    "lending_banks replications": ["run", "lending_banks", "--out", "OUT", "--replications", "20"],
    "lending_grades": ["run", "lending_grades", "--out", "OUT"],
    "ny_counties_sparcs": ["run", "ny_counties_sparcs", "--out", "OUT"],
    "fraud_svm": ["run", "fraud_svm", "--out", "OUT"],
    "many_banks": ["run", "many_banks", "--out", "OUT"],
    "banks_market": ["run", "banks_market", "--out", "OUT"],
    "mobile_devices": ["run", "mobile_devices", "--out", "OUT", "--set", "learner.iterations=20000"],
    "sweep": ["sweep", "lending_banks", "--out", "OUT", "--grid", "privacy.epsilon=1,10",
              "--grid", "data.records=10000,100000", "--replications", "10"],
    "forecast": ["forecast", "ny_hospitals"],
    "market properties": ["market", "banks_market", "--out", "OUT", "--policies", ",".join(POLICIES),
                          "--replications", "5", "--properties"],
    "market marginal": ["market", "banks_market", "--out", "OUT", "--policies", "marginal,procurement",
                        "--replications", "3", "--set", "market.budget=1000"],
    "audit": ["audit", "lending_banks", "--out", "OUT"],
    "audit one-run": ["audit", "lending_banks", "--out", "OUT", "--method", "one-run"],
}
QUICK = ("ny_hospitals", "lending_banks gaussian pld", "lending_banks logistic", "fraud_svm", "forecast")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux), or none where /proc/cpuinfo is absent (no kernel is emulated)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def record(machine: dict, commands: dict, where: Path) -> dict[str, float]:
    """Runs ``commands`` under ``machine``'s environment in a fresh working directory ``where``;
    each command's console text is kept as ``console.txt`` in its directory. Returns wall seconds."""
    where.mkdir(parents=True)
    env = {**os.environ, **machine, "COLUMNS": "100", "PYTHONHASHSEED": "0"}
    seconds = {}
    for name, arguments in commands.items():
        out = where / "out" / name.replace(" ", "_")
        # relative (the console text names it), and apart from the bundled scenarios' names
        argv = [str(out.relative_to(where)) if a == "OUT" else a for a in arguments]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "dpmarket", *argv, "--quiet"], cwd=where, env=env,
                              capture_output=True, text=True)
        seconds[name] = time.perf_counter() - start
        out.mkdir(parents=True, exist_ok=True)
        (out / "console.txt").write_text(f"exit {done.returncode}\n{done.stdout}{done.stderr}")
        if done.returncode:
            print(f"    {name}: exit {done.returncode}: {(done.stdout + done.stderr).strip()[-300:]}")
    return seconds


def _fields(path: Path, text: str) -> list[tuple[str, str]]:
    """(where, value text) pairs of a file: a CSV's cells by column, a JSON's leaves by key path, any
    other text by line. Wall-clock figures are left out (they differ between any two runs)."""
    if path.suffix != ".json":
        text = without_wall_clock(text)
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        header = rows[0] if rows else []
        return [(header[j] if j < len(header) else f"column {j}", cell) for row in rows[1:]
                for j, cell in enumerate(row)]
    if path.suffix == ".json":
        out: list[tuple[str, str]] = []

        def walk(node, key: str) -> None:
            if isinstance(node, dict):
                for k, v in node.items():
                    if k not in ("wall_seconds", "machine"):  # the machine: what differs by definition
                        walk(v, f"{key}.{k}" if key else k)
            elif isinstance(node, list):
                for v in node:
                    walk(v, key + "[]")
            else:
                out.append((key, json.dumps(node)))

        walk(json.loads(text), "")
        return out
    return [(f"line {i + 1}", line) for i, line in enumerate(text.splitlines())
            if "reproducibility.machine." not in line]  # report.html's row of the machine


@dataclass
class Differences:
    """What differs between two versions of a file: ``words`` names a difference of text, shape or
    an integer (outside the contract whatever its tolerance); ``pairs`` are the differing floats
    as (where, first, other)."""

    words: str = ""
    pairs: list[tuple[str, float, float]] = field(default_factory=list)

    def relative(self) -> tuple[float, str]:
        """The largest relative difference, and where."""
        def size(pair: tuple[str, float, float]) -> float:
            _, a, b = pair
            return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0

        worst = max(self.pairs, key=size, default=None)
        if worst is None or size(worst) == 0.0:
            return 0.0, ""
        return size(worst), f"{worst[0]}: {worst[1]!r} against {worst[2]!r}"

    def needed(self) -> tuple[float, float]:
        """The least relative tolerance that covers every pair given the contract's absolute one, and
        the least absolute tolerance given its relative one."""
        relative = max((max(0.0, abs(a - b) - ABSOLUTE) / max(abs(a), abs(b)) for _, a, b in self.pairs
                        if a != b), default=0.0)
        absolute = max((max(0.0, abs(a - b) - RELATIVE * max(abs(a), abs(b))) for _, a, b in self.pairs),
                       default=0.0)
        return relative, absolute

    def outside(self) -> list[str]:
        """The pairs outside the contract."""
        return [f"{k}: {a!r} against {b!r}" for k, a, b in self.pairs if not within(a, b)]


def compare_file(first: Path, other: Path) -> Differences:
    """The differences between two versions of a text file."""
    fa = _fields(first, first.read_text(errors="replace"))
    fb = _fields(other, other.read_text(errors="replace"))
    if len(fa) != len(fb):
        return Differences(f"{len(fa)} fields against {len(fb)}")
    found = Differences()
    for (key, x), (_, y) in zip(fa, fb, strict=True):
        if x == y:
            continue
        if NUMBER.split(x) != NUMBER.split(y) or len(NUMBER.findall(x)) != len(NUMBER.findall(y)):
            return Differences(f"{key}: {x[:80]!r} against {y[:80]!r}")
        for e, f in zip(NUMBER.findall(x), NUMBER.findall(y), strict=True):
            if e == f:
                continue
            if _unit(e) == 0.0 and _unit(f) == 0.0:
                return Differences(f"{key}: integer {e} against {f} in {x[:80]!r}")
            found.pairs.append((key, float(e), float(f)))
    return found


def compare(first: Path, other: Path) -> list[tuple[str, str, Differences | str]]:
    """Per file of ``first``: (command, file, its differences, or a note on a figure's bytes)."""
    rows: list[tuple[str, str, Differences | str]] = []
    for path in sorted(first.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(first)
        if rel.parts[0] != "out":
            continue  # the forecast cache (outputs/forecasts): its results are in the commands' files
        command, name = rel.parts[1], "/".join(rel.parts[2:])
        twin = other / rel
        if not twin.exists():
            rows.append((command, name, Differences("missing on the other machine")))
        elif path.suffix in (".png", ".npz", ".pkl") or name.startswith("replications/"):
            same = path.read_bytes() == twin.read_bytes()
            rows.append((command, name, "" if same else "bytes differ (not counted)"))
        elif path.name == "events.csv":  # the schedule exactly, its figures (ε spent, amounts) as floats
            found = event_differences(path.read_text(), twin.read_text(), limit=1)
            rows.append((command, name, Differences(found[0] if found else "") if found
                         else compare_file(path, twin)))
        else:
            rows.append((command, name, compare_file(path, twin)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--keep", type=Path, help="keep every machine's outputs in this directory (machines "
                        "already recorded there are compared again without running)")
    parser.add_argument("--commands", help="a comma-separated subset of: " + "; ".join(COMMANDS))
    parser.add_argument("--machines", help="a semicolon-separated subset of: " + "; ".join(MACHINES))
    args = parser.parse_args()
    wanted = [c.strip() for c in args.commands.split(",")] if args.commands else list(COMMANDS)
    commands = {k: v for k, v in COMMANDS.items() if k in wanted and (not args.quick or k in QUICK)}
    flags = cpu_flags()
    chosen = [m.strip() for m in args.machines.split(";")] if args.machines else list(MACHINES)
    machines = {name: env for name, (env, needs) in MACHINES.items()
                if name in chosen and (needs <= flags or name == "as found")}
    skipped = [n for n in chosen if n not in machines]
    print(f"machines: {len(machines)} ({'; '.join(machines)})"
          + (f"; skipped, this CPU cannot run them: {'; '.join(skipped)}" if skipped else ""))
    print(f"as found: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"NPY_DISABLE_CPU_FEATURES={os.environ.get('NPY_DISABLE_CPU_FEATURES', '(unset)')}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="reproducibility-"))
    dirs = {}
    for i, (name, env) in enumerate(machines.items()):
        dirs[name] = base / f"machine{i}"
        if dirs[name].exists():
            print(f"  {name}: recorded before, in {dirs[name]}")
            continue
        seconds = record(env, commands, dirs[name])
        print(f"  {name}: {len(commands)} commands in {sum(seconds.values()):.0f} s", flush=True)
    names = list(machines)
    worst: dict[tuple[str, str], tuple[float, str, str]] = {}
    failures, bytes_only, pairs, files = [], set(), 0, set()
    overall, needed = (0.0, ""), (0.0, 0.0)
    for other in names[1:]:
        for command, name, found in compare(dirs[names[0]], dirs[other]):
            files.add((command, name))
            if isinstance(found, str):
                if found:
                    bytes_only.add(f"{command}/{name}")
                continue
            if found.words:
                failures.append(f"{other}: {command}/{name}: {found.words}")
                worst[(command, name)] = (math.inf, found.words, other)
                continue
            pairs += len(found.pairs)
            outside = found.outside()
            if outside:
                failures.append(f"{other}: {command}/{name}: {len(outside)} figures, e.g. {outside[0]}")
            r, where = found.relative()
            need = found.needed()
            needed = (max(needed[0], need[0]), max(needed[1], need[1]))
            if r > worst.get((command, name), (-1.0,))[0]:
                worst[(command, name)] = (r, where, other)
            if r > overall[0]:
                overall = (r, f"{other}: {command}/{name}: {where}")
    print(f"\n{'command':<32} {'file':<30} {'largest relative difference':>12}  where (machine)")
    for (command, name), (r, where, other) in sorted(worst.items()):
        if r > 0.0:
            shown = "differ" if math.isinf(r) else f"{r:.2e}"
            print(f"{command[:32]:<32} {name[:30]:<30} {shown:>12}  {where[:100]} ({other})")
    same = len(files) - len([k for k, v in worst.items() if v[0] > 0.0]) - len(bytes_only)
    print(f"\n{same} of {len(files)} files identical on every machine; {pairs} differing floats compared; "
          f"{len(bytes_only)} figures differ in their bytes only (not counted)")
    print(f"largest relative difference: {overall[0]:.3g} ({overall[1]})")
    print(f"tolerance needed: {needed[0]:.3g} relative (with {ABSOLUTE:g} absolute), "
          f"{needed[1]:.3g} absolute (with {RELATIVE:g} relative)")
    print(f"contract: events identical, floats within {RELATIVE:g} relative + {ABSOLUTE:g}")
    for failure in failures:
        print(f"  outside the contract: {failure}")
    print("PASS" if not failures else f"FAIL: {len(failures)} outside the contract")
    if not args.keep:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
