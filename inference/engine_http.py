"""The HTTP clients Pacer talks to engines with: one for rollout turns, one for scrapes.

Rollout turns go through aiohttp: every episode in flight holds a connection, and httpx's pool
scans all of its connections on every request and every response (measured on loopback
against the simulator: 3.6 ms of client CPU per request at 10 concurrent, 14 ms at 100; aiohttp
0.35 ms at both), which at a few hundred episodes in flight took the worker's event loop and
delayed everything else on it. Scrapes, one per engine per poll, stay on httpx.

vLLM's HTTP server closes a connection that has been idle for 5 s (its
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``), and httpx keeps idle connections for 5 s as well. A request
sent on a pooled connection at the moment the engine closes it fails with a ``ReadError``
that no retry covers: a rollout turn is lost (seen in CI, one in a few hundred), a metrics
scrape 5 s after the last one marks the engine stale. Dropping idle connections a second
before the engine does removes the race.
"""

from __future__ import annotations

import aiohttp
import httpx

from workers.core.validation import check_range

VLLM_KEEPALIVE_S = 5.0  # vLLM's default VLLM_HTTP_TIMEOUT_KEEP_ALIVE
KEEPALIVE_S = VLLM_KEEPALIVE_S - 1.0  # a second of margin for scheduling and clock skew


def engine_http_client(
    max_connections: int, *, keepalive_s: float = KEEPALIVE_S
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with a connection for each of ``max_connections`` requests in
    flight (one per episode, so the pool never queues a turn behind another) whose idle
    connections close before the engine closes them. Timeouts are per request: the rollout
    and metrics clients set their own."""
    check_range("max_connections", max_connections, 1, 1_000_000)
    check_range("keepalive_s", keepalive_s, 0.0, VLLM_KEEPALIVE_S)
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=keepalive_s,
    )
    return httpx.AsyncClient(limits=limits)


def rollout_session(
    max_connections: int, *, keepalive_s: float = KEEPALIVE_S
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` for rollout turns: a connection for each of
    ``max_connections`` requests in flight, idle ones closed before the engine closes them.
    Timeouts are per request (the rollout client sets its own); call it inside the event
    loop that will use it."""
    check_range("max_connections", max_connections, 1, 1_000_000)
    check_range("keepalive_s", keepalive_s, 0.0, VLLM_KEEPALIVE_S)
    connector = aiohttp.TCPConnector(
        limit=max_connections, limit_per_host=0, keepalive_timeout=keepalive_s
    )
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
