"""The ``run --replications`` and ``sweep`` commands: options → a plan, an output directory, a run.

The CLI parses; this module decides what the options mean (default directory, default
executor) and chains the experiment, so the same thing can be done from Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpmarket.errors import DPMarketError
from dpmarket.experiment import store
from dpmarket.experiment.executors import check_scheduler
from dpmarket.experiment.study import Execution, Plan, make_plan, run_replications, run_sweep
from dpmarket.output import console
from dpmarket.scenario.schema import Scenario
from dpmarket.system import files


@dataclass(frozen=True)
class Job:
    """A command as given: scenario (loaded), grid, R, output, executor options, progress."""

    source: Path
    base: Scenario
    grid: list[str]
    replications: int
    out: Path | None = None
    executor: str | None = None
    workers: int | None = None
    scheduler: str | None = None
    progress: bool = False


def default_out(plan: Plan) -> Path:
    """``outputs/NAME-seedSEED-replications`` or ``outputs/NAME-sweep-KEY-KEY-seedSEED``, or the
    first ``…-2``, ``…-3`` holding this experiment or free (:func:`dpmarket.system.files.default_directory`):
    the same command lands in the same directory, so running it again resumes, and another
    experiment of the same name never lands on this one's results."""
    b = plan.base
    if plan.kind == "replications":
        base = Path("outputs") / f"{b.name}-seed{b.seed}-replications"
    else:
        base = Path("outputs") / f"{b.name}-sweep-{'-'.join(a.key for a in plan.axes)}-seed{b.seed}"
    identity = plan.identity()
    return files.default_directory(base, lambda path: store.holds(path, identity))


def execution(job: Job) -> Execution:
    """The executor: as given; Dask when a scheduler is given; else a process pool."""
    if job.scheduler is not None and job.executor not in (None, "dask"):
        raise DPMarketError(f"--scheduler {job.scheduler}: only with --executor dask, "
                            f"not {job.executor}")
    if job.workers is not None and job.workers < 1:
        raise DPMarketError(f"--workers {job.workers}: must be at least 1")
    scheduler = None if job.scheduler is None else check_scheduler(job.scheduler)
    executor = job.executor or ("dask" if scheduler is not None else "process")
    return Execution(executor, job.workers, scheduler, job.progress)


def plan(job: Job) -> tuple[Plan, Path, Execution]:
    """Everything checked before any work: grid cells, R, executor options, output directory."""
    how = execution(job)
    kind = "sweep" if job.grid else "replications"
    the_plan = make_plan(kind, job.base, job.grid, job.replications, str(job.source))
    return the_plan, job.out or default_out(the_plan), how


def run(the_plan: Plan, out: Path, how: Execution) -> str:
    """Run the experiment into ``out`` (tables, figures, report.html); return the summary text."""
    if the_plan.kind == "sweep":
        meta = run_sweep(the_plan, out, how)
        return console.sweep_text(out, meta, [out / name for name in meta["figures"]])
    summary = run_replications(the_plan, out, how)
    return console.replications_text(out, summary, [out / name for name in summary["figures"]])
