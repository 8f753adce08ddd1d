"""Output plans: max_tokens and model length bound them, EOS draws and stop strings end them."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim import text
from inference.sim.request import FinishReason
from inference.sim.sampling import (
    LengthDistribution,
    LengthKind,
    RequestError,
    SamplingParams,
    StopMatch,
    find_stop,
    plan_output,
)


def plan(params: SamplingParams, length: LengthDistribution | None = None, num_prompt: int = 10):
    return plan_output(params, num_prompt, 100, length, np.random.default_rng(0), output_seed=5)


def test_without_an_eos_distribution_the_output_runs_to_max_tokens() -> None:
    result = plan(SamplingParams(max_tokens=30))
    assert (result.num_tokens, result.reason, result.max_tokens) == (30, FinishReason.LENGTH, 30)
    assert plan(SamplingParams()).num_tokens == 90  # what the model length leaves


def test_an_eos_draw_shorter_than_max_tokens_stops_early_unless_ignored() -> None:
    short = LengthDistribution(LengthKind.FIXED, 12)
    assert plan(SamplingParams(max_tokens=30), short).num_tokens == 12
    assert plan(SamplingParams(max_tokens=30), short).reason is FinishReason.STOP
    assert plan(SamplingParams(max_tokens=30, ignore_eos=True), short).num_tokens == 30
    assert plan(SamplingParams(max_tokens=30, min_tokens=20), short).num_tokens == 20


def test_a_stop_string_ends_the_output_at_the_token_that_completes_it() -> None:
    pieces = [text.token_text(i) for i in text.output_token_ids(5, 0, 40).tolist()]
    target = pieces[7] + pieces[8][:2]
    expected = next(k for k in range(1, 41) if target in "".join(pieces[:k]))
    result = plan(SamplingParams(max_tokens=40, stop=(target, "never-there")))
    assert (result.num_tokens, result.reason) == (expected, FinishReason.STOP)
    assert expected <= 9


def test_a_stop_string_within_min_tokens_does_not_count() -> None:
    pieces = [" ab", " cd", " ab", " ef"]
    assert find_stop(pieces, ("ab",), min_tokens=0) == StopMatch(start=1, num_tokens=1)
    assert find_stop(pieces, ("ab",), min_tokens=1) == StopMatch(start=7, num_tokens=3)
    assert find_stop(pieces, ("ab", "d a"), min_tokens=1) == StopMatch(start=5, num_tokens=3)
    assert find_stop(pieces, ("ab",), min_tokens=3) is None


def test_max_tokens_past_the_room_left_is_clamped_as_vllm_does() -> None:
    # vLLM 0.32's get_max_tokens: min(max_tokens, max_model_len - prompt); the turn ends on length.
    clamped = plan(SamplingParams(max_tokens=91))
    assert (clamped.max_tokens, clamped.num_tokens, clamped.reason) == (90, 90, FinishReason.LENGTH)
    assert plan(SamplingParams(max_tokens=100), num_prompt=99).num_tokens == 1
    short = LengthDistribution(LengthKind.FIXED, 12)
    assert plan(SamplingParams(max_tokens=95), short, num_prompt=95).num_tokens == 5


def test_requests_that_cannot_fit_the_model_are_refused() -> None:
    with pytest.raises(
        RequestError, match="max_tokens=101 cannot be greater than max_model_len=100"
    ):
        plan(SamplingParams(max_tokens=101))
    with pytest.raises(RequestError, match="no room"):
        plan(SamplingParams(), num_prompt=100)
    with pytest.raises(RequestError, match="min_tokens"):
        SamplingParams(max_tokens=2, min_tokens=3)
    # Without max_tokens the room left (90) bounds min_tokens, stop strings or not.
    with pytest.raises(RequestError, match=r"min_tokens \(91\) must be <= max_tokens \(90"):
        plan(SamplingParams(min_tokens=91, stop=("x",)))
    with pytest.raises(RequestError, match=r"min_tokens \(95\) must be <= max_tokens \(90"):
        plan(SamplingParams(max_tokens=100, min_tokens=95))
    assert plan(SamplingParams(min_tokens=90, stop=("x",))).num_tokens == 90


def test_length_distributions_parse_and_keep_their_mean() -> None:
    rng = np.random.default_rng(1)
    lognormal = LengthDistribution.parse("lognormal:300:0.8")
    samples = [lognormal.sample(rng) for _ in range(20_000)]
    assert 285 < np.mean(samples) < 315
    uniform = LengthDistribution.parse("uniform:100:0.5")
    draws = [uniform.sample(rng) for _ in range(2000)]
    assert min(draws) >= 50 and max(draws) <= 150
    assert LengthDistribution.parse("fixed:7").sample(rng) == 7
    bad_specs = ("gauss:3", "fixed", "fixed:0", "uniform:10:2", "fixed:a", "fixed:nan")
    # A draw that is infinite, or overflows to infinity, cannot be a token count.
    for bad in (*bad_specs, "fixed:inf", "uniform:1e308:1", "lognormal:1e300:4"):
        with pytest.raises(ValueError):
            LengthDistribution.parse(bad)
