"""Gradient2: the limit follows per-token latency against its long-term level."""

from __future__ import annotations

import math

import pytest

from tests.unit.core.builders import complete, controller, sample
from workers.core.config.fields import ConfigError
from workers.core.config.run import parse_run_config
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.gradient2 import Gradient2Config, Gradient2Policy
from workers.core.decisions import Cause, DecisionKind, Signal


def steady(ctl: Controller, *, polls: int, start: float, running: int, tokens: int) -> None:
    for k in range(polls):
        ctl.on_poll([sample(running=running, tokens=tokens)], inflight=ctl.cap, now=start + 5 * k)


def test_steady_latency_lets_the_limit_grow_by_its_queue_allowance() -> None:
    ctl = controller(Gradient2Policy(), start=100)
    steady(ctl, polls=3, start=5.0, running=100, tokens=5000)
    stats = ctl.make_stats(15.0)
    assert (stats.signal, stats.growth) == (Signal.CLEAR, 2.0)
    complete(ctl, 100, now=16.0)
    # gradient 1: target = 100 x 0.8 + (100 + sqrt(100)) x 0.2 = 102, the growth ceiling
    assert ctl.cap == 102


def test_latency_past_the_tolerance_trims_without_shedding() -> None:
    ctl = controller(Gradient2Policy(), start=100)
    steady(ctl, polls=10, start=5.0, running=100, tokens=5000)
    # the same engines now deliver a third of the tokens per request: latency x3
    decisions = ctl.on_poll([sample(running=100, tokens=1667)], inflight=100, now=55.0)
    trims = [d for d in decisions if d.kind is DecisionKind.TRIM]
    assert len(trims) == 1 and trims[0].shed == 0 and trims[0].cause is Cause.LATENCY
    gradient = max(0.5, 1.5 / 3.0)
    expected = 100 * 0.8 + (100 * gradient + math.sqrt(100)) * 0.2
    assert ctl.cap == math.floor(expected + 0.01)


def test_a_poll_without_tokens_holds_the_limit() -> None:
    ctl = controller(Gradient2Policy(), start=50)
    steady(ctl, polls=2, start=5.0, running=50, tokens=2500)
    assert ctl.on_poll([sample(running=50, tokens=0)], inflight=50, now=15.0) == ()
    assert ctl.make_stats(15.0).growth == 1.0
    assert ctl.cap == 50


def test_the_long_term_level_survives_a_restart() -> None:
    policy = Gradient2Policy()
    ctl = controller(policy, start=40)
    steady(ctl, polls=3, start=5.0, running=40, tokens=4000)
    again = Gradient2Policy()
    again.load_json(policy.to_json())
    assert again.to_json() == policy.to_json()
    with pytest.raises(ValueError):
        again.load_json({"long": -1.0})


def test_gradient2_is_a_run_policy_with_a_validated_table() -> None:
    document = {
        "name": "g",
        "concurrency": {"policy": "gradient2", "gradient2": {"tolerance": 2.0}},
        "env": [{"name": "arithmetic"}],
        "engine": [{"name": "e0"}],
    }
    settings = parse_run_config(document).concurrency
    assert isinstance(settings.make_policy(), Gradient2Policy)
    assert settings.gradient2 == Gradient2Config(tolerance=2.0)
    document["concurrency"] = {"policy": "gradient2", "gradient2": {"tolerance": 0.5}}
    with pytest.raises(ConfigError) as refused:
        parse_run_config(document)
    assert "concurrency.gradient2.tolerance" in refused.value.by_field()
