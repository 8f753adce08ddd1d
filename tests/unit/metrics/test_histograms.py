"""Histogram differences and quantiles, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from inference.metrics.histograms import Histogram, merge

INF = math.inf


def hist(*cumulative: float, bounds: tuple[float, ...] = (1.0, 2.0, 4.0, INF)) -> Histogram:
    return Histogram(bounds, cumulative)


def test_quantile_interpolates_inside_the_bucket_holding_the_rank() -> None:
    h = hist(0, 10, 10, 10)  # all ten observations in (1, 2]
    assert h.quantile(0.5) == pytest.approx(1.5)
    assert h.quantile(0.9) == pytest.approx(1.9)


def test_quantile_of_the_first_bucket_starts_from_zero() -> None:
    assert hist(4, 4, 4, 4).quantile(0.5) == pytest.approx(0.5)


def test_quantile_in_the_inf_bucket_reads_the_highest_finite_bound() -> None:
    assert hist(0, 0, 1, 10).quantile(0.99) == 4.0


def test_quantile_of_an_empty_histogram_is_none() -> None:
    assert hist(0, 0, 0, 0).quantile(0.5) is None


def test_quantile_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        hist(1, 1, 1, 1).quantile(1.5)


def test_minus_gives_the_observations_of_the_interval() -> None:
    later = Histogram((1.0, INF), (5, 9))
    earlier = Histogram((1.0, INF), (2, 3))
    assert later.minus(earlier) == Histogram((1.0, INF), (3, 6))


def test_minus_is_none_after_a_restart_or_with_other_bounds() -> None:
    earlier = Histogram((1.0, INF), (5, 9))
    assert Histogram((1.0, INF), (1, 1)).minus(earlier) is None
    assert Histogram((1.0, INF), (4, 10)).minus(earlier) is None  # a bucket lost observations
    assert Histogram((2.0, INF), (9, 9)).minus(earlier) is None


@pytest.mark.parametrize(
    ("bounds", "cumulative", "message"),
    [
        ((1.0, 2.0), (1, 2), r"\+Inf"),
        ((2.0, 1.0, INF), (1, 2, 3), "ascend"),
        ((1.0, INF), (3, 2), "must not decrease"),
        ((1.0, INF), (3,), "one cumulative count per bound"),
        ((1.0, INF), (-1, 2), "must not decrease"),
    ],
)
def test_an_inconsistent_histogram_is_refused(
    bounds: tuple[float, ...], cumulative: tuple[float, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Histogram(bounds, cumulative)


def test_merge_sums_engines_with_equal_bounds() -> None:
    merged = merge([hist(1, 2, 3, 4), hist(0, 0, 5, 6)])
    assert merged == Histogram((1.0, 2.0, 4.0, INF), (1, 2, 8, 10))


def test_merge_refuses_different_bounds_and_nothing() -> None:
    assert merge([hist(1, 1, 1, 1), Histogram((1.0, INF), (1, 1))]) is None
    assert merge([]) is None
