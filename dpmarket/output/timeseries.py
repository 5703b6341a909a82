"""A market in time's series from a run directory: price, participants, spend and quality against time.

What a picture of the market in time draws (``market.mode = "dynamic"``), read back from the files
every run writes: the ``price``, ``payment``, ``join`` and ``leave`` rows of ``events.csv`` and the
ψ of ``metrics.csv``. Each market series is a step function, one point per market event.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpmarket.errors import MissingRunError, RunDirectoryError

MARKET_KINDS = ("price", "payment", "join", "leave")


@dataclass(frozen=True)
class MarketSeries:
    """Step functions of simulated time: after the market event at ``time[j]`` the posted price
    was ``price[j]``, ``participants[j]`` owners took part and the learner had paid ``spend[j]``
    in all; ψ of the published model was ``psi`` at ``psi_time`` (metrics.csv: ψ on the whole
    consortium, an oracle measurement)."""

    time: np.ndarray
    price: np.ndarray
    participants: np.ndarray
    spend: np.ndarray
    psi_time: np.ndarray
    psi: np.ndarray


def market_series(run_dir: str | Path) -> MarketSeries:
    """The series of the run in ``run_dir``; a directory that is missing (a MissingRunError, also a
    FileNotFoundError) or not a run of a market in time is an error naming it."""
    path = Path(run_dir)
    if not path.is_dir():
        why = "no such directory" if not path.exists() else "not a directory"
        raise MissingRunError(f"{path}: {why}: expected a run directory written by `dpmarket run`")
    for name in ("events.csv", "metrics.csv"):
        if not (path / name).is_file():
            raise RunDirectoryError(f"{path}: not a run directory (no {name})")
    try:
        events = pd.read_csv(path / "events.csv")
        metrics = pd.read_csv(path / "metrics.csv")
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' parser errors are ValueErrors
        raise RunDirectoryError(f"{path}: events.csv or metrics.csv is damaged "
                                f"({type(exc).__name__})") from None
    if "amount" not in events.columns:
        raise RunDirectoryError(f"{path}: not a run of a market in time (market.mode = 'dynamic')")
    rows = events[events["kind"].isin(MARKET_KINDS)]
    kind, amount = rows["kind"].to_numpy(), rows["amount"].to_numpy(dtype=float)
    is_price = kind == "price"
    price = pd.Series(np.where(is_price, amount, np.nan)).ffill().to_numpy()
    participants = np.cumsum((kind == "join").astype(int) - (kind == "leave").astype(int))
    spend = np.cumsum(np.where(kind == "payment", amount, 0.0))
    return MarketSeries(rows["time"].to_numpy(dtype=float), price, participants, spend,
                        metrics["time"].to_numpy(dtype=float), metrics["psi"].to_numpy(dtype=float))
