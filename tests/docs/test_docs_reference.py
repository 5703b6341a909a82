"""The generated reference pages (docs/hooks/reference.py): every scenario key of the schema is on the
scenario-key page, with a field's description once the schema gives one; every command's --help is on
the commands page."""

from __future__ import annotations

import sys
from typing import Literal

from harness import DOCS
from pydantic import BaseModel, Field

sys.path.insert(0, str(DOCS / "hooks"))
import reference  # noqa: E402  (docs/hooks/reference.py)


class Inner(BaseModel):
    """A nested table."""

    rate: float = Field(1.0, gt=0, description="events per unit of time")
    kind: Literal["a", "b"] = "a"


class Root(BaseModel):
    """A schema with and without descriptions."""

    name: str
    inner: Inner = Inner()
    items: list[Inner] = []


def test_descriptions_appear_when_the_schema_has_them():
    page = reference.scenario_keys_markdown(Root)
    assert "| `inner.rate` | number | `1.0` | > 0 | events per unit of time |" in page
    assert "| `items[i].kind` | \"a\" or \"b\" | `\"a\"` | `\"a\"`, `\"b\"` |  |" in page
    # a table none of whose keys has a description shows no empty description column
    top = page.split("## Top level", 1)[1].split("## ", 1)[0]
    assert "| key | type | default | allowed |\n" in top


def test_every_key_of_the_schema_is_listed():
    from dpmarket.scenario import Scenario

    def count(model) -> int:
        return sum(len(rows) for _, _, rows in reference.walk(model))

    page = reference.scenario_keys_markdown()
    assert page.count("\n| `") == count(Scenario)
    for key in ("network.loss_probability", "market.pilots.replications", "owners[i].cost_coef",
                "data.table.holdout", "privacy.accountant", "data.records.alpha"):
        assert f"| `{key}` |" in page, key


def test_every_command_is_on_the_commands_page():
    page = reference.commands_markdown()
    for command in reference.COMMANDS:
        assert f"\n## {command}\n" in page
        assert f"usage: dpmarket {command}" in page
