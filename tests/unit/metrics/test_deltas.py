"""What happened between two scrapes: deltas, restarts, first and too-old scrapes."""

from __future__ import annotations

import math
from dataclasses import fields, replace

from hypothesis import given
from hypothesis import strategies as st

from inference.metrics.deltas import reading_delta, restarted
from inference.metrics.histograms import Histogram
from inference.metrics.names import Series
from inference.metrics.readings import Counters, EngineReading

GAP = 30.0


def reading(
    counters: Counters, ttft: Histogram | None = None, created: float | None = None
) -> EngineReading:
    histograms = {Series.TIME_TO_FIRST_TOKEN: ttft} if ttft else {}
    stamps = {} if created is None else {Series.GENERATION_TOKENS: created}
    return EngineReading(0.5, 4, 0, 0, 0, 8192, counters, histograms, stamps)


def test_first_scrape_has_zero_deltas_and_no_interval() -> None:
    delta = reading_delta(None, reading(Counters(preemptions=9)), None, GAP)
    assert delta.counters == Counters()
    assert delta.seconds is None
    assert not delta.restarted


def test_deltas_are_the_increase_since_the_previous_scrape() -> None:
    earlier = reading(Counters(2, 10, 20, 100, 50))
    later = reading(Counters(5, 15, 40, 300, 150))
    delta = reading_delta(earlier, later, 5.0, GAP)
    assert delta.counters == Counters(3, 5, 20, 200, 100)
    assert delta.seconds == 5.0
    assert not delta.restarted


def test_a_counter_going_backwards_is_a_restart_with_zero_deltas() -> None:
    earlier = reading(Counters(7, 10, 20, 100, 5000))
    later = reading(Counters(9, 10, 20, 100, 12))
    delta = reading_delta(earlier, later, 5.0, GAP)
    assert delta.restarted
    assert delta.counters == Counters()


def test_a_histogram_count_going_backwards_is_a_restart() -> None:
    bounds = (1.0, math.inf)
    earlier = reading(Counters(), Histogram(bounds, (5, 8)))
    later = reading(Counters(), Histogram(bounds, (1, 1)))
    assert reading_delta(earlier, later, 5.0, GAP).restarted


def test_a_changed_created_stamp_is_a_restart_even_when_every_counter_grew() -> None:
    """An engine relaunched between two polls and busy since: its totals passed the old ones."""
    earlier = reading(Counters(3, 3072, 3900, 3900, 40), created=1_700_000_000.25)
    later = reading(Counters(18, 3328, 4200, 4200, 300), created=1_700_000_360.5)
    delta = reading_delta(earlier, later, 5.0, GAP)
    assert delta.restarted
    assert (delta.counters, delta.seconds) == (Counters(), None)
    assert restarted(earlier, later)


def test_the_same_created_stamp_is_the_same_engine_life() -> None:
    earlier = reading(Counters(generation_tokens=40), created=1_700_000_000.25)
    later = reading(Counters(generation_tokens=300), created=1_700_000_000.25)
    delta = reading_delta(earlier, later, 5.0, GAP)
    assert (delta.restarted, delta.counters.generation_tokens) == (False, 260)


def test_a_stamp_only_one_reading_carries_is_left_to_the_counters() -> None:
    """An exporter that starts or stops writing stamps proves nothing by it."""
    stamped = reading(Counters(generation_tokens=300), created=1_700_000_000.25)
    unstamped = reading(Counters(generation_tokens=40))
    assert not restarted(unstamped, stamped)
    assert restarted(stamped, unstamped)  # the counter went backwards


def test_an_interval_longer_than_the_gap_is_history_but_still_sees_a_restart() -> None:
    earlier = reading(Counters(preemptions=1))
    later = reading(Counters(preemptions=40))
    old = reading_delta(earlier, later, GAP + 1, GAP)
    assert old.counters == Counters()
    assert not old.restarted
    restarted = reading_delta(later, earlier, GAP + 1, GAP)
    assert restarted.restarted


def test_histogram_deltas_cover_the_interval_only() -> None:
    bounds = (1.0, math.inf)
    earlier = reading(Counters(), Histogram(bounds, (5, 8)))
    later = replace(earlier, histograms={Series.TIME_TO_FIRST_TOKEN: Histogram(bounds, (6, 10))})
    delta = reading_delta(earlier, later, 5.0, GAP)
    assert delta.histograms[Series.TIME_TO_FIRST_TOKEN] == Histogram(bounds, (1, 2))


totals = st.builds(Counters, *(st.integers(0, 10**9) for _ in range(5)))


@given(totals, totals, st.floats(0.1, 60.0))
def test_deltas_are_never_negative_whatever_the_totals(
    earlier: Counters, later: Counters, elapsed: float
) -> None:
    delta = reading_delta(reading(earlier), reading(later), elapsed, GAP)
    assert all(getattr(delta.counters, f.name) >= 0 for f in fields(Counters))
    assert delta.restarted == later.went_backwards(earlier)
