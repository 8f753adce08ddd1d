"""Each pytest process's Redis database: the quick start's 0 is never a test's."""

from __future__ import annotations

import pytest

from tests.redis_lanes import lane_url


def test_one_process_takes_database_1_and_xdist_workers_the_ones_after() -> None:
    assert lane_url("redis://127.0.0.1:6379/0", "") == "redis://127.0.0.1:6379/1"
    assert lane_url("redis://127.0.0.1:6379/0", "gw0") == "redis://127.0.0.1:6379/2"
    assert lane_url("redis://:secret@cache:6380/7", "gw2") == "redis://:secret@cache:6380/4"


def test_more_workers_than_redis_has_databases_is_refused() -> None:
    assert lane_url("redis://127.0.0.1:6379", "gw13").endswith("/15")
    with pytest.raises(RuntimeError, match="16 databases"):
        lane_url("redis://127.0.0.1:6379", "gw14")
