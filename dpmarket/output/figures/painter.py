"""Drawing figures in helper processes that start before the run does.

Importing matplotlib and drawing the first figure take about a second. A forked helper does
both on the second core while the main process generates data and simulates; only plain,
picklable data cross to it. Where fork is unavailable (or the helper is disabled) figures are
drawn in the calling process, with the same bytes. This module imports only the standard
library (and :mod:`dpmarket.system.processes`, which does too), so a caller can start the helper before
anything heavy is loaded.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from dpmarket.system import processes


def _paint(kind: str, data, path: str) -> None:
    """Draw one figure (or the topology files); runs in the painter process when there is one."""
    if kind == "topology":
        from dpmarket.output.figures import topology

        graphml, draw, load = data.pop("graphml"), data.pop("draw"), data.pop("load")
        graph = topology.build(**data)
        if graphml:
            topology.save(graph, Path(path) / "topology.graphml")
        if draw:
            topology.draw(graph, Path(path) / "topology.png", load)
    elif kind == "audit_roc":
        from dpmarket.output.figures import sweep

        sweep.draw_roc(data, Path(path) / sweep.ROC_NAME)
    elif kind == "timeline":
        from dpmarket.output.figures import lanes

        lanes.draw_lanes(data, Path(path) / "timeline.png")
    elif kind == "market_timeline":
        from dpmarket.output.figures import market_timeline

        market_timeline.draw(data, Path(path) / market_timeline.NAME)
    else:
        from dpmarket.output.figures import run as figures

        figures.draw_run(figures.RunFigures(**data), path)


def _warm() -> None:
    """Import matplotlib and render a throw-away figure (fonts and renderer load once)."""
    import io

    from dpmarket.output.figures import run as figures

    figures.psi_against_k(figures.RunFigures("warm-up", [0, 1], [1.0, 0.5], 0.5, 0.8, [0], 1),
                          io.BytesIO())


HELPERS = 2  # a run's figures are drawn two at a time: timeline.png beside psi.png and topology.png


class Painter:
    """Figure helper processes (or, disabled, drawing in this process).

    Two helpers by default: once the simulation is over the main process only waits for its
    figures, so on two cores the run's longest figure (timeline.png, about half a second for 86
    owners) is drawn beside the others instead of after them. Each helper warms up (matplotlib
    imported, a figure drawn) while the simulation runs."""

    def __init__(self, enabled: bool = True, helpers: int = HELPERS) -> None:
        self._pool, self._jobs = None, []
        if enabled and "fork" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("fork")
            # The helpers ignore Ctrl-C (no traceback of their own: this process reports the
            # interrupt) and die with this process, even a killed one.
            self._pool = ProcessPoolExecutor(max_workers=helpers, mp_context=context,
                                             initializer=processes.init_helper, initargs=(os.getpid(),))
            self._jobs += [self._pool.submit(_warm) for _ in range(helpers)]

    def paint(self, kind: str, data, path: str) -> None:
        """Queue one figure (or draw it now, without a helper)."""
        if self._pool is None:
            _paint(kind, data, path)
        else:
            self._jobs.append(self._pool.submit(_paint, kind, data, path))

    def wait(self) -> None:
        """Block until every queued figure is written; re-raise the first failure."""
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.result()

    def close(self) -> None:
        """Stop the helper process."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
