"""The event log's counts: per (kind, owner), or per kind only for logs nobody reads per owner."""

from __future__ import annotations

from collections import Counter

import pytest

from dpmarket.schedule.events import _BLOCK, EventLog


def rows(count: int) -> list[tuple]:
    kinds = ("tick", "request", "collision", "update")
    return [(0.5 * r, kinds[r % 4], r % 7, None, None, 0, None) for r in range(count)]


def test_counts_per_kind_only_are_the_per_owner_counts_summed(tmp_path):
    """Over several blocks, a per-kind log counts what a per-owner log counts, and writes the same file."""
    full, lean = EventLog(tmp_path / "full.csv"), EventLog(tmp_path / "lean.csv", by_owner=False)
    for row in rows(3 * _BLOCK + 17):
        full.record(*row)
        lean.record(*row)
    expected = Counter(kind for _, kind, *_ in rows(3 * _BLOCK + 17))
    assert lean.counts == full.counts == expected
    full.close()
    lean.close()
    assert (tmp_path / "full.csv").read_bytes() == (tmp_path / "lean.csv").read_bytes()


def test_a_per_kind_log_refuses_per_owner_counts():
    log = EventLog(None, by_owner=False)
    log.record(0.0, "tick", 3)
    with pytest.raises(ValueError, match="per kind only"):
        _ = log.counts_by_owner
