"""The HTTP client Pacer talks to engines with, for rollout turns and for metrics scrapes.

vLLM's HTTP server closes a connection that has been idle for 5 s (its
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``), and httpx keeps idle connections for 5 s as well. A request
sent on a pooled connection at the moment the engine closes it fails with a ``ReadError``
that no retry covers: a rollout turn is lost (seen in CI, one in a few hundred), a metrics
scrape 5 s after the last one marks the engine stale. Dropping idle connections a second
before the engine does removes the race.
"""

from __future__ import annotations

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
