"""Small runs that between them write every output file and every column and key dpmarket writes.

Used by ``test_docs_outputs.py`` (each written column or key must be documented in
``docs/reference/outputs.md``, and each documented one must be written by one of these runs) and
usable alone to list what a release writes::

    .venv/bin/python tests/docs/outputs_catalogue.py
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[2]

BASE = {"data": {"owners": 4, "records": 2000, "features": 3}, "learner": {"iterations": 200},
        "privacy": {"epsilon": 50.0, "split": "capped"}}
NETWORK = {"mode": "request", "transmission_time": 0.05, "latency": 0.01, "loss_probability": 0.05,
           "channels": 2, "carrier_sense": True, "backoff": 0.05, "max_attempts": 2,
           "dropout": {"mean_online": 10.0, "mean_offline": 2.0}}
MARKET = {"policy": "posted_price", "price": 2.0, "value": 100.0, "budget": 500.0,
          "epsilon_min": 0.5, "epsilon_max": 200.0,
          "costs": {"kind": "quadratic", "coef": 0.05, "distribution": "lognormal", "sigma": 0.5},
          "pilots": {"levels": 2, "subsets": 2, "replications": 1}}


def scenario(name: str, **sections) -> dict:
    table = {"name": name, "seed": 5, **{k: dict(v) for k, v in BASE.items()}}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(table.get(key), dict):
            table[key] = {**table[key], **value}
        else:
            table[key] = value
    return table


def table_csv(path: Path) -> None:
    """A small table of records for the table source (two sites, a hold-out)."""
    lines = ["site,a,b,kind,y"]
    for i in range(600):
        a, b, y = (i * 7) % 13 / 13, (i * 5) % 11 / 11, (i % 17) / 17
        lines.append(f"{'AB'[i % 2]},{a:.3f},{b:.3f},{'xyz'[i % 3]},{y:.3f}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def commands(work: Path) -> list[list[str]]:
    """The runs: each a dpmarket command line (after ``python -m dpmarket``)."""
    files = {
        "ideal": scenario("ideal", privacy={"sensitivity": "clip", "clip": "auto"}),
        "request": scenario("request", network=NETWORK),
        "broadcast": scenario("broadcast", network={
            "mode": "broadcast", "broadcast_interval": 0.2, "transmission_time": 0.01,
            "outages": [{"start": 1, "end": 2}]}),
        "market": scenario("market", market={**MARKET, "model_value": 1.0}, privacy={"split": "capped"}),
        "dynamic": scenario("dynamic", network=NETWORK, privacy={"split": "capped"},
                            market={**MARKET, "mode": "dynamic", "payment": "on_delivery", "rule": "progress",
                                    "forecast": "law", "period": 2.0, "pool": 1, "arrival_rate": 0.5}),
        "gaussian": scenario("gaussian", privacy={"mechanism": "gaussian", "delta": 1e-6,
                                                  "accountant": "pld"}),
        "theorem2": scenario("theorem2", market={**MARKET, "forecast": {"c0": 0.01, "c1": 0.0, "c2": 2e4}}),
        "table": {"name": "table", "seed": 5, "data": {
            "source": "table", "path": "records.csv",
            "table": {"target": "y", "numeric": ["a", "b"], "categorical": ["kind"], "partition": "site",
                      "holdout": 100, "components": 2}}, "learner": {"iterations": 100}},
    }
    for name, table in files.items():
        if "market" in table:
            table["privacy"].pop("epsilon")
        (work / f"{name}.toml").write_text(tomli_w.dumps(table), encoding="utf-8")
    table_csv(work / "records.csv")
    return [
        ["run", "ideal.toml", "--out", "runs/ideal", "--quiet"],
        ["run", "request.toml", "--out", "runs/request", "--quiet"],
        ["run", "broadcast.toml", "--out", "runs/broadcast", "--quiet"],
        ["run", "market.toml", "--out", "runs/market", "--quiet"],
        ["run", "dynamic.toml", "--out", "runs/dynamic", "--quiet"],
        ["run", "gaussian.toml", "--out", "runs/gaussian", "--quiet"],
        ["run", "theorem2.toml", "--out", "runs/theorem2", "--quiet"],
        ["run", "table.toml", "--out", "runs/table", "--quiet"],
        ["timeline", "runs/request", "--owners", "0-1"],
        ["run", "request.toml", "--replications", "3", "--workers", "2", "--out", "replications/request",
         "--quiet"],
        ["sweep", "ideal.toml", "--grid", "privacy.epsilon=10,100", "--grid", "data.owners=2,4",
         "--grid", "data.records=1000,2000",
         "--replications", "2", "--workers", "2", "--out", "sweep/ideal", "--quiet"],
        ["market", "market.toml", "--policies", "posted_price,procurement", "--replications", "2",
         "--out", "market/market", "--quiet"],
        ["market", "market.toml", "--policies", "posted_price,procurement", "--replications", "2",
         "--out", "market/lab", "--quiet", "--properties"],
    ]


# Objects whose keys depend on another value and are documented where that value is: a diagnostic's
# figures differ by its code (docs/reference/diagnostics.md), so they are one documented key.
OPAQUE = {"diagnostics[].figures"}


def flatten(value, prefix: str = "") -> set[str]:
    """A JSON document's keys as dotted paths; the items of a list of objects as ``key[].item``."""
    keys: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}{key}"
            keys.add(path)
            if path not in OPAQUE:
                keys |= flatten(item, path + ".")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                keys |= flatten(item, prefix[:-1] + "[].")
    return keys


def kind_of(directory: Path) -> str:
    return directory.parent.name  # runs, replications, sweep, market


def written(work: Path) -> dict[str, set[str]]:
    """Per documented file (``runs/events.csv``, ``sweep/sweep.json``…): the columns or keys written."""
    found: dict[str, set[str]] = defaultdict(set)
    for group in ("runs", "replications", "sweep", "market"):
        for directory in sorted((work / group).iterdir()):
            for path in sorted(directory.iterdir()):
                name = path.name
                if name.startswith("timeline-") and name != "timeline.png":
                    name = "timeline-SELECTION" + path.suffix
                label = f"{group}/{name}"
                if path.suffix == ".csv":
                    with open(path, newline="", encoding="utf-8") as fh:
                        found[label] |= set(next(csv.reader(fh)))
                elif path.suffix == ".json":
                    found[label] |= flatten(json.loads(path.read_text(encoding="utf-8")))
                elif path.is_dir():
                    found[label + "/"] |= set()
                else:
                    found[label] |= set()
    return dict(found)


def produce(work: Path) -> dict[str, set[str]]:
    env = {**os.environ, "DPMARKET_FORECAST_CACHE": str(work / "forecasts")}
    for command in commands(work):
        done = subprocess.run([sys.executable, "-m", "dpmarket", *command], cwd=work, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"dpmarket {' '.join(command)}: exit {done.returncode}\n{done.stderr}")
    return written(work)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for label, names in sorted(produce(Path(tmp)).items()):
            print(label, ", ".join(sorted(names)))
