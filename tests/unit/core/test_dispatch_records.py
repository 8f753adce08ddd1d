"""The dispatcher's config refuses impossible values."""

from __future__ import annotations

import pytest

from workers.core.dispatch.records import DispatcherConfig


def test_max_off_policy_steps_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match=r"max_off_policy_steps must be in \[0, "):
        DispatcherConfig(max_off_policy_steps=-1)


def test_defaults_follow_prime_rl() -> None:
    config = DispatcherConfig()
    assert (config.max_off_policy_steps, config.pacing.window, config.pacing.cap_fraction) == (
        8,
        5.0,
        0.1,
    )
