"""Structured warnings about engine setups and states the controller cannot fix by itself.

Each is a record with a kind, the engine it concerns and the numbers behind it, so the
reporter can log it, store it and show it, and a test can assert it. Nothing here acts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from inference.metrics.endpoints import EngineSpec
from workers.core.samples import EngineHealth, LoadSample, endpoint_of


class WarningKind(StrEnum):
    # The cap exceeds what the engines may run at once: requests queue on the batch limit
    # before KV fills, and a KV-driven controller sees no pressure (F13).
    CAP_ABOVE_BATCH_LIMIT = "cap_above_batch_limit"
    # The engine restarted (its series' created stamps changed, or a counter went backwards)
    # and lost its running requests.
    ENGINE_RESTART = "engine_restart"
    # Requests have waited for capacity on every poll for too long: one may never fit, and
    # the engine looks merely full (F17).
    CAPACITY_WAITERS_PERSIST = "capacity_waiters_persist"


@dataclass(frozen=True, slots=True)
class MonitorWarning:
    kind: WarningKind
    at: float  # clock seconds
    engine_id: str | None  # None when the warning concerns the whole pool
    message: str
    figures: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WarningConfig:
    # Twice the 30 s (6 polls x 5 s) after which prime-rl's queue-overload cut fires: a queue
    # the controller is handling drains well before this.
    capacity_wait_bound_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.capacity_wait_bound_s <= 86_400:
            bound = self.capacity_wait_bound_s
            raise ValueError(f"capacity_wait_bound_s must be within (0, 86400] s, got {bound}")


def batch_limit_warning(
    cap: int, samples: Iterable[LoadSample], specs: Iterable[EngineSpec], now: float
) -> MonitorWarning | None:
    """Warn when ``cap`` exceeds the sum of ``max_num_seqs`` over the engines that decode.

    Silent when any such engine's ``max_num_seqs`` is not configured: an unknown limit
    cannot be compared, and a guessed one would cry wolf.
    """
    by_name = {spec.name: spec for spec in specs}
    limits = [
        spec.max_num_seqs if (spec := by_name.get(endpoint_of(s.engine_id))) else None
        for s in samples
        if s.reads_overload
    ]
    if not limits or any(limit is None for limit in limits):
        return None
    total = sum(limit for limit in limits if limit is not None)
    if cap <= total:
        return None
    return MonitorWarning(
        WarningKind.CAP_ABOVE_BATCH_LIMIT,
        now,
        None,
        f"cap {cap} exceeds {len(limits)} engines x max_num_seqs = {total}: requests will "
        "queue on the batch limit before KV fills, hiding KV pressure; raise --max-num-seqs",
        {"cap": cap, "batch_limit": total, "engines": len(limits)},
    )


class WarningTracker:
    """Turns each poll's samples into restart and persistent-waiter warnings.

    Its only state is when each engine's current stretch of capacity waiters began and
    whether that stretch was already reported, so a stretch warns once.
    """

    def __init__(self, config: WarningConfig | None = None) -> None:
        self._config = config or WarningConfig()
        self._waiting_since: dict[str, float] = {}
        self._reported: set[str] = set()

    def observe(self, samples: Iterable[LoadSample], now: float) -> tuple[MonitorWarning, ...]:
        found: list[MonitorWarning] = []
        for sample in samples:
            if sample.health is not EngineHealth.UP:
                continue  # old numbers neither start nor end a stretch
            if sample.restarted:
                found.append(_restart(sample, now))
            warning = self._waiters(sample, now)
            if warning is not None:
                found.append(warning)
        return tuple(found)

    def _waiters(self, sample: LoadSample, now: float) -> MonitorWarning | None:
        engine = sample.engine_id
        waiters = sample.capacity_waiters
        if waiters == 0 or not sample.reads_overload:
            self._waiting_since.pop(engine, None)
            self._reported.discard(engine)
            return None
        since = self._waiting_since.setdefault(engine, now)
        if now - since < self._config.capacity_wait_bound_s or engine in self._reported:
            return None
        self._reported.add(engine)
        return MonitorWarning(
            WarningKind.CAPACITY_WAITERS_PERSIST,
            now,
            engine,
            f"{engine}: {waiters} requests waiting for capacity on every poll for "
            f"{now - since:.0f} s (bound {self._config.capacity_wait_bound_s:.0f} s); a request "
            "may be too large to ever fit, or the engine is overcommitted",
            {"waiting_capacity": waiters, "seconds": now - since, "running": sample.num_running},
        )


def _restart(sample: LoadSample, now: float) -> MonitorWarning:
    return MonitorWarning(
        WarningKind.ENGINE_RESTART,
        now,
        sample.engine_id,
        f"{sample.engine_id}: the engine restarted since the previous poll (its counters were "
        "made anew); its in-flight requests were lost and this poll's deltas read as zero",
    )
