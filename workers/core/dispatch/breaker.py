"""Per-engine failure tracking: an engine whose episodes keep failing is taken out of routing.

The dispatcher routes a new group to the healthy engine with the fewest episodes in flight. An
engine that fails every request at once (HTTP 500 to every completion, while its ``/metrics``
reads fine, so polls keep it up) always has none in flight, so without this it would take
every new group and the run would make no step. Here each engine has a standing:

- ``in``: routed to. Each failed episode counts; ``failures`` of them in a row (no completed
  episode between) take it ``out``.
- ``out``: no new group goes to it until its backoff has passed (``backoff_s``, doubled at each
  failed probe up to ``backoff_max_s``). Groups already on it are re-routed; its episodes in
  flight end as they end.
- ``probing``: the backoff passed and one group was routed to it (the dispatcher routes a new
  group to the least loaded routable engine, and an engine out of routing has nothing in
  flight, so the probe is the next group). An episode of the probe that fails sends it ``out``
  again with a longer backoff; any episode on it that completes brings it back ``in``.

Every failed episode counts, whatever failed (an HTTP error, a refused connection, a bad
answer, the environment): the dispatcher cannot tell an engine's fault from the environment's,
and an environment that fails every episode then fails every engine, and the run with it,
with the last error as its reason, which is what it should do. Cancelled episodes (shed,
off-policy, closed) say nothing about the engine and are not counted.

Each change is an ``EngineChange`` (out, back) with a sentence saying why; the control loop
records it as a decision, the first ``out`` since the engine last answered as an alert. An
engine is usable while it is ``in`` and the polls find a rank of it up; once no engine has
been usable for ``give_up_s``, ``gave_up`` gives the reason the run fails with. Pure: the
caller passes the time of every event.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from workers.core.validation import check_range

ERROR_CHARS = 300  # of an episode's error in a reason: enough for vLLM's JSON error's message


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    # Envoy's outlier detection ejects a host after 5 consecutive 5xx (consecutive_5xx).
    failures: int = 5
    # One poll period (prime-rl polls every 5 s): a fault that passes costs about one poll.
    backoff_s: float = 5.0
    # 5 s doubled four times: an engine that recovers is back within 80 s, and one that
    # stays broken costs a probe group at most 45 times an hour.
    backoff_max_s: float = 80.0
    # Ten minutes without a usable engine: five times the 120 s a run waits at its start for
    # engines that are not ready, room for a vLLM engine to restart and load a large model.
    give_up_s: float = 600.0

    def __post_init__(self) -> None:
        check_range("failures", self.failures, 1, 1_000_000)
        for name in ("backoff_s", "backoff_max_s", "give_up_s"):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        check_range("backoff_s", self.backoff_s, 0.001, 86_400.0)
        check_range("backoff_max_s", self.backoff_max_s, 0.001, 86_400.0)
        check_range("give_up_s", self.give_up_s, 0.001, 30 * 86_400.0)
        if self.backoff_max_s < self.backoff_s:
            raise ValueError(
                f"backoff_max_s must be >= backoff_s ({self.backoff_s}), got {self.backoff_max_s}"
            )


class Standing(StrEnum):
    IN = "in"  # routed to
    OUT = "out"  # failed too often: no new group until its backoff passes
    PROBING = "probing"  # one group sent to it after its backoff; its first result decides


class ChangeKind(StrEnum):
    OUT = "out"
    BACK = "back"


@dataclass(frozen=True, slots=True)
class EngineChange:
    """An engine taken out of routing or brought back, and why."""

    engine: str
    kind: ChangeKind
    at: float
    failures: int  # failed episodes in a row behind it (0 when back)
    backoff_s: float  # until it is probed (0 when back)
    alert: bool  # the first out since the engine last answered
    reason: str


@dataclass(slots=True)
class _Engine:
    standing: Standing = Standing.IN
    failures: int = 0  # failed episodes in a row
    trips: int = 0  # times out since it last answered: the backoff doubles with each
    retry_at: float = 0.0  # when it may be probed (out)
    probe_at: float = 0.0  # when its probe was routed (probing)
    out_since: float = 0.0
    last_error: str = ""
    down: bool = False  # the polls find no rank of it up


class EngineBreakers:
    """The standing of every engine of a run, fed each finished episode's engine and outcome."""

    def __init__(self, engines: Iterable[str], config: BreakerConfig, *, now: float) -> None:
        self.config = config
        self._engines: dict[str, _Engine] = {engine: _Engine() for engine in engines}
        self._unusable_since: float | None = None
        self._recount(now)

    def standing(self, engine: str) -> Standing:
        return self._engine(engine).standing

    def takes_new(self, engine: str, now: float) -> bool:
        """May a new group go to ``engine`` now (as far as failures go)?"""
        state = self._engine(engine)
        if state.standing is Standing.OUT:
            return now >= state.retry_at
        return state.standing is Standing.IN

    def keeps(self, engine: str) -> bool:
        """May a group already routed to ``engine`` admit more episodes there?"""
        return self._engine(engine).standing is not Standing.OUT

    def routed(self, engine: str, now: float) -> None:
        """A new group went to ``engine``: when it was out, that group is its probe."""
        state = self._engine(engine)
        if state.standing is Standing.OUT:
            state.standing, state.probe_at = Standing.PROBING, now

    def succeeded(self, engine: str, now: float) -> EngineChange | None:
        """An episode on ``engine`` completed: it answers, so it is back if it was out."""
        state = self._engine(engine)
        state.failures = 0
        if state.standing is Standing.IN:
            return None
        out_for = now - state.out_since
        state.standing, state.trips = Standing.IN, 0
        self._recount(now)
        return EngineChange(
            engine,
            ChangeKind.BACK,
            now,
            failures=0,
            backoff_s=0.0,
            alert=False,
            reason=(
                f"Engine {engine} back in routing after {out_for:.0f} s out: "
                "an episode on it completed"
            ),
        )

    def failed(
        self, engine: str, *, started_at: float, now: float, error: str
    ) -> EngineChange | None:
        """An episode on ``engine`` (started at ``started_at``) failed with ``error``."""
        state = self._engine(engine)
        state.failures += 1
        state.last_error = _short(error)
        if state.standing is Standing.IN:
            if state.failures < self.config.failures:
                return None
            state.out_since = now
            return self._out(engine, state, now)
        if state.standing is Standing.PROBING and started_at >= state.probe_at:
            return self._out(engine, state, now)
        return None  # an episode from before it went out (or before its probe): known already

    def observe(self, healthy: Iterable[str], now: float) -> None:
        """The engines the polls find up; any other known engine is down. An engine first named
        here joins, ``in``."""
        up = set(healthy)
        for engine in up:
            self._engine(engine)
        for engine, state in self._engines.items():
            state.down = engine not in up
        self._recount(now)

    def forget(self, engine: str, now: float) -> None:
        """``engine`` left the run: it counts for nothing any more, usable or not."""
        self._engines.pop(engine, None)
        self._recount(now)

    def next_probe_at(self) -> float | None:
        """When the next engine out of routing may be probed; None when none waits to be."""
        times = [
            s.retry_at for s in self._engines.values() if s.standing is Standing.OUT and not s.down
        ]
        return min(times, default=None)

    def gave_up(self, now: float) -> str | None:
        """The run's failure once no engine has been usable for ``give_up_s``; else None."""
        since = self._unusable_since
        if since is None or now - since < self.config.give_up_s:
            return None
        states = "; ".join(
            f"{engine} {_described(state)}" for engine, state in sorted(self._engines.items())
        )
        return f"no engine has been usable for {now - since:.0f} s: {states}"

    def _out(self, engine: str, state: _Engine, now: float) -> EngineChange:
        first = state.trips == 0
        state.trips += 1
        backoff = min(self.config.backoff_max_s, self.config.backoff_s * 2 ** (state.trips - 1))
        state.standing, state.retry_at = Standing.OUT, now + backoff
        self._recount(now)
        if first:
            reason = (
                f"Engine {engine} out of routing after {state.failures} failed episodes in a "
                f"row (the last: {state.last_error}); probed again in {backoff:g} s"
            )
        else:
            reason = (
                f"Engine {engine} stays out of routing: its probe failed "
                f"({state.last_error}); probed again in {backoff:g} s"
            )
        return EngineChange(
            engine, ChangeKind.OUT, now, state.failures, backoff, alert=first, reason=reason
        )

    def _engine(self, engine: str) -> _Engine:
        return self._engines.setdefault(engine, _Engine())

    def _recount(self, now: float) -> None:
        usable = any(s.standing is Standing.IN and not s.down for s in self._engines.values())
        if usable:
            self._unusable_since = None
        elif self._unusable_since is None:
            self._unusable_since = now


def _described(state: _Engine) -> str:
    if state.standing is not Standing.IN:
        return (
            f"out of routing after {state.failures} failed episodes (the last: {state.last_error})"
        )
    return "down (no rank of it answers its metrics)"


def _short(error: str) -> str:
    error = " ".join(error.split()) or "no error text"
    return error if len(error) <= ERROR_CHARS else f"{error[:ERROR_CHARS]}..."
