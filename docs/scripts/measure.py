"""Re-measures every figure the documentation prints, and checks or rewrites the pages.

Run from the repository root::

    .venv/bin/python docs/scripts/measure.py check console defaults   # some tasks; exit 1 on a difference
    .venv/bin/python docs/scripts/measure.py write                    # every task: measure, rewrite the pages

How the docs build should call it: the console blocks are already replayed by the test suite
(``tests/docs``); before a release, and whenever the code changes what a command prints, run
``measure.py write console defaults market-in-time figures`` (about 10 minutes on two cores) and
commit what it rewrites; ``quantiles`` (10 minutes) and ``paper`` (about 25 minutes) when the
learning or privacy code changes. CI can run ``measure.py check console`` (2 minutes) to refuse a
page whose printed lines went stale.

Tasks (each re-runs the commands whose output a page shows):

* ``console``: every ```` ```console ```` block of every page (tests/docs/harness.py's rules): each
  command is run in a fresh directory per page, in page order; ``write`` replaces a command's printed
  lines by what it prints now (a block with a ``...`` elision is left to a hand, and reported);
  ``check`` is the harness's own comparison (wall-clock times aside).
* ``defaults``: the before/after table of docs/how-to/defaults.md (the scenarios of
  docs/how-to/defaults/, 20 replications each, the papers' set-up against the defaults).
* ``market-in-time``: the study table of docs/how-to/market-in-time.md (ny_hospitals and banks_market,
  static and in time, seeds 1–3).
* ``figures``: docs/accounting_lending.png, docs/market_banks.png and docs/market_banks_epsilons.png,
  drawn by the commands the pages name, and the tutorial's figures (docs/scripts/tutorial_figures.py).

A generated table sits between ``<!-- measure:NAME -->`` and ``<!-- /measure:NAME -->`` in its page,
and says when, where and in how long it was measured (times are the one figure that depends on the
machine; ``check`` compares everything else exactly).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tests" / "docs"))

import harness  # noqa: E402

ENV = {**os.environ, "COLUMNS": "100", "PYTHONHASHSEED": "0"}
ENV.pop("DPMARKET_FORECAST_CACHE", None)


def machine() -> str:
    """The machine a time was measured on: processor, cores, load, date."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, load average {load:.1f}, {date.today().isoformat()}"


