"""A deployment's setting that does not read stops the process at start, naming the variable:
not a bare ``int()`` traceback, and not a value that breaks a part later (a websocket read
timeout at or under the Channels layer's own wait closes every quiet page)."""

from __future__ import annotations

import pytest
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from tests.conftest import fresh

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("PACER_LOCK_IDLE_TIMEOUT_S", "10s", "='10s' is not a whole number"),
        ("PACER_PASSWORD_MIN_LENGTH", "0", "='0': must be at least 1"),
        ("PACER_CHANNELS_READ_TIMEOUT_S", "5", "='5': must be above 5"),
    ],
)
def test_a_bad_number_stops_manage_py_with_the_variables_name(
    variable: str, value: str, said: str
) -> None:
    refused = fresh("manage.py", "check", **{variable: value})
    assert refused.returncode != 0
    assert f"{variable}{said}" in refused.stderr


def test_the_websocket_read_timeout_outlasts_the_channel_layers_wait() -> None:
    assert RedisChannelLayer.brpop_timeout == settings.CHANNELS_EVENT_WAIT_S
    (host,) = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
    assert host["socket_timeout"] > RedisChannelLayer.brpop_timeout
