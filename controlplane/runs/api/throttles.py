"""The rate limit on operator commands, ``PACER_OVERRIDE_RATE`` per user, counted in Redis by
``controlplane.rate_limits`` so that it holds exactly across every web process."""

from __future__ import annotations

import math
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import UserRateThrottle

from controlplane import rate_limits


class CommandRateThrottle(UserRateThrottle):
    """DRF's per-user rate (its scope, rate format and cache key), counted atomically."""

    scope = "override"

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        name = self.get_cache_key(request, view)
        if name is None:
            return True
        assert self.num_requests is not None and self.duration is not None
        admission = rate_limits.acquire(name, self.num_requests, self.duration)
        self._wait = math.ceil(admission.wait_s)  # Retry-After is in whole seconds
        return admission.allowed

    def wait(self) -> float | None:
        return self._wait
