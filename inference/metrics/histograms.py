"""Latency histograms as data: differences between scrapes and quantiles of a difference.

vLLM's histograms are cumulative since the engine started, so quantiles over them describe the
whole lifetime of the engine and barely move. Quantiles of the difference between two scrapes
describe the last poll interval, which is what a live dashboard should show. Only the buckets
are kept: the +Inf bucket is the count, and quantiles need nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Histogram:
    """One cumulative Prometheus histogram: bucket ``i`` counts observations <= ``bounds[i]``."""

    bounds: tuple[float, ...]  # ascending upper bounds, the last one +Inf
    cumulative: tuple[float, ...]  # observations at or below each bound

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.cumulative) or not self.bounds:
            raise ValueError("a histogram needs one cumulative count per bound, at least one")
        if self.bounds[-1] != math.inf:
            raise ValueError("a histogram's last bucket must be +Inf")
        if any(b <= a for a, b in zip(self.bounds, self.bounds[1:], strict=False)):
            raise ValueError(f"histogram bounds must ascend strictly: {self.bounds}")
        if self.cumulative[0] < 0 or any(
            b < a for a, b in zip(self.cumulative, self.cumulative[1:], strict=False)
        ):
            raise ValueError(f"histogram bucket counts must not decrease: {self.cumulative}")

    @property
    def count(self) -> float:
        return self.cumulative[-1]

    def minus(self, earlier: Histogram) -> Histogram | None:
        """The observations made since ``earlier``; None if they cannot be told apart.

        A count that went down means the engine restarted; other bounds mean another
        configuration. Neither has a meaningful difference.
        """
        if earlier.bounds != self.bounds:
            return None
        try:
            return Histogram(
                self.bounds,
                tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            )
        except ValueError:
            return None  # some bucket lost observations: not a later state of the same engine

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile by linear interpolation inside its bucket; None when empty.

        This is Prometheus' ``histogram_quantile``: the first bucket starts at 0, and a rank
        that falls in the +Inf bucket reads as the highest finite bound.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within 0..1, got {q}")
        if self.count <= 0:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            if cumulative >= rank and cumulative > lower_count:
                if bound == math.inf:
                    return lower_bound
                share = (rank - lower_count) / (cumulative - lower_count)
                return lower_bound + (bound - lower_bound) * share
            lower_bound, lower_count = bound, cumulative
        return lower_bound


def merge(histograms: Iterable[Histogram]) -> Histogram | None:
    """Sum histograms with identical bounds (one per engine) into a pool histogram.

    Returns None when there is none, or when bounds differ: summing different buckets
    would invent observations.
    """
    items = list(histograms)
    if not items or any(h.bounds != items[0].bounds for h in items):
        return None
    return Histogram(
        items[0].bounds, tuple(map(sum, zip(*(h.cumulative for h in items), strict=True)))
    )