def dpmarket(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m dpmarket ARGS`` in ``cwd``; a failure stops the measurement with its output."""
    done = subprocess.run(
        [sys.executable, "-m", "dpmarket", *args], cwd=cwd, env=ENV, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"dpmarket {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done


# --- generated tables between markers ----------------------------------------------------------


def replace_marked(page: Path, name: str, text: str, write: bool) -> bool:
    """Put ``text`` between the page's markers of ``name``; True when the page already held it
    (times excepted: lines starting with "Measured" are not compared)."""
    source = page.read_text(encoding="utf-8")
    pattern = re.compile(rf"(<!-- measure:{name} -->\n)(.*?)(<!-- /measure:{name} -->)", re.S)
    found = pattern.search(source)
    if found is None:
        raise SystemExit(f"{page.relative_to(ROOT)}: no <!-- measure:{name} --> markers")

    def comparable(block: str) -> list[str]:
        return [line for line in block.strip().splitlines() if not line.startswith("Measured")]

    same = comparable(found.group(2)) == comparable(text)
    if write:
        # blank lines around: Markdown reads a table only as a block of its own, not glued to a comment
        page.write_text(
            source[: found.start(2)] + "\n" + text.strip() + "\n\n" + source[found.end(2) :], encoding="utf-8"
        )
    return same


# --- the defaults' before/after table (docs/how-to/defaults.md) -------------------------------

DEFAULTS = DOCS / "how-to" / "defaults"
REPLICATIONS = 20


def defaults_table() -> str:
    """Each scenario of docs/how-to/defaults/ with the papers' set-up (privacy.preset = "paper") and
    with the defaults: mean ψ (and its 25–75 % range) over 20 replications against ψ(θ = 0)."""
    rows = [
        "| scenario | loss | owners | records per owner | ε | ψ(θ = 0) | ψ, papers' set-up | "
        "ψ, defaults | defaults / ψ(θ = 0) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        for path in sorted(DEFAULTS.glob("*.toml")):
            before = _replicated(path, ["--set", "privacy.preset=paper"], Path(work) / f"{path.stem}-paper")
            after = _replicated(path, [], Path(work) / f"{path.stem}-defaults")
            scenario = _resolved(path)
            rows.append(
                f"| [`{path.stem}`](defaults/{path.name}) | {scenario['model']['loss']} | "
                f"{after['owners']} | {_sizes(scenario)} | {scenario['privacy']['epsilon']:g} | "
                f"{after['psi_zero']:.3g} | {_psi(before)} | {_psi(after)} | "
                f"{after['psi_mean'] / after['psi_zero']:.2g} |"
            )
    rows.append("")
    rows.append(
        f"Measured by `docs/scripts/measure.py write defaults` in {time.perf_counter() - start:.0f} s "
        f"({REPLICATIONS} replications per cell, 2 worker processes) on {machine()}."
    )
    return "\n".join(rows)


def _replicated(path: Path, extra: list[str], out: Path) -> dict:
    dpmarket(
        "run",
        str(path),
        "--replications",
        str(REPLICATIONS),
        "--workers",
        "2",
        "--quiet",
        "--out",
        str(out),
        *extra,
        cwd=ROOT,
    )
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def _resolved(path: Path) -> dict:
    from dpmarket.scenario import load

    return load(path).resolved_table()


def _sizes(scenario: dict) -> str:
    records = scenario["data"]["records"]
    if isinstance(records, int):
        return f"{records:,}"
    if isinstance(records, list):
        return ", ".join(f"{r:,}" for r in records)
    spec = dict(records)
    kind = spec.pop("distribution")
    return (
        f"{kind} ({', '.join(f'{k} {v:,}' if isinstance(v, int) else f'{k} {v:g}' for k, v in spec.items())})"
    )


def _psi(summary: dict) -> str:
    return f"{summary['psi_mean']:.3g} ({summary['psi_q25']:.2g}–{summary['psi_q75']:.2g})"


CLIP_QUANTILES = "0.999,0.99,0.95,0.9,0.8,0.5"
CAP_QUANTILES = "0.999,0.99,0.9,0.7,0.5"
ORDER = ("three_banks", "two_clinics", "card_issuers", "card_svm", "phones", "branches")


def quantile_table(key: str, values: str, fixed: list[str]) -> str:
    """Mean ψ of each scenario of docs/how-to/defaults/ over a sweep of one quantile (8 replications
    per cell, common random numbers), the default's row in bold."""
    import csv

    start = time.perf_counter()
    columns = {}
    with tempfile.TemporaryDirectory() as work:
        for name in ORDER:
            out = Path(work) / name
            dpmarket(
                "sweep",
                str(DEFAULTS / f"{name}.toml"),
                "--grid",
                f"{key}={values}",
                *fixed,
                "--replications",
                "8",
                "--workers",
                "2",
                "--quiet",
                "--out",
                str(out),
                cwd=ROOT,
            )
            with open(out / "sweep.csv", encoding="utf-8") as fh:
                columns[name] = {float(r[key]): float(r["psi_mean"]) for r in csv.DictReader(fh)}
    default = 0.9
    label = key.split(".")[-1].replace("_", " ")
    rows = [f"| {label} | {' | '.join(ORDER)} |", "|" + " --- |" * (len(ORDER) + 1)]
    for value in (float(v) for v in values.split(",")):
        cells = [f"{columns[name][value]:.2g}" for name in ORDER]
        first = f"{value:g}"
        if value == default:
            first, cells = f"**{first}** (default)", [f"**{c}**" for c in cells]
        rows.append(f"| {first} | {' | '.join(cells)} |")
    rows += [
        "",
        f"Measured by `docs/scripts/measure.py write quantiles` (`dpmarket sweep SCENARIO --grid "
        f"{key}={values} {' '.join(fixed)} --replications 8` for each) in "
        f"{time.perf_counter() - start:.0f} s on {machine()}.",
    ]
    return "\n".join(rows)


def quantiles(write: bool) -> bool:
    page = DOCS / "how-to" / "defaults.md"
    clip = quantile_table("privacy.clip_quantile", CLIP_QUANTILES, ["--set", "privacy.cap_quantile=0.999"])
    cap = quantile_table("privacy.cap_quantile", CAP_QUANTILES, [])
    return replace_marked(page, "clip-quantile", clip, write) & replace_marked(
        page, "cap-quantile", cap, write
    )


# --- the market in time study (docs/how-to/market-in-time.md) ---------------------------------

STUDY = [
    ("static", []),
    ("fixed, on_compute", ["market.mode=dynamic", "market.rule=fixed", "market.payment=on_compute"]),
    ("fixed, on_delivery", ["market.mode=dynamic", "market.rule=fixed", "market.payment=on_delivery"]),
    ("progress, on_compute", ["market.mode=dynamic", "market.rule=progress", "market.payment=on_compute"]),
    ("progress, on_delivery", ["market.mode=dynamic", "market.rule=progress", "market.payment=on_delivery"]),
]


def market_in_time_table() -> str:
    """Means over seeds 1, 2, 3 of each scenario × market: ψ, paid, gain per unit paid, the owners'
    utilities (their sum, and the smallest owner's), leaves (for a spent budget), the first leave's
    time and the end time."""
    import csv

    rows = [
        "| scenario | market | ψ final | paid | gain/paid | Σ utility | min utility | leaves (budget) | "
        "first leave | end time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        for name in ("ny_hospitals", "banks_market"):
            for label, sets in STUDY:
                figures = []
                for seed in (1, 2, 3):
                    out = Path(work) / f"{name}-{label}-{seed}".replace(" ", "").replace(",", "-")
                    args = [
                        "run",
                        f"scenarios/{name}.toml",
                        "--seed",
                        str(seed),
                        "--quiet",
                        "--out",
                        str(out),
                    ]
                    for s in sets:
                        args += ["--set", s]
                    dpmarket(*args, cwd=ROOT)
                    summary = json.loads((out / "summary.json").read_text())
                    with open(out / "owners.csv", encoding="utf-8") as fh:
                        utility = [float(r["utility"]) for r in csv.DictReader(fh)]
                    with open(out / "events.csv", encoding="utf-8") as fh:
                        leaves = [r for r in csv.DictReader(fh) if r["kind"] == "leave"]
                    paid = summary["total_payment"]
                    figures.append(
                        {
                            "psi": summary["psi_final"],
                            "paid": paid,
                            "gain": (summary["psi_zero"] - summary["psi_final"]) / paid,
                            "sum": sum(utility),
                            "min": min(utility),
                            "leaves": len(leaves),
                            "budget": sum(r["detail"] == "budget spent" for r in leaves),
                            "first": min((float(r["time"]) for r in leaves), default=None),
                            "end": summary["simulated_time"],
                        }
                    )
                rows.append(_study_row(name, label, figures))
    rows += [
        "",
        f"Measured by `docs/scripts/measure.py write market-in-time` in "
        f"{time.perf_counter() - start:.0f} s on {machine()}.",
    ]
    return "\n".join(rows)


def _study_row(name: str, label: str, figures: list[dict]) -> str:
    def mean(key: str) -> float:
        return sum(f[key] for f in figures) / len(figures)

    def number(value: float, spec: str) -> str:
        return f"{value:{spec}}".replace("-", "−")  # the page's minus sign

    firsts = [f["first"] for f in figures if f["first"] is not None]
    first = number(sum(firsts) / len(firsts), ".1f") if firsts else "–"
    return (
        f"| {name} | {label} | {number(mean('psi'), '.3g')} | {number(mean('paid'), '.4g')} | "
        f"{number(mean('gain'), '.2g')} | {number(mean('sum'), '.4g')} | {number(mean('min'), '.3g')} | "
        f"{number(mean('leaves'), '.3g')} ({number(mean('budget'), '.3g')}) | {first} | "
        f"{number(mean('end'), '.3g')} |"
    )


# --- figures ----------------------------------------------------------------------------------

FIGURES = [
    (
        [
            "sweep",
            "scenarios/lending_banks.toml",
            "--grid",
            "privacy.mechanism=laplace,gaussian",
            "--grid",
            "privacy.accountant=basic,rdp,pld",
            "--grid",
            "privacy.epsilon=1,3,10,30,100",
            "--set",
            "privacy.delta=1e-6",
            "--replications",
            "20",
            "--workers",
            "2",
            "--quiet",
        ],
        {"psi_epsilon.png": "accounting_lending.png"},
    ),
    (
        [
            "market",
            "scenarios/banks_market.toml",
            "--replications",
            "5",
            "--quiet",
            "--policies",
            "posted_price,record_price,take_it_or_leave_it,procurement,stackelberg,auction,marginal",
        ],
        {"psi_payment.png": "market_banks.png", "epsilons.png": "market_banks_epsilons.png"},
    ),
]


def figures(write: bool) -> bool:
    """Draw docs/*.png again by the pages' commands (and the tutorial's figures); True when every
    file was already the same bytes."""
    same = True
    with tempfile.TemporaryDirectory() as work:
        for args, copies in FIGURES:
            out = Path(work) / args[1].replace("/", "_")
            dpmarket(*args, "--out", str(out), cwd=ROOT)
            for drawn, name in copies.items():
                target = DOCS / name
                new = (out / drawn).read_bytes()
                if not target.exists() or target.read_bytes() != new:
                    same = False
                    print(f"docs/{name}: differs from what `dpmarket {' '.join(args[:2])} …` draws now")
                    if write:
                        target.write_bytes(new)
    if write:
        subprocess.run([sys.executable, str(DOCS / "scripts" / "tutorial_figures.py")], check=True, env=ENV)
    return same


# --- the paper reproductions (docs/paper/, scenarios/paper/README.md) ---------------------------

LENDING, MANY, HOSPITALS = (
    f"scenarios/paper/{n}.toml" for n in ("lending_banks", "many_banks", "ny_hospitals")
)
PAPER = {  # docs/paper/STUDY: the command that made it (scenarios/paper/README.md), long ones last
    **{
        f"lending_convergence_eps{e}": [
            "run",
            LENDING,
            "--replications",
            "100",
            "--set",
            f"privacy.epsilon={e}",
        ]
        for e in (10, 100, 1000)
    },
    **{
        f"hospitals_convergence_eps{e}": [
            "run",
            HOSPITALS,
            "--replications",
            "100",
            "--set",
            f"privacy.epsilon={e}",
        ]
        for e in (10, 100, 1000)
    },
    "hospitals_epsilon": [
        "sweep",
        HOSPITALS,
        "--replications",
        "100",
        "--grid",
        "privacy.epsilon=0.1,1,10,100,1000,10000",
    ],
    "lending_noise_free": [
        "sweep",
        LENDING,
        "--replications",
        "10",
        "--grid",
        "learner.rho=3,6",
        "--set",
        "privacy.epsilon=1e7",
    ],
    "lending_scaling": [
        "sweep",
        LENDING,
        "--replications",
        "100",
        "--grid",
        "privacy.epsilon=25,50,100,250,500",
        "--grid",
        "data.records=100000,200000,300000,500000,1000000",
    ],
    "many_banks_noise_free": [
        "sweep",
        MANY,
        "--replications",
        "10",
        "--grid",
        "data.owners=2,20,50,200",
        "--grid",
        "learner.iterations=1000,10000",
        "--grid",
        "learner.theta_l_step=printed,proof",
        "--set",
        "privacy.epsilon=1e7",
    ],
    "many_banks_capped": [
        "sweep",
        MANY,
        "--replications",
        "100",
        "--grid",
        "data.owners=2,5,10,20,50,100,200",
        "--grid",
        "privacy.epsilon=2.5,10,25,100,250,1000",
    ],
    "many_banks_horizon": [
        "sweep",
        MANY,
        "--replications",
        "100",
        "--grid",
        "data.owners=2,5,10,20,50,100,200",
        "--grid",
        "privacy.epsilon=2.5,10,25,100,250,1000",
        "--set",
        "privacy.split=horizon",
    ],
}
VOLATILE = ("wall_seconds", "executor", "workers", "scheduler", "reused_replications", "figures")


def paper(write: bool, only: list[str] | None = None) -> bool:
    """Run the paper reproductions again: every table (sweep.csv, sweep_owners.csv) must be the same
    bytes and every JSON the same values but for how the work was done (executor, workers, wall time,
    the figures' list); ``write`` copies the figures drawn now. About 25 minutes on two cores."""
    same = True
    with tempfile.TemporaryDirectory() as work:
        for study, args in PAPER.items():
            if only and study not in only:
                continue
            out = Path(work) / study
            dpmarket(*args, "--executor", "process", "--workers", "2", "--quiet", "--out", str(out), cwd=ROOT)
            target = DOCS / "paper" / study
            for kept in sorted(target.iterdir()):
                new = out / kept.name
                ok = _same_numbers(kept, new)
                if kept.suffix == ".png" and write:  # a figure: redrawn as the figures are drawn now
                    shutil.copyfile(new, kept)
                if not ok:
                    same = False
                    print(f"docs/paper/{study}/{kept.name}: the numbers differ from the committed ones")
            print(f"docs/paper/{study}: {'the same numbers' if same else 'DIFFERENT numbers'}")
    return same


def _same_numbers(kept: Path, new: Path) -> bool:
    """The committed file's values are the new file's: every key of the committed JSON (but how the work
    was done) and every column of the committed CSV, row by row as text. Keys and columns later releases
    added (the guarantee's, for one) are not in the committed files and are not compared; figures are."""
    import csv

    if kept.suffix == ".json":
        old, now = (json.loads(f.read_text()) for f in (kept, new))
        return all(now.get(k) == v for k, v in old.items() if k not in VOLATILE)
    if kept.suffix == ".csv":
        with open(kept, encoding="utf-8") as a, open(new, encoding="utf-8") as b:
            old, now = list(csv.DictReader(a)), list(csv.DictReader(b))
        return len(old) == len(now) and all(
            row == {k: r[k] for k in row} for row, r in zip(old, now, strict=True)
        )
    return True


# --- console blocks ---------------------------------------------------------------------------


def console(write: bool) -> bool:
    """Run every page's examples; rewrite the printed lines of console blocks that changed."""
    same = True
    for page in harness.pages():
        text = page.read_text(encoding="utf-8")
        if "```console" not in text and "```pycon" not in text:
            continue
        new = _console_page(page, text)
        if new != text:
            same = False
            print(f"{page.relative_to(ROOT)}: printed output changed")
            if write:
                page.write_text(new, encoding="utf-8")
    return same


def _console_page(page: Path, text: str) -> str:
    """The page with each console block's output replaced by what its commands print now."""
    out: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        cwd = Path(work)
        (cwd / "scenarios").symlink_to(ROOT / "scenarios")
        namespace: dict = {"__name__": "__docs__"}
        here = os.getcwd()
        os.chdir(cwd)  # the page's Python sessions write where its commands run, as the harness has it
        try:
            _page_blocks(page, text, cwd, namespace, out)
        finally:
            os.chdir(here)
    return "".join(out)


def _page_blocks(page: Path, text: str, cwd: Path, namespace: dict, out: list[str]) -> None:
    """Each block of the page in order; ``out`` gets the page's text with console blocks re-printed."""
    last = 0
    for m in harness.FENCE.finditer(text):
        info = m.group("info").strip()
        lang = info.split()[0] if info else ""
        title = harness.TITLE.search(info)
        indent = len(m.group("indent"))
        body = "\n".join(line[indent:] for line in m.group("body").splitlines())
        line = text[: m.start()].count("\n") + 1
        if title:
            target = cwd / title.group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body + "\n", encoding="utf-8")
        elif lang == "console":
            new = _run_console(body, cwd, page, line)
            prefix = " " * indent
            rendered = "\n".join(prefix + row if row else row for row in new.splitlines()) + "\n"
            out.append(text[last : m.start("body")] + rendered)
            last = m.end("body")
        elif lang == "pycon":
            try:
                harness.run_pycon(harness.Block(lang, None, body, line), namespace, page)
            except AssertionError as failure:
                print(
                    f"{page.relative_to(ROOT)}:{line}: a Python session prints otherwise (fix by hand):\n"
                    f"{failure}"
                )
    out.append(text[last:])


def _run_console(body: str, cwd: Path, page: Path, line: int) -> str:
    """A console block with every command's printed lines as they are now (commands kept as written)."""
    segments = _segments(body)
    rebuilt = []
    for command_lines, expected in segments:
        command = " ".join(
            part.rstrip("\\").strip() if i else part[2:].rstrip("\\").rstrip()
            for i, part in enumerate(command_lines)
        )
        shell = re.sub(r"(^|[;&|]\s*)python\b", lambda m: m.group(1) + sys.executable, command)
        done = subprocess.run(
            ["bash", "-c", shell], cwd=cwd, capture_output=True, text=True, env=ENV, timeout=900
        )
        printed = (done.stdout + done.stderr).rstrip("\n")
        want = harness.normalise("\n".join(expected)).splitlines()
        got = harness.normalise(printed).splitlines()
        keep = harness.matches(want, got, exact=True)  # a page shows what the command prints here, now
        if not keep and "..." in want:
            print(
                f"{page.relative_to(ROOT)}:{line}: $ {command}\n  prints otherwise, and its block elides "
                f"lines: fix by hand. It prints:\n{printed}"
            )
            keep = True
        rebuilt += command_lines + (expected if keep else printed.splitlines())
    return "\n".join(rebuilt)


def _segments(body: str) -> list[tuple[list[str], list[str]]]:
    """(the command's lines as written, its printed lines) for each ``$ `` command of a block."""
    segments: list[tuple[list[str], list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = [lines[i]]
            while command[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i])
            segments.append((command, []))
        elif segments:
            segments[-1][1].append(lines[i])
        i += 1
    return segments


# --- main -------------------------------------------------------------------------------------

TASKS = {
    "console": console,
    "defaults": lambda write: replace_marked(
        DOCS / "how-to" / "defaults.md", "defaults", defaults_table(), write
    ),
    "market-in-time": lambda write: replace_marked(
        DOCS / "how-to" / "market-in-time.md", "market-in-time", market_in_time_table(), write
    ),
    "quantiles": quantiles,
    "figures": figures,
    "paper": paper,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "write"))
    parser.add_argument("tasks", nargs="*", metavar="TASK", help=f"of {', '.join(TASKS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        parser.error(f"no task {unknown[0]!r}: the tasks are {', '.join(TASKS)}")
    failed = []
    for name in args.tasks or list(TASKS):
        started = time.perf_counter()
        same = TASKS[name](args.action == "write")
        print(f"{name}: {'as the docs say' if same else 'changed'} ({time.perf_counter() - started:.0f} s)")
        if not same:
            failed.append(name)
    if failed and args.action == "check":
        print(
            f"re-measured figures differ from the docs in: {', '.join(failed)}; "
            "`docs/scripts/measure.py write` rewrites them"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
