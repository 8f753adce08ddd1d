"""The rate limit on operator commands, counted per user in Redis (``caches["throttle"]``),
so it holds across every web process. Rate: ``PACER_OVERRIDE_RATE`` (settings)."""

from __future__ import annotations

from typing import Any

from django.core.cache import caches
from rest_framework.throttling import UserRateThrottle


class CommandRateThrottle(UserRateThrottle):
    scope = "override"

    @property  # type: ignore[override]
    def cache(self) -> Any:  # looked up per request, so tests can point it elsewhere
        return caches["throttle"]
