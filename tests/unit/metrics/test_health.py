"""Endpoint health: up, stale, down, and backoff counted in polls."""

from __future__ import annotations

import pytest

from inference.metrics import health
from inference.metrics.health import HealthConfig
from workers.core.samples import EngineHealth

CONFIG = HealthConfig(down_after_s=30.0, max_skipped_polls=3)


def test_an_unseen_endpoint_is_down_and_due() -> None:
    status = health.unseen("e")
    assert status.health is EngineHealth.DOWN
    assert status.due


def test_success_is_up_and_clears_the_error() -> None:
    status = health.failed(health.unseen("e"), 0.0, "refused", CONFIG)
    status = health.succeeded(status, 5.0)
    assert status.health is EngineHealth.UP
    assert (status.error, status.consecutive_failures, status.last_success_at) == (None, 0, 5.0)


def test_a_failure_after_a_recent_success_is_stale_then_down_past_the_bound() -> None:
    up = health.succeeded(health.unseen("e"), 100.0)
    stale = health.failed(up, 110.0, "timeout", CONFIG)
    assert stale.health is EngineHealth.STALE
    assert stale.error == "timeout"
    assert stale.last_success_at == 100.0
    down = health.failed(stale, 131.0, "timeout", CONFIG)
    assert down.health is EngineHealth.DOWN


def test_a_failure_without_any_success_is_down() -> None:
    assert health.failed(health.unseen("e"), 0.0, "refused", CONFIG).health is EngineHealth.DOWN


def test_backoff_skips_doubling_numbers_of_polls_up_to_the_cap() -> None:
    status = health.unseen("e")
    attempts = []
    for poll in range(20):
        if status.due:
            attempts.append(poll)
            status = health.failed(status, float(poll), "refused", CONFIG)
        else:
            status = health.skipped(status, float(poll), CONFIG)
    assert attempts == [0, 1, 3, 7, 11, 15, 19]


def test_a_skipped_poll_ages_a_stale_endpoint_into_down() -> None:
    status = health.failed(health.succeeded(health.unseen("e"), 0.0), 5.0, "x", CONFIG)
    status = health.failed(status, 10.0, "x", CONFIG)
    assert status.health is EngineHealth.STALE
    assert health.skipped(status, 31.0, CONFIG).health is EngineHealth.DOWN


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"down_after_s": 0.0}, "down_after_s"), ({"max_skipped_polls": -1}, "max_skipped_polls")],
)
def test_config_out_of_range_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HealthConfig(**kwargs)
