"""Counting hits in a sliding window, in Redis, so that every web process shares one count.

A hit is a member of a sorted set scored by its time; one Lua script forgets the hits older
than the window, counts the rest and adds the new one only while they are under the limit,
atomically, so forty requests at once across two web processes let exactly the limit through
(a read, then a write, as DRF's cache throttle does, let twice as many through). Times come
from Redis' own clock, which every web process shares.

While Redis cannot be reached nothing is counted: the request goes through and the log says
so. A rate limit guards against floods; refusing every command or sign-in during an outage
(each command a 500, as the cache throttle answered) would turn it into one.
"""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import dataclass

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

# A count must not hold a request up: Redis answers in about a millisecond, and one that does
# not within this is treated as away.
REDIS_TIMEOUT_S = 0.5

# KEYS[1]: the hits of one client; ARGV: limit, window (ms), a member for this hit. Answers
# -1 when the hit is counted, else the milliseconds until the oldest hit leaves the window.
_ACQUIRE = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local window_ms = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms - window_ms)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now_ms, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window_ms)
  return -1
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return tonumber(oldest[2]) + window_ms - now_ms
"""


@dataclass(frozen=True, slots=True)
class Admission:
    """What the window said of one hit."""

    allowed: bool
    wait_s: float  # until a hit would be allowed again; 0 when allowed
    key: str
    member: str | None  # the hit as counted, to release it; None when not counted


def acquire(name: str, limit: int, window_s: float) -> Admission:
    """Count a hit of ``name`` if fewer than ``limit`` were counted in the last ``window_s``."""
    key = f"{settings.PACER_THROTTLE_PREFIX}:{name}"
    member = uuid.uuid4().hex
    try:
        answer = _script(settings.REDIS_URL)(keys=[key], args=[limit, int(window_s * 1000), member])
    except redis.RedisError as failed:
        logger.warning("rate limit %s: could not count (%s); letting it through", key, failed)
        return Admission(True, 0.0, key, None)
    if int(answer) < 0:
        return Admission(True, 0.0, key, member)
    return Admission(False, max(int(answer), 1) / 1000, key, None)


def release(admission: Admission) -> None:
    """Take a counted hit back (a sign-in that succeeded is no failure to count)."""
    if admission.member is None:
        return
    try:
        _client(settings.REDIS_URL).zrem(admission.key, admission.member)
    except redis.RedisError as failed:
        logger.warning("rate limit %s: could not release a hit (%s)", admission.key, failed)


def parse_rate(rate: str) -> tuple[int, float]:
    """``"10/hour"`` (DRF's form: a count, then s, m, h or d, or a word starting so) as a
    count and a window in seconds; ValueError for anything else."""
    count, _, period = rate.partition("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(period.strip()[:1])
    if not count.strip().isdigit() or seconds is None:
        raise ValueError(f"{rate!r} is not a rate like '10/hour'")
    return int(count), float(seconds)


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )


@functools.cache
def _script(url: str) -> redis.commands.core.Script:
    return _client(url).register_script(_ACQUIRE)
