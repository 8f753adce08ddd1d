"""The controller's config and per-episode input refuse impossible values."""

from __future__ import annotations

import pytest

from workers.core.controller.records import ControllerConfig, EpisodeCompletion, check_inflight


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_inflight": 0}, r"min_inflight must be in \[1, "),
        ({"min_inflight": 10, "max_inflight": 5}, r"max_inflight must be in \[10, "),
        ({"initial_inflight": 0}, "initial_inflight"),
        ({"episode_token_budget": 0}, "episode_token_budget"),
        ({"poll_ttl": float("inf")}, "poll_ttl"),
        ({"binding_fraction": 0.0}, "binding_fraction"),
        ({"start_wait": -1.0}, r"start_wait must be in \[0.0, 3600.0\]"),
        ({"start_wait": float("nan")}, "start_wait"),
        ({"over_permit_polls": 0}, r"over_permit_polls must be in \[1, 1000\]"),
    ],
)
def test_config_names_the_field_and_its_range(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        ControllerConfig(**fields)


def test_a_completion_counts_itself_in_the_pool() -> None:
    with pytest.raises(ValueError, match="counts the finished episode itself"):
        EpisodeCompletion(tokens=10, ok=True, pool=0)
    with pytest.raises(ValueError, match="tokens"):
        EpisodeCompletion(tokens=-1, ok=True, pool=1)
    with pytest.raises(ValueError, match="demand must be >= 0"):
        EpisodeCompletion(tokens=1, ok=True, pool=1, demand=-1)


@pytest.mark.parametrize("value", [-1, 2.5, True])
def test_inflight_must_be_a_count(value) -> None:
    with pytest.raises(ValueError, match="inflight"):
        check_inflight(value)
