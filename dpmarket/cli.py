"""The command line: parse, call, print. Nothing else lives here."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dpmarket import __version__
from dpmarket.errors import DPMarketError, one_line
from dpmarket.processes import exit_status, sigterm_as_interrupt


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpmarket", description=(
        "Simulate private, asynchronous data collaborations (DP gradient queries)."))
    parser.add_argument("--version", action="version", version=f"dpmarket {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario and write a run directory")
    run.add_argument("scenario", type=Path)
    run.add_argument("--out", type=Path, help="run directory (default outputs/NAME-seedSEED)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    _add_set(run)
    run.add_argument("--replications", type=int, metavar="R",
                     help="run R independent replications (seeds derived from the run seed)")
    _add_executor(run)
    sweep = sub.add_parser("sweep", help="run a grid of scenarios, each replicated, into sweep.csv")
    sweep.add_argument("scenario", type=Path)
    sweep.add_argument("--grid", action="append", required=True, metavar="KEY=V1,V2,...",
                       help="a swept scenario key and its values (repeatable: the grid is the product)")
    sweep.add_argument("--replications", type=int, default=1, metavar="R",
                       help="replications per cell (default 1)")
    sweep.add_argument("--out", type=Path, help="directory (default outputs/NAME-sweep-KEYS-seedSEED)")
    sweep.add_argument("--seed", type=int, help="override the scenario's seed")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    _add_set(sweep)
    _add_executor(sweep)
    check = sub.add_parser("validate", help="check a scenario file and print it resolved")
    check.add_argument("scenario", type=Path)
    check.add_argument("--quiet", action="store_true", help="print nothing when valid")
    _add_set(check)
    line = sub.add_parser("timeline", help="summarise and draw a run's communication timeline")
    line.add_argument("run_dir", type=Path)
    line.add_argument("--owners", help="owners to show: indices, names, ranges (0-9,crouse)")
    line.add_argument("--from", dest="t0", type=float, help="start of the time window")
    line.add_argument("--to", dest="t1", type=float, help="end of the time window")
    fc = sub.add_parser("forecast", help="forecast psi and each owner's benefit, without training")
    fc.add_argument("scenario", type=Path)
    fc.add_argument("--seed", type=int, help="override the scenario's seed")
    fc.add_argument("--recalibrate", action="store_true", help="rerun the pilots, ignore the cache")
    _add_set(fc)
    mk = sub.add_parser("market", help="compare compensation policies on common random numbers")
    mk.add_argument("scenario", type=Path)
    mk.add_argument("--policies", required=True, help="comma-separated policies, e.g. posted_price,auction")
    mk.add_argument("--replications", type=_positive, default=1, help="training runs per policy")
    mk.add_argument("--out", type=Path, help="output directory (default outputs/NAME-market)")
    mk.add_argument("--seed", type=int, help="override the scenario's seed")
    _add_set(mk)
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


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
    args = _parser().parse_args(argv)
    with sigterm_as_interrupt():  # SIGTERM ends a command as Ctrl-C does (exit 143, not 130)
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "timeline":
            return _timeline(args)
        if args.command == "forecast":
            return _forecast(args)
        if args.command == "market":
            return _market(args)
        if args.command == "sweep" or args.replications is not None:
            return _experiment(args)
        return _run(args)
    except DPMarketError as exc:
        print(f"dpmarket: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print("dpmarket: interrupted; nothing was written", file=sys.stderr)
        return exit_status(stop)
    except BrokenPipeError:
        # The reader (``| head``) left early: everything was written already, so no traceback;
        # stdout goes to devnull so that the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _load(args: argparse.Namespace):
    from dpmarket.scenario import load

    overrides = list(args.overrides)
    if getattr(args, "seed", None) is not None:
        overrides.append(f"seed={args.seed}")
    return load(args.scenario, overrides)


def _validate(args: argparse.Namespace) -> int:
    scenario = _load(args)
    if not args.quiet:
        print(scenario.to_toml(), end="")
    return 0


def _run(args: argparse.Namespace) -> int:
    from dpmarket.painter import Painter

    scenario = _load(args)
    # Started before the heavy imports: it loads matplotlib while the rest loads and runs.
    painter = Painter(enabled=scenario.output.plots)
    try:
        from dpmarket import results

        out = args.out or results.default_run_dir(scenario)
        result = results.run_and_write(scenario, out, progress=not args.quiet, painter=painter)
    finally:
        painter.close()
    print(results.summary_table(result, out))
    return 0


def _timeline(args: argparse.Namespace) -> int:
    from dpmarket import timeline

    print(timeline.report(args.run_dir, args.owners, args.t0, args.t1))
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from dpmarket.market import preview

    print(preview.report(_load(args), args.recalibrate))
    return 0


def _market(args: argparse.Namespace) -> int:
    from dpmarket import directories
    from dpmarket.market import compare

    scenario = _load(args)
    policies = compare.parse_policies(args.policies, scenario, str(args.scenario))
    what = compare.identity(scenario, policies, compare.replication_seeds(scenario, args.replications))
    out = args.out or directories.default_directory(Path("outputs") / f"{scenario.name}-market", what)
    directories.check(out, what)  # before the work: another comparison's results are never replaced
    comparison = compare.compare(scenario, policies, args.replications)
    rows = compare.write(comparison, out)
    print(compare.table(rows, out, comparison.forecast_source))
    return 0


def _experiment(args: argparse.Namespace) -> int:
    """``run --replications R`` and ``sweep``: resumable, saved replication by replication."""
    from dpmarket.experiment import command

    sweep = args.command == "sweep"
    job = command.Job(args.scenario, _load(args), args.grid if sweep else [], args.replications,
                      args.out, args.executor, args.workers, args.scheduler, not args.quiet)
    plan, out, how = command.plan(job)
    try:
        print(command.run(plan, out, how))
    except KeyboardInterrupt as stop:
        print(f"dpmarket: interrupted; finished replications are saved in {out}: "
              f"re-run the same command to resume", file=sys.stderr)
        return exit_status(stop)
    return 0
