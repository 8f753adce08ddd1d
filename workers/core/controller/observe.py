"""Observe-only: a controller that decides in the shadow while the real cap stays put.

For trying a policy on a live run without letting it act, as Dynamo's planner does. The wrapped
controller gets every input and makes every decision; this wrapper keeps the cap fixed at the
start cap (or wherever an operator ``set`` it) and republishes each decision as not applied,
with the policy's numbers in the shadow fields. Nothing is ever shed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.base import Policy
from workers.core.controller.pool_part import PoolPart
from workers.core.controller.records import (
    MAX_CAP,
    ControllerConfig,
    ControllerStats,
    EpisodeCompletion,
)
from workers.core.decisions import Cause, Decision, DecisionKind
from workers.core.samples import LoadSample
from workers.core.validation import check_cap


class CommandRejected(ValueError):
    """An operator command that this controller cannot honour; the message says why."""


class ObserveOnly:
    """Same inputs and outputs as ``Controller``; only the start cap and ``set`` apply."""

    def __init__(self, inner: Controller) -> None:
        inner.observe_only()
        self._inner = inner
        self._applied: int | None = None

    @property
    def cap(self) -> int:
        return self._inner.cap if self._applied is None else self._applied

    @property
    def shadow(self) -> Controller:
        """The controller deciding in the shadow, for its stats and tests."""
        return self._inner

    def on_poll(
        self, samples: Iterable[LoadSample], *, inflight: int, now: float
    ) -> tuple[Decision, ...]:
        return self._observed(self._inner.on_poll(samples, inflight=inflight, now=now))

    def set_pool(self, engines: Iterable[str]) -> None:
        self._inner.set_pool(engines)

    @property
    def ceiling(self) -> int | None:
        return self._inner.ceiling

    @property
    def level(self) -> float:
        return self._inner.level

    def share(self, part: PoolPart | None, *, now: float, detail: str) -> tuple[Decision, ...]:
        return self._observed(self._inner.share(part, now=now, detail=detail))

    @property
    def completed(self) -> int:
        return self._inner.completed

    def others_completed(self, count: int, *, now: float) -> tuple[Decision, ...]:
        return self._observed(self._inner.others_completed(count, now=now))

    def on_completion(self, completion: EpisodeCompletion, *, now: float) -> tuple[Decision, ...]:
        return self._observed(self._inner.on_completion(completion, now=now))

    def set(self, cap: int, *, now: float) -> Decision:
        """Move the real cap; the shadow policy keeps its own opinion."""
        check_cap(cap, self._inner.config.min_inflight, self._inner.config.max_inflight)
        before = self.cap
        self._applied = cap
        shadow = self._inner.cap
        return Decision(
            at=now,
            kind=DecisionKind.SET,
            cause=Cause.OPERATOR,
            signal=self._inner.make_stats(now).signal,
            cap_before=before,
            cap_after=cap,
            reason=f"Set concurrency {before} -> {cap} (operator, observe-only run)",
            shadow_before=shadow,
            shadow_after=shadow,
        )

    def pin(self, cap: int, ttl: float, *, now: float) -> Decision:
        raise CommandRejected("an observe-only run holds its cap already; use set to move it")

    def release(self, *, now: float) -> Decision:
        raise CommandRejected("an observe-only run has no pin to release; use set to move it")

    def make_stats(self, now: float) -> ControllerStats:
        stats = self._inner.make_stats(now)
        return dataclasses.replace(stats, cap=self.cap, policy_cap=self._inner.cap)

    def to_json(self, now: float) -> dict[str, Any]:
        return {"observe_applied": self._applied, "shadow": self._inner.to_json(now)}

    @classmethod
    def restore(
        cls,
        config: ControllerConfig,
        policy: Policy,
        data: Mapping[str, Any],
        *,
        now: float,
        away: float = 0.0,
    ) -> tuple[ObserveOnly, Decision]:
        """Continue from ``to_json`` output. A stored applied cap outside the current bounds is
        brought inside them, as the shadow's cap is, and the decision says so."""
        if not isinstance(data, Mapping):
            raise ValueError(f"stored observe-only state must be an object, got {data!r}")
        try:
            shadow, applied = data["shadow"], data["observe_applied"]
        except KeyError as missing:
            raise ValueError(f"stored observe-only state lacks field {missing}") from None
        if applied is not None:  # checked before the policy loads anything
            check_cap(applied, 1, MAX_CAP, "observe_applied")
        inner, decision = Controller.restore(config, policy, shadow, now=now, away=away)
        wrapper = cls(inner)
        if applied is not None:
            low, high = config.min_inflight, config.max_inflight
            wrapper._applied = min(high, max(low, applied))
            if wrapper._applied != applied:
                note = f" (stored applied cap {applied} out of bounds)"
                decision = dataclasses.replace(decision, reason=decision.reason + note)
        return wrapper, wrapper._observe(decision)

    def _observed(self, decisions: tuple[Decision, ...]) -> tuple[Decision, ...]:
        return tuple(self._observe(d) for d in decisions)

    def _observe(self, decision: Decision) -> Decision:
        if decision.kind is DecisionKind.BOOTSTRAP and self._applied is None:
            self._applied = decision.cap_after
            return decision
        applied = self.cap
        return dataclasses.replace(
            decision,
            cap_before=applied,
            cap_after=applied,
            shadow_before=decision.cap_before,
            shadow_after=decision.cap_after,
            shed=0,
            applied=False,
            reason=f"Observe-only, not applied: {decision.reason}",
        )
