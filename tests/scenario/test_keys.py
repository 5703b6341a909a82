"""Every scenario key explained (issue 25, item 3): a description on every field, ``dpmarket explain``,
validate's commented TOML that runs the same scenario, and "did you mean …" for unknown keys and words."""

from __future__ import annotations

import tomllib

import pytest
from helpers import ROOT, tiny_toml
from pydantic import BaseModel

from dpmarket.cli import main
from dpmarket.errors import ScenarioError
from dpmarket.output.results import run_and_write
from dpmarket.scenario import bundled, keys
from dpmarket.scenario.loading import load, validate
from dpmarket.scenario.schema import Scenario


def every_key(model: type[BaseModel] = Scenario, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted path, field) of every key of the schema, tables of unions and lists included."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append((path, field))
        for table in keys.Key(path, name, field, model).tables:
            out += every_key(table, path + ".")
    return out


KEYS = every_key()


def test_every_key_has_a_description_and_numbers_say_their_unit():
    assert len(KEYS) > 140  # every table walked (sizes, table, dropout, owners, costs, forecast, pilots…)
    missing = [path for path, field in KEYS if not (field.description or "").strip()]
    assert missing == []
    for path in ("data.records", "privacy.epsilon", "learner.iterations", "network.transmission_time",
                 "market.price", "data.table.holdout", "owners.records"):
        assert keys.find(path).unit, path


@pytest.mark.parametrize("path", [p for p, _ in KEYS], ids=str)
def test_explain_says_what_a_key_means_its_default_type_and_section(path):
    text = keys.explain(path)
    key = keys.find(path)
    assert text.startswith(f"{key.path} = ")
    assert " ".join(key.description.split())[:40] in " ".join(text.split())
    assert "  type:" in text and "  in:" in text


def test_explain_without_a_key_is_the_tree_of_every_section_and_key():
    tree = keys.explain("")
    for section in ("[data]", "[data.table]", "[model]", "[privacy]", "[learner]", "[network]",
                    "[network.dropout]", "[[owners]]", "[output]", "[market]", "[market.costs]",
                    "[market.pilots]", 'data.records = {distribution = "pareto", …}'):
        assert section in tree, section
    assert all(len(line) <= keys.WIDTH for line in tree.splitlines()[2:])


@pytest.mark.parametrize("typo, hint", [("privacy.epsilom", "'epsilon'"), ("privcy", "'privacy'"),
                                        ("market.costs.kidn", "'kind'"), ("owners.0.epsilom", "'epsilon'")])
def test_an_unknown_key_gets_the_closest_known_one(typo, hint, capsys):
    with pytest.raises(ScenarioError, match=f"unknown key; did you mean {hint}"):
        keys.explain(typo)
    assert main(["explain", typo]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"did you mean {hint}?" in err


@pytest.mark.parametrize("path, why", [(".", "a part between dots is empty"),
                                       ("..", "a part between dots is empty"),
                                       ("privacy.", "a part between dots is empty"),
                                       ("privacy..epsilon", "a part between dots is empty"),
                                       ("0", "the list index 0 follows no key")])
def test_a_path_that_is_no_key_path_is_one_line_naming_it(path, why, capsys):
    """The old ``explain`` dropped the empty parts and the leading index, and printed the tree of
    every key (``.``, ``..``, ``0``) or the section (``privacy.``) with exit 0."""
    assert main(["explain", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"dpmarket: error: explain: {path}: not a key path: {why} ")
    assert keys.explain("owners.0.epsilon").startswith("owners.epsilon = ")  # an index after a key is fine


@pytest.mark.parametrize("override, hint", [
    ("privacy.epsilom=3", "privacy.epsilom = 3: unknown key; did you mean 'epsilon'?"),
    ("privcy.epsilon=3", "unknown key; did you mean 'privacy'?"),
    ("owners.0.clock_rat=2", "owners.0.clock_rat = 2: unknown key; did you mean 'clock_rate'?"),
    ("privacy.accountant=rpd", "input should be 'basic', 'rdp' or 'pld'; did you mean 'rdp'?"),
    ("network.mode=requests", "did you mean 'request'?"),
    ('data.records={distribution="paretto"}', "distribution should be 'pareto', 'lognormal' or "
                                              "'uniform'; did you mean 'pareto'?"),
])
def test_a_validation_error_suggests_the_known_key_or_word(tmp_path, capsys, override, hint):
    path = tmp_path / "s.toml"
    path.write_text(tiny_toml())
    assert main(["validate", str(path), "--set", override, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(hint), err


def test_no_suggestion_when_nothing_is_close():
    assert keys.suggestion("zzzz", ["epsilon", "delta"]) == ""


def _commented(scenario: Scenario) -> Scenario:
    table = tomllib.loads(keys.commented_toml(scenario))
    return validate(table, "commented.toml")


@pytest.mark.parametrize("example", [e for e in bundled.examples() if e.data is None], ids=lambda e: e.name)
def test_validates_commented_output_is_the_same_scenario(example):
    scenario = load(example.path)
    again = _commented(scenario)
    assert again == scenario and again.to_toml() == scenario.to_toml()


def test_commented_output_of_tables_owners_markets_and_presets_is_the_same_scenario(tmp_path):
    data = tmp_path / "t.csv"
    data.write_text("site,a,b,y\n" + "\n".join(f"{'AB'[i % 2]},{i % 7},{i % 5},{i % 4}" for i in range(300)))
    cases = [
        {"name": "t", "data": {"source": "table", "path": str(data),
                               "table": {"target": "y", "numeric": ["a", "b"], "partition": "site",
                                         "holdout": 100}}},
        {"name": "o", "owners": [{"name": "x", "outages": [{"start": 1.0, "end": 2.0}], "mean_online": 5.0,
                                  "mean_offline": 1.0}, {}], "network": {"mode": "request"},
         "privacy": {"preset": "paper"}},
        {"name": "m", "market": {"policy": "posted_price", "price": 1.0, "forecast": {"c1": 0.0, "c2": 1.0},
                                 "costs": {"kind": "linear", "distribution": "uniform", "low": 0.1,
                                           "high": 0.2}}},
    ]
    for table in cases:
        scenario = validate(table, "case.toml")
        assert _commented(scenario) == scenario, table["name"]


def test_validate_into_a_file_runs_identically_and_keeps_the_explanations(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny_toml())
    assert main(["validate", str(path)]) == 0
    text = capsys.readouterr().out
    copy = tmp_path / "copy.toml"
    copy.write_text(text)
    assert "# Over how many answers m_i an owner spreads its budget" in text  # privacy.split's comment
    assert "iterations = 80  # exchanges" in text
    a = run_and_write(load(path), tmp_path / "a")
    b = run_and_write(load(copy), tmp_path / "b")
    assert a.psi_final == b.psi_final
    for name in ("events.csv", "metrics.csv", "owners.csv", "scenario.toml", "summary.json"):
        left, right = (tmp_path / d / name for d in "ab")
        if name == "summary.json":
            import json

            one, two = json.loads(left.read_text()), json.loads(right.read_text())
            one.pop("wall_seconds"), two.pop("wall_seconds")
            assert one == two
        else:
            assert left.read_bytes() == right.read_bytes(), name


def test_the_docs_reference_reads_the_descriptions():
    """The docs' key reference (docs/hooks/reference.py) shows each field's description."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_reference"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        page = module.scenario_keys_markdown()
    finally:
        del sys.modules["docs_reference"]
    assert "Over how many answers m_i an owner spreads its budget" in page
    assert "A named set of defaults for the keys of this table" in page
