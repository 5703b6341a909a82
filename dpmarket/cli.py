"""The command line: parse, call, print. Nothing else lives here."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import IO, NoReturn

from dpmarket._version import __version__
from dpmarket.errors import DPMarketError, UsageError, one_line, warn
from dpmarket.replay import compiled
from dpmarket.system import environment, streams
from dpmarket.system.processes import exit_status, sigterm_as_interrupt

STRICT_STATUS = 3  # --strict: a diagnostic warned (the command's results are written all the same)
SCENARIO_HELP = ("a scenario file (TOML), or the name of a bundled example such as ny_hospitals "
                 "(`dpmarket scenarios` lists them)")
EXAMPLES = {
    "": """examples:
  dpmarket scenarios                         the bundled examples, with what each shows
  dpmarket run ny_hospitals                  run one (writes outputs/ny_hospitals-seed2015/)
  dpmarket run my.toml --set privacy.epsilon=100
  dpmarket COMMAND --help                    a command's options and examples""",
    "run": """examples:
  dpmarket run ny_hospitals
  dpmarket run scenarios/ny_hospitals.toml --seed 3 --out outputs/ny-3
  dpmarket run many_banks --set data.owners=50 --set privacy.epsilon=2.5
  dpmarket run lending_banks --replications 20 --workers 2""",
    "sweep": """examples:
  dpmarket sweep lending_banks --grid privacy.epsilon=1,10,100 --replications 10
  dpmarket sweep many_banks --grid data.owners=2,10,50 --grid privacy.epsilon=10,100 --workers 2""",
    "validate": """examples:
  dpmarket validate ny_hospitals                       every key, defaults filled in, explained
  dpmarket validate ny_hospitals > my.toml             a copy to edit that runs the same scenario
  dpmarket validate my.toml --set learner.iterations=5000 --quiet && echo valid
  dpmarket validate my.toml --strict --quiet && echo valid, no warning   (3: a warning, 2: invalid)""",
    "explain": """examples:
  dpmarket explain                                     every section and key, one line each
  dpmarket explain privacy.split                       one key: meaning, default, allowed values, unit
  dpmarket explain market                              a section and its keys""",
    "timeline": """examples:
  dpmarket timeline outputs/ny_hospitals-seed2015
  dpmarket timeline outputs/ny_hospitals-seed2015 --owners 0-9,crouse --from 0 --to 5
  dpmarket timeline outputs/ny_hospitals-seed2015 --format markdown --from 2 --to 3
  dpmarket timeline outputs/ny_hospitals-seed2015 --format csv --table waits > waits.csv
  dpmarket timeline outputs/ny_hospitals-seed2015 --trace ny.json   then open ny.json in ui.perfetto.dev""",
    "forecast": """examples:
  dpmarket forecast banks_market
  dpmarket forecast ny_hospitals --set market.price=10""",
    "market": """examples:
  dpmarket market banks_market --policies posted_price,auction,procurement --replications 5
  dpmarket market ny_hospitals --policies posted_price,auction --set market.offer_epsilon=10 --workers 2
  dpmarket market banks_market --policies posted_price,auction,marginal --replications 10 --properties""",
    "audit": """examples:
  dpmarket audit lending_banks --runs 2000                 owner 0, its answers and the published model
  dpmarket audit ny_hospitals --owner 5 --view answers --set learner.iterations=200
  dpmarket audit many_banks --method one-run --runs 20    one canary per feature in each of 20 runs""",
    "scenarios": """examples:
  dpmarket scenarios
  dpmarket validate ny_hospitals > my.toml      a resolved copy to edit, then: dpmarket run my.toml""",
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with the project's error line — one line naming the command, what was wrong
    and where the usage is, exit 2 (argparse printed a usage block first) — and whose ``--help`` and
    ``--version`` text goes out as every command's output (:func:`streams.say`)."""

    commands: dict[str, argparse.ArgumentParser] = {}  # the top level's subcommands, by name

    def parse_args(self, args: list[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's, but arguments it does not know are named with the command given them (argparse
        reports them from the top level: ``dpmarket run x --bogus`` would point to ``dpmarket --help``)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            owner = self.commands.get(getattr(parsed, "command", None) or "", self)
            owner.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        """``dpmarket: error: COMMAND: MESSAGE (see `dpmarket COMMAND --help`)``, then exit 2."""
        command = self.prog.removeprefix("dpmarket").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"dpmarket: error: {where}{one_line(message)} (see `{self.prog} --help`)\n")

    def _print_message(self, message: str, file: IO[str] | None = None) -> None:
        # argparse's one writer (help, usage, version); its own swallows an OSError of the stream
        if message and (file is None or file is sys.stdout):
            streams.say(message, end="")
        elif message:
            super()._print_message(message, file)


