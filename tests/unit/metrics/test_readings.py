"""Counter totals compared between two scrapes."""

from __future__ import annotations

from inference.metrics.readings import Counters


def test_minus_subtracts_each_total() -> None:
    later = Counters(3, 50, 80, 1000, 400)
    earlier = Counters(1, 20, 30, 600, 100)
    assert later.minus(earlier) == Counters(2, 30, 50, 400, 300)


def test_any_total_below_its_earlier_value_went_backwards() -> None:
    earlier = Counters(5, 50, 80, 1000, 400)
    assert Counters(5, 50, 80, 1000, 399).went_backwards(earlier)
    assert not Counters(5, 50, 80, 1000, 400).went_backwards(earlier)
