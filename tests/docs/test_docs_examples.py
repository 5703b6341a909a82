"""Every code example of the documentation runs, and prints what the page says (tests/docs/harness.py)."""

from __future__ import annotations

import pytest
from harness import DOCS, ROOT, blocks, console_commands, matches, normalise, pages, run_page


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples(page, tmp_path):
    run_page(page, tmp_path)


def test_pages_found():
    names = {str(p.relative_to(DOCS)) for p in pages()}
    assert {"tutorial.md", "how-to/network.md", "reference/outputs.md"} <= names
    assert not any(n.startswith(("hooks/", "scripts/")) for n in names)


def test_wall_clock_is_the_only_tolerance():
    line = "time          17.34 simulated, 1.07 s wall"
    assert normalise(line) == "time          17.34 simulated, <wall> s wall"
    # a simulated time or a psi is never normalised
    assert normalise("psi final     0.01757") == "psi final     0.01757"
    assert not matches(["psi final 0.01757"], ["psi final 0.01758"])
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b"])


def test_console_blocks_parse():
    pairs = console_commands("$ echo one \\\n    two\none two\n$ true\n")
    assert pairs == [("echo one  two", "one two"), ("true", "")]


def test_readme_quickstart_is_a_documented_command():
    """The README keeps the Quickstart's literal command (and the docs' home page shows it too)."""
    command = "python -m dpmarket run scenarios/ny_hospitals.toml"
    assert command in (ROOT / "README.md").read_text(encoding="utf-8")
    assert any(command in b.body for b in blocks(DOCS / "index.md"))
