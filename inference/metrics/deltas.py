"""Counter totals of two scrapes in, what happened between them out. Pure.

An engine that restarted began its totals again from zero, so their difference is
meaningless, and the controller must not read it as a burst of preemptions or as an idle
engine. A restart shows two ways: the created stamps of its series change, and, until the new
totals pass the old ones, counters go backwards. Only the stamps catch an engine relaunched
between two polls and busy since; an exporter without stamps leaves only the counters. A
restarted interval, the first scrape of an engine, and an interval so long that its events are
no longer news all give zero deltas.

Zero, and not the new totals, for a restart: the new engine's totals leave out whatever the
old one did after the previous scrape, so they are no measurement of the interval either, and
LoadSample's contract (``workers.core.samples``) says so: ``restarted`` with zero deltas, which
the controller reads as an interval not covered (``PollSummary.whole``), never as a signal.
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
    restarted: bool = False  # the engine restarted in between: see ``restarted``


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
    again = restarted(previous, current)
    if again or elapsed > max_gap or elapsed <= 0:
        return ReadingDelta(Counters(), restarted=again)
    histograms = {}
    for series, hist in current.histograms.items():
        earlier = previous.histograms.get(series)
        difference = hist.minus(earlier) if earlier is not None else None
        if difference is not None:
            histograms[series] = difference
    return ReadingDelta(current.counters.minus(previous.counters), histograms, elapsed)


def restarted(previous: EngineReading, current: EngineReading) -> bool:
    """Whether ``current`` comes from a later life of the engine than ``previous``.

    Any changed stamp counts, later or earlier: either way the totals are another process's.
    A series stamped in one reading only proves nothing, and is left to the counters.
    """
    return (
        any(
            series in previous.created and stamp != previous.created[series]
            for series, stamp in current.created.items()
        )
        or current.counters.went_backwards(previous.counters)
        or any(
            series in previous.histograms and hist.count < previous.histograms[series].count
            for series, hist in current.histograms.items()
        )
    )
