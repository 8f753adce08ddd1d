"""Counter totals of two scrapes in, what happened between them out. Pure.

A counter that goes backwards means the engine restarted: its totals began again from zero,
so the difference is meaningless, and the controller must not read it as a burst of
preemptions or as an idle engine. Such an interval, the first scrape of an engine, and an
interval so long that its events are no longer news all give zero deltas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from inference.metrics.histograms import Histogram
from inference.metrics.names import Series
from inference.metrics.readings import Counters, EngineReading


@dataclass(frozen=True, slots=True)
class ReadingDelta:
    """What one engine did between two scrapes."""

    counters: Counters  # increases since the previous scrape; zeros when not comparable
    histograms: Mapping[Series, Histogram] = field(default_factory=dict)  # observations since
    seconds: float | None = None  # time between the two scrapes; None when not comparable
    restarted: bool = False  # a counter went backwards: the engine restarted in between


def reading_delta(
    previous: EngineReading | None,
    current: EngineReading,
    elapsed: float | None,
    max_gap: float,
) -> ReadingDelta:
    """The change from ``previous`` to ``current``, scraped ``elapsed`` seconds apart.

    ``max_gap`` bounds how old the previous scrape may be for its difference to count:
    after an engine was unreachable for longer, whatever it did meanwhile is history, and
    replaying it at once (a pile of old preemptions) would trigger a cut for nothing.
    """
    if previous is None or elapsed is None:
        return ReadingDelta(Counters())
    restarted = current.counters.went_backwards(previous.counters) or any(
        series in previous.histograms and hist.count < previous.histograms[series].count
        for series, hist in current.histograms.items()
    )
    if restarted or elapsed > max_gap or elapsed <= 0:
        return ReadingDelta(Counters(), restarted=restarted)
    histograms = {}
    for series, hist in current.histograms.items():
        earlier = previous.histograms.get(series)
        difference = hist.minus(earlier) if earlier is not None else None
        if difference is not None:
            histograms[series] = difference
    return ReadingDelta(current.counters.minus(previous.counters), histograms, elapsed)