def _formatter(prog: str) -> argparse.HelpFormatter:
    """Examples keep their lines (descriptions are wrapped by :func:`_command`)."""
    return argparse.RawDescriptionHelpFormatter(prog)


def _command(sub, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand with its one-line summary (in ``dpmarket --help``), description and examples."""
    return sub.add_parser(name, help=summary, description=textwrap.fill(description, 78),
                          epilog=EXAMPLES[name], formatter_class=_formatter)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpmarket", description=(
        "Simulate private, asynchronous data collaborations (DP gradient queries)."),
        epilog=EXAMPLES[""], formatter_class=_formatter)
    parser.add_argument("--version", action="version", version=f"dpmarket {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices
    run = _command(sub, "run", "run a scenario and write a run directory", (
        "Run a scenario: data, market (if any), training; write a run directory (tables, "
        "figures, report.html). With --replications, R runs on derived seeds, resumable."))
    run.add_argument("scenario", metavar="SCENARIO", help=SCENARIO_HELP)
    run.add_argument("--out", type=Path, help="run directory (default outputs/NAME-seedSEED)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    run.add_argument("--no-oracle", dest="oracle", action="store_false",
                     help="write no oracle measurement (ψ, own-data ψ, who benefits, θ*: figures computed "
                          "from the private records without noise; summary.json's 'oracle' lists them)")
    _add_strict(run)
    _add_set(run)
    run.add_argument("--replications", type=int, metavar="R",
                     help="run R independent replications (seeds derived from the run seed)")
    _add_executor(run)
    sweep = _command(sub, "sweep", "run a grid of scenarios, each replicated, into sweep.csv", (
        "Run every combination of the --grid values, each cell replicated on the same seeds "
        "(common random numbers); resumable: the same command continues where it stopped."))
    sweep.add_argument("scenario", metavar="SCENARIO", help=SCENARIO_HELP)
    sweep.add_argument("--grid", action="append", required=True, metavar="KEY=V1,V2,...",
                       help="a swept scenario key and its values (repeatable: the grid is the product)")
    sweep.add_argument("--replications", type=int, default=1, metavar="R",
                       help="replications per cell (default 1)")
    sweep.add_argument("--out", type=Path, help="directory (default outputs/NAME-sweep-KEYS-seedSEED)")
    sweep.add_argument("--seed", type=int, help="override the scenario's seed")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    _add_set(sweep)
    _add_executor(sweep)
    check = _command(sub, "validate", "check a scenario file and print it resolved and explained", (
        "Check a scenario (with its --set overrides) and print it fully resolved: every default "
        "filled in, each key explained in a comment above it (the printed file runs the same "
        "scenario). A problem is one line naming the file, the key and the value (exit status 2). "
        "Then the checks that need no training (the schedule's expected budgets and owners never "
        "asked, the network's collisions, the step's stability, the forecast against the untrained "
        "model) print one warning line each on stderr."))
    check.add_argument("scenario", metavar="SCENARIO", help=SCENARIO_HELP)
    check.add_argument("--quiet", action="store_true", help="print nothing when valid (warnings neither)")
    _add_strict(check)
    _add_set(check)
    explain = _command(sub, "explain", "explain a scenario key, a section, or list them all", (
        "Say what a scenario key means, its default, the values it allows and its unit (KEY is a "
        "dotted path, as --set takes it: privacy.split, data.records, owners.0.epsilon); a section "
        "lists its keys; no KEY lists every section and key."))
    explain.add_argument("key", metavar="KEY", nargs="?", default="", help="a dotted key path or section")
    line = _command(sub, "timeline", "summarise and draw a run's communication timeline", (
        "Print a run's per-owner communication summary, channel load and answers (shares of time "
        "online, in exchange and colliding; gaps between updates; who waited longest; what happened "
        "in the window) for the owners and time window chosen, and write them into the run directory "
        "as timeline-TAG.csv and timeline-TAG.png, TAG naming the selection (the run's own "
        "timeline.png is left as it is); or write the run as a Chrome trace for Perfetto."))
    line.add_argument("run_dir", type=Path, help="a run directory written by `dpmarket run`")
    line.add_argument("--owners", help="owners to show: indices, names, ranges A-B with A <= B (0-9,crouse), "
                                       "within the run's owners")
    line.add_argument("--from", dest="t0", type=float, help="start of the time window (a finite time)")
    line.add_argument("--to", dest="t1", type=float, help="end of the time window (after --from)")
    line.add_argument("--format", dest="form", choices=("text", "csv", "markdown"), default="text",
                      help="print the answers as tables: shares online, in exchange and colliding, gaps "
                           "between updates, who waited longest, what happened in the window (default text)")
    line.add_argument("--table", choices=("shares", "channels", "gaps", "waits", "happened", "spans"),
                      help="with --format csv or markdown: print this table only")
    line.add_argument("--trace", type=Path, metavar="FILE.json",
                      help="write the run as a Chrome trace (Perfetto, chrome://tracing) instead")
    fc = _command(sub, "forecast", "forecast psi and each owner's benefit, without training", (
        "Print the forecast psi of the owners that would take part (under the scenario's market, "
        "or at their budgets) and whether each owner is forecast to benefit; no training run."))
    fc.add_argument("scenario", metavar="SCENARIO", help=SCENARIO_HELP)
    fc.add_argument("--seed", type=int, help="override the scenario's seed")
    fc.add_argument("--recalibrate", action="store_true", help="rerun the pilots, ignore the cache")
    fc.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_set(fc)
    mk = _command(sub, "market", "compare compensation policies on common random numbers", (
        "Settle each policy on the scenario's [market] (same owners, costs and forecast) and train "
        "each outcome on the same seeds; write policies.csv, market.csv, figures and report.html."))
    mk.add_argument("scenario", metavar="SCENARIO", help=SCENARIO_HELP + "; it needs a [market] section")
    mk.add_argument("--policies", required=True, help="comma-separated policies, e.g. posted_price,auction")
    mk.add_argument("--replications", type=_positive, default=1, metavar="R",
                    help="training runs per policy (default 1)")
    mk.add_argument("--out", type=Path, help="output directory (default outputs/NAME-market)")
    mk.add_argument("--seed", type=int, help="override the scenario's seed")
    mk.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    mk.add_argument("--workers", type=_positive, default=1, metavar="N",
                    help="worker processes for the training runs (default 1; results do not depend on it)")
    mk.add_argument("--properties", action="store_true",
                    help="also judge each policy: individual rationality, truthfulness, budget, welfare "
                         "and efficiency, Shapley fairness, replication (Sybil) robustness; writes "
                         "properties.csv, owner_properties.csv and a report section")
    _add_set(mk)
    au = _command(sub, "audit", "audit a scenario's privacy: an empirical lower bound on epsilon", (
        "Run the scenario's protocol many times on two neighbouring datasets (one record of one owner "
        "replaced by a worst-case canary) and let an adversary that sees what the learner sees tell them "
        "apart: its error rates prove a lower bound on the owner's epsilon, with exact (Clopper-Pearson) "
        "confidence, printed against the epsilon it claims, with the smallest violation the runs could "
        "detect; writes a table, every run's score, a ROC figure and summary.json. Exit status 0 for a "
        "pass (no violation, and the runs detect one within twice the claim), 3 for a fail (the bound "
        "exceeds the claim), 4 when inconclusive (no violation, but the runs could not have shown one "
        "near the claim), 2 on bad input."))
    au.add_argument("scenario", metavar="SCENARIO", help=SCENARIO_HELP)
    au.add_argument("--owner", type=int, help="the owner audited (default: the first that takes part)")
    au.add_argument("--runs", type=_positive, metavar="R",
                    help="runs of each world (default 2000); with --method one-run, runs in all (default 1)")
    au.add_argument("--view", choices=("answers", "model", "both"), default="both",
                    help="what the adversary sees: the owner's answers, the published model, or both")
    au.add_argument("--method", choices=("worlds", "one-run"), default="worlds",
                    help="two neighbouring worlds (default), or the audit by one run (Steinke et al. 2023)")
    au.add_argument("--confidence", type=_fraction, default=0.95, help="of the lower bound (default 0.95)")
    au.add_argument("--out", type=Path, help="directory (default outputs/NAME-audit-seedSEED)")
    au.add_argument("--seed", type=int, help="override the scenario's seed")
    au.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_set(au)
    _command(sub, "scenarios", "list the bundled example scenarios", (
        "List the example scenarios that come with dpmarket, with their descriptions. Any command "
        "taking a scenario accepts one of these names in place of a file, from any directory."))
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def _add_strict(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 3 when a diagnostic warns (for pipelines; the results are "
                             "written all the same)")


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a scenario key (repeatable)")


def _add_executor(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", choices=("serial", "process", "dask"),
                        help="where replications run (default process; dask when --scheduler is given)")
    parser.add_argument("--workers", type=int, metavar="N", help="worker processes (default: the cores)")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler to use")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m dpmarket`` and the ``dpmarket`` script."""
    streams.prepare()  # ε, θ, ψ and × readable on an ASCII terminal, for every command
    with sigterm_as_interrupt():  # SIGTERM ends a command as Ctrl-C does (exit 143, not 130)
        return _statused(lambda: _call(_parser().parse_args(argv)))


def _statused(call: Callable[[], int]) -> int:
    """Run ``call`` (parse and run a command) and end it as the project says: its status with all it
    printed flushed out; a user's error as one line and 2; Ctrl-C as one line and 130 (SIGTERM 143);
    a reader leaving early (``| head``) quietly, 1. ``--help`` and ``--version`` exit as argparse
    makes them, after their text is out."""
    try:
        try:
            status = call()
        except SystemExit:
            streams.flush()  # a failing output is one line and 2, not exit 0 with the text lost
            raise
        streams.flush()  # a failing output is one line and 2, not a traceback at the interpreter's exit
        return status
    except DPMarketError as exc:
        print(f"dpmarket: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print("dpmarket: interrupted; nothing was written", file=sys.stderr)
        return exit_status(stop)
    except BrokenPipeError:
        streams.abandon()  # what is still buffered goes nowhere: the exit's own flush does not raise
        return 1


def _call(args: argparse.Namespace) -> int:
    """Call the command ``args`` name."""
    environment.check()  # a DPMARKET_* variable it cannot read ends the command before any work
    compiled.choice()  # so does DPMARKET_KERNEL=numba where numba cannot be used
    if args.command == "validate":
        return _validate(args)
    if args.command == "explain":
        return _explain(args)
    if args.command == "timeline":
        return _timeline(args)
    if args.command == "forecast":
        return _forecast(args)
    if args.command == "market":
        return _market(args)
    if args.command == "scenarios":
        return _scenarios()
    if args.command == "audit":
        return _audit(args)
    if args.command == "sweep" or args.replications is not None:
        if not getattr(args, "oracle", True):
            raise UsageError("--no-oracle writes a single run: not with --replications")
        return _experiment(args)
    return _run(args)


def _load(args: argparse.Namespace, swept: bool = False):
    from dpmarket.scenario.bundled import find
    from dpmarket.scenario.loading import load

    overrides = list(args.overrides)
    if getattr(args, "seed", None) is not None:
        overrides.append(f"seed={args.seed}")
    return load(find(args.scenario), overrides, swept=swept)  # a file, else a bundled example's name


def _validate(args: argparse.Namespace) -> int:
    from dpmarket.runs.diagnostics import before_run, warnings_in
    from dpmarket.scenario.keys import commented_toml

    scenario = _load(args)
    if not args.quiet:
        streams.say(commented_toml(scenario), end="")
    if not (args.strict or not args.quiet):
        return 0
    diagnostics = before_run(scenario)
    if not args.quiet:
        streams.flush()  # the file first, then its warnings
        for d in diagnostics:
            warn(d.line())
    return STRICT_STATUS if args.strict and warnings_in(diagnostics) else 0


def _explain(args: argparse.Namespace) -> int:
    from dpmarket.scenario.keys import explain

    streams.say(explain(args.key))
    return 0


def _run(args: argparse.Namespace) -> int:
    from dpmarket.output.figures.painter import Painter

    scenario = _load(args)
    # Started before the heavy imports: it loads matplotlib while the rest loads and runs.
    painter = Painter(enabled=scenario.output.plots)
    try:
        from dpmarket.output import console, results

        out = args.out or results.default_run_dir(scenario, args.oracle)
        result = results.run_and_write(scenario, out, progress=not args.quiet, painter=painter,
                                       oracle=args.oracle)
    finally:
        painter.close()
    streams.say(console.summary_table(result, out, args.oracle))
    return STRICT_STATUS if args.strict and console.warned(result) else 0


def _timeline(args: argparse.Namespace) -> int:
    if args.trace is not None:
        from dpmarket.output.timeline import write_trace

        streams.say(write_trace(args.run_dir, args.trace, args.owners, args.t0, args.t1))
        return 0
    from dpmarket.output.figures import timeline as timeline_plot

    streams.say(timeline_plot.write(args.run_dir, args.owners, args.t0, args.t1, args.form, table=args.table))
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from dpmarket.runs import preview

    streams.say(preview.report(_load(args), args.recalibrate, progress=not args.quiet))
    return 0


def _market(args: argparse.Namespace) -> int:
    from dpmarket.experiment import compare
    from dpmarket.output import directories

    scenario = _load(args)
    policies = compare.parse_policies(args.policies, scenario, str(args.scenario))
    seeds = compare.replication_seeds(scenario, args.replications, len(policies))
    what = compare.identity(scenario, policies, seeds, args.properties)
    out = args.out or directories.default_directory(Path("outputs") / f"{scenario.name}-market", what)
    directories.check(out, what)  # before the work: another comparison's results are never replaced
    comparison = compare.compare(scenario, policies, args.replications, workers=args.workers,
                                 progress=not args.quiet, properties=args.properties)
    rows = compare.write(comparison, out)
    streams.say(compare.table(rows, out, comparison.forecast_source, comparison.scenario))
    if args.properties:
        streams.say(compare.property_table(compare.property_rows(comparison)))
    return 0


def _audit(args: argparse.Namespace) -> int:
    from dpmarket.output import console, directories, results
    from dpmarket.runs.audit import audit
    from dpmarket.system.progress import of as progress_of

    scenario = _load(args)
    runs = args.runs or (1 if args.method == "one-run" else 2000)
    facts = results.audit_settings(args.owner, runs, args.view, args.method, args.confidence)
    out = args.out or results.default_audit_dir(scenario, facts)
    directories.check(out, results.audit_identity(scenario, facts))  # before the work: other results stay
    result = audit(scenario, args.owner, runs, args.view, args.method, confidence=args.confidence,
                   progress=progress_of(not args.quiet))
    results.write_audit(result, out, facts, scenario.output.plots)
    streams.say(console.audit_table(result, out))
    return console.audit_exit_status(result)


def _scenarios() -> int:
    from dpmarket.scenario.bundled import listing

    streams.say(listing())
    return 0


def _experiment(args: argparse.Namespace) -> int:
    """``run --replications R`` and ``sweep``: resumable, saved replication by replication."""
    from dpmarket.experiment import command

    sweep = args.command == "sweep"
    base = _load(args, swept=sweep)  # a sweep's cells are checked each with its own grid values
    job = command.Job(Path(args.scenario), base, args.grid if sweep else [], args.replications,
                      args.out, args.executor, args.workers, args.scheduler, not args.quiet)
    plan, out, how = command.plan(job)
    try:
        streams.say(command.run(plan, out, how))
    except KeyboardInterrupt as stop:
        if not out.exists():  # stopped before any replication was saved: the directory was removed
            raise
        print(f"dpmarket: interrupted; finished replications are saved in {out}: "
              f"re-run the same command to resume", file=sys.stderr)
        return exit_status(stop)
    return 0
