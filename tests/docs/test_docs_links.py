"""Every relative link of README.md, CONTRIBUTING.md and CHANGELOG.md resolves to a file of the
repository, and the README stays short (at most 150 lines) with the Quickstart's command."""

from __future__ import annotations

import re

import pytest
from harness import ROOT

FILES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img [^>]*src=\"([^\"]+)\"")


def links(name: str) -> list[str]:
    text = (ROOT / name).read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold commands, not links
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("name", FILES)
def test_relative_links_resolve(name):
    relative = [link for link in links(name) if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    for link in relative:
        target = (ROOT / name).parent / link.split("#", 1)[0]
        assert target.exists(), f"{name}: link to {link}, which is not a file of the repository"
        inside = ROOT in target.resolve().parents or target.resolve() == ROOT
        assert inside, f"{name}: {link} leaves the repository"


def test_readme_is_short_and_keeps_the_quickstart():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert "python -m dpmarket run scenarios/ny_hospitals.toml" in text
    assert "../shared" not in text
