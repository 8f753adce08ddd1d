"""Control messages: how the web process tells a run's worker that something is waiting.

The command itself is a stored Override (or a step's acknowledgement), so nothing is lost when
Redis is down or the run has no worker yet; the message on Redis pub/sub only wakes the worker
within a second. Pub/sub rather than the Channels layer, because a run's host is one
subscriber on a known channel, not a consumer in a group: a publish reaches it at once or,
when it is not listening, nobody, and the worker reads what is stored when it starts and
every few seconds besides.
"""

from __future__ import annotations

import json
import logging

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S = 1.0  # a control write must not hang on Redis: the row is stored already


def control_channel(run_id: int) -> str:
    return f"pacer:run:{run_id}:control"


def publish_control(run_id: int, kind: str, **fields: object) -> bool:
    """Wake the run's worker; False (logged) when Redis cannot be reached, which delays the
    command until the worker's next look at the database but loses nothing."""
    message = json.dumps({"kind": kind, **fields})
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL,
            socket_connect_timeout=PUBLISH_TIMEOUT_S,
            socket_timeout=PUBLISH_TIMEOUT_S,
        )
        with client:
            client.publish(control_channel(run_id), message)
    except redis.RedisError as failed:
        logger.warning("control message for run %s not published: %s", run_id, failed)
        return False
    return True
