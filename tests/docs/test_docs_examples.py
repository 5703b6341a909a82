"""Every code example of the documentation runs, and prints what the page says (tests/docs/harness.py)."""

from __future__ import annotations

import pytest
from harness import DOCS, ROOT, blocks, console_commands, matches, normalise, pages, run_page


@pytest.mark.slow  # every page's examples, run as a reader runs them: 2 minutes in all
@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples(page, tmp_path):
    run_page(page, tmp_path)


def test_pages_found():
    names = {str(p.relative_to(DOCS)) for p in pages()}
    assert {"tutorial.md", "how-to/network.md", "reference/outputs.md"} <= names
    assert not any(n.startswith(("hooks/", "scripts/")) for n in names)


def test_the_tolerance_is_the_reproducibility_contract():
    """Wall-clock times are replaced; other figures agree within the contract or one unit of the last
    digit printed (a page measured on one machine, checked on another); integers and words exactly."""
    line = "time          17.34 simulated, 1.07 s wall"
    assert normalise(line) == "time          17.34 simulated, <wall> s wall"
    assert normalise("psi final     0.01757") == "psi final     0.01757"  # a ψ is never replaced
    assert matches(["psi final 0.01757"], ["psi final 0.01758"])  # a rounding boundary
    assert not matches(["psi final 0.01757"], ["psi final 0.01759"])
    assert not matches(["8 of 86 owners benefit"], ["9 of 86 owners benefit"])
    assert matches(["(0.014450297393719724, 10)"], ["(0.014450297393719502, 10)"])  # issue 40's case
    assert not matches(["psi final 0.01757"], ["psi final 0.01758"], exact=True)  # what measure.py rewrites
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
