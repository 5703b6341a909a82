"""The guarantee as outputs state it: the neighbouring relation (replace-one, n_i public) in every
summary, with what a table's drop options mean for it (issue 28, F5)."""

from __future__ import annotations

import json

from helpers import tiny

from dpmarket.output.results import run_and_write
from dpmarket.privacy.guarantee import MISSING_DROP, NEIGHBOURING, SMALL_DROP, Guarantee, stated
from dpmarket.scenario.loading import validate


def test_every_statement_names_the_neighbouring_relation():
    assert Guarantee("gaussian", "pld", 1.0, 1e-6).statement()["neighbouring"] == NEIGHBOURING
    assert "replace-one" in NEIGHBOURING and "add/remove neighbours are not covered" in NEIGHBOURING
    assert stated(tiny())["neighbouring"] == NEIGHBOURING


def test_a_tables_drop_options_are_stated(tmp_path):
    """missing = 'drop' makes the guarantee one about the complete rows (labelled); small_owners = 'drop'
    decides by n_i alone (public under the relation: said so); without them, the plain relation."""
    path = tmp_path / "t.csv"
    path.write_text("site,a,y\n" + "".join(f"{'AB'[i % 2]},{i},{i % 3}\n" for i in range(60)))
    table = {"target": "y", "numeric": ["a"], "partition": "site", "holdout": 20}

    def scenario(**options):
        data = {"source": "table", "path": str(path), "table": {**table, **options}}
        return validate({"name": "t", "data": data, "learner": {"rho": 1.0}}, "test")

    plain, both = scenario(), scenario(missing="drop", small_owners="drop")
    assert stated(plain)["neighbouring"] == NEIGHBOURING
    assert stated(both)["neighbouring"] == "; ".join([NEIGHBOURING, MISSING_DROP, SMALL_DROP])


def test_a_runs_summary_states_the_relation(tmp_path):
    run_and_write(tiny(), tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["neighbouring"] == NEIGHBOURING and summary["accountants_used"] == {"basic": 3}
