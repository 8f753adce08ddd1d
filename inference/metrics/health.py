"""Per-endpoint health as a pure state machine: scrape outcomes and the time in, status out.

An engine is UP when its last scrape succeeded, STALE when the last one failed but a success
is recent enough that its numbers still mean something, and DOWN when no scrape has worked
for longer than ``down_after_s`` (or ever). A failing endpoint is retried with exponential
backoff counted in polls: after ``k`` consecutive failures the next ``2**(k-1) - 1`` polls
skip it, at most ``max_skipped_polls``. Counting polls rather than seconds keeps a jittery
poll period from turning "retry at the next poll" into "retry one poll later".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workers.core.samples import EngineHealth


@dataclass(frozen=True, slots=True)
class HealthConfig:
    # Six missed 5 s polls: past this an engine's last numbers describe another load.
    down_after_s: float = 30.0
    # With 5 s polls a dead engine is still probed once a minute, so a restart is seen fast.
    max_skipped_polls: int = 11

    def __post_init__(self) -> None:
        if not self.down_after_s > 0:
            raise ValueError(f"down_after_s must be > 0 seconds, got {self.down_after_s}")
        if not 0 <= self.max_skipped_polls <= 1000:
            raise ValueError(
                f"max_skipped_polls must be within 0..1000, got {self.max_skipped_polls}"
            )


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    """What the scrapes of one endpoint have shown so far."""

    endpoint: str
    health: EngineHealth
    last_success_at: float | None = None  # clock seconds of the last good scrape
    last_attempt_at: float | None = None  # clock seconds of the last scrape tried
    error: str | None = None  # why the last scrape failed; None once one succeeds
    consecutive_failures: int = 0
    polls_to_skip: int = 0  # backoff: polls left before the next attempt
    models_error: str | None = None  # why /v1/models is not read yet; None once it is

    @property
    def due(self) -> bool:
        """Whether this poll should scrape the endpoint."""
        return self.polls_to_skip == 0


def unseen(endpoint: str) -> EndpointStatus:
    """An endpoint never scraped: DOWN until its first success, and scraped at once."""
    return EndpointStatus(endpoint, EngineHealth.DOWN)


def succeeded(status: EndpointStatus, now: float) -> EndpointStatus:
    return replace(
        status,
        health=EngineHealth.UP,
        last_success_at=now,
        last_attempt_at=now,
        error=None,
        consecutive_failures=0,
        polls_to_skip=0,
    )


def failed(
    status: EndpointStatus, now: float, error: str, config: HealthConfig, *, refused: bool = False
) -> EndpointStatus:
    """A failed scrape: STALE while its last numbers are young, DOWN past ``down_after_s``,
    and DOWN at once when ``refused`` (nothing listens: the engine's process is gone, so
    its in-flight requests are lost and new groups must go elsewhere now, not in 30 s)."""
    failures = status.consecutive_failures + 1
    return replace(
        status,
        health=EngineHealth.DOWN
        if refused
        else without_success(status.last_success_at, now, config),
        last_attempt_at=now,
        error=error,
        consecutive_failures=failures,
        polls_to_skip=min(2 ** (failures - 1) - 1, config.max_skipped_polls),
    )


def skipped(status: EndpointStatus, now: float, config: HealthConfig) -> EndpointStatus:
    """A poll that left the endpoint alone while it backs off: only its age changes, and an
    endpoint down stays down until a scrape succeeds."""
    aged = without_success(status.last_success_at, now, config)
    return replace(
        status,
        health=EngineHealth.DOWN if status.health is EngineHealth.DOWN else aged,
        polls_to_skip=max(0, status.polls_to_skip - 1),
    )


def without_success(
    last_success_at: float | None, now: float, config: HealthConfig
) -> EngineHealth:
    """The health of numbers that ``now`` did not refresh, by their age.

    Also applies to one data-parallel rank missing from a scrape that otherwise worked.
    """
    if last_success_at is None or now - last_success_at > config.down_after_s:
        return EngineHealth.DOWN
    return EngineHealth.STALE
