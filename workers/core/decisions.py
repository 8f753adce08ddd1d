"""The controller's output: one record per change of the cap or of the controller's mode.

Every record says what happened (kind), why (a machine-readable cause and a sentence), the cap
before and after, how many episodes to shed, and the numbers behind it. The reporter stores,
pushes and exports these records; the run id and training step are attached there, since the
controller does not know them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from workers.core.validation import (
    finite,
    stored_bool,
    stored_count,
    stored_number,
    stored_optional_count,
)


class Signal(StrEnum):
    """How loaded the engines look on the latest poll; the worst reading wins."""

    CLEAR = "clear"  # no sign of pressure: growth may proceed
    SOFT = "soft"  # early pressure: hold the cap
    HARD = "hard"  # preemption or persistent capacity queue: cut
    UNKNOWN = "unknown"  # no fresh numbers from any engine


class Cause(StrEnum):
    """The single reason a decision names, readable by machines and dashboards."""

    CLEAR = "clear"  # engines clear, the cap is used
    START = "start"  # the start cap was set
    RESTORED = "restored"  # state reloaded after a worker restart
    PREEMPTION = "preemption"  # an engine preempted requests since the previous poll
    QUEUE_OVERLOAD = "queue overload"  # capacity queue above a share of running, persistently
    QUEUE_RISING = "queue rising"  # capacity queue growing poll after poll
    WAITING = "waiting"  # an engine had waiting requests on consecutive polls
    KV_HIGH = "kv high"  # KV usage above the level where growth stops
    KV_PRESSURE = "kv pressure"  # KV usage above the level where the cap is trimmed
    PREFIX_EVICTION = "prefix eviction"  # prefix-cache hit rate fell: idle contexts evicted
    THROUGHPUT_FLAT = "throughput flat"  # a larger pool stopped producing more tokens
    THROUGHPUT_RISING = "throughput rising"  # past the KV target, a larger pool still paid
    PROBING = "probing"  # past the KV line, held an epoch to learn whether the larger pool pays
    FRONTIER = "frontier"  # preempting or KV-full at a pool shown to pay: held (under it: regrown)
    LATENCY = "latency"  # per-token latency rose against its long-term level (gradient2)
    KNEE = "knee"  # the cap reached the ceiling under the pool that last overloaded the engines
    DRAINED = "drained"  # the pool drained below the cap after a cut, with no overload
    STALE = "stale"  # metrics missing or too old to act on
    FRESH = "fresh"  # metrics complete and recent again
    OPERATOR = "operator"  # an operator command
    REQUESTS_OVER_PERMITS = "requests over permits"  # engines hold requests no episode owns
    PIN_EXPIRED = "pin expired"  # an operator pin reached its time limit
    EVAL = "eval"  # an evaluation wave joined the pool
    ENGINE_FAILING = "engine failing"  # an engine's episodes kept failing
    ENGINE_ANSWERS = "engine answers"  # an episode on an engine out of routing completed
    WEIGHTS = "weights"  # the trainer acknowledged a step with new weights
    ENGINE_LOST = "engine lost"  # an engine was down past engine_lost_s: the pool is smaller
    ENGINE_BACK = "engine back"  # a lost engine is up again: the pool is its size again
    ENGINE_JOINED = "engine joined"  # an operator added an engine to the run: a larger pool
    ENGINE_LEFT = "engine left"  # an operator took an engine out of the run: a smaller pool
    SHARE = "share"  # the runs sharing the engines gave this one another ceiling


class DecisionKind(StrEnum):
    """What a decision did."""

    BOOTSTRAP = "bootstrap"  # the start cap, set once per run
    RESTORE = "restore"  # the controller continued from stored state
    GROW = "grow"  # the cap rose by growth on completions
    TRIM = "trim"  # proportional reduction on KV pressure
    CUT = "cut"  # multiplicative reduction on a hard signal; starts a drain
    DRAIN_RELEASE = "drain-release"  # the drain after a cut ended
    PIN = "pin"  # an operator holds the cap
    SET = "set"  # an operator moved the cap once
    RELEASE = "release"  # an operator let go of a pin
    PIN_EXPIRED = "pin-expired"  # a pin's time limit passed
    STALE_FREEZE = "stale-freeze"  # metrics missing or too old: the cap is held
    STALE_THAW = "stale-thaw"  # metrics fresh again: adaptation resumes
    RECONCILE = "reconcile"  # engine requests and permits disagree: the cap holds, an alert
    EVAL_WAVE = "eval-wave"  # the orchestrator started an evaluation wave in the shared pool
    ENGINE_OUT = "engine-out"  # an engine's episodes kept failing: no new group goes to it
    ENGINE_BACK = "engine-back"  # an engine out of routing answered: it takes groups again
    WEIGHTS = "weights"  # an engine was brought to a new policy version (or failed to be)
    RESCALE = "rescale"  # the pool's KV capacity changed (engine lost, back, joined, left)
    ENGINE_JOIN = "engine-join"  # an operator added an engine: new groups go to it at once
    ENGINE_DRAIN = "engine-drain"  # an operator took an engine out: no new group, it drains
    ENGINE_LEAVE = "engine-leave"  # a draining engine left the run (drained, or its deadline)
    SHARE = "share"  # the run's ceiling in a pool of engines other runs share changed


@dataclass(frozen=True, slots=True)
class Decision:
    """One controller decision and the figures that justified it (the orchestrator adds one
    kind of its own: an evaluation wave joining the pool, since it shares the cap; the
    control loop adds engines taken out of routing and brought back).

    While an operator pin holds the cap (or an observe-only run keeps it fixed), ``cap_*`` is
    the cap in force and ``shadow_*`` is what the policy computes meanwhile; otherwise the
    shadow fields are None. ``applied`` is False for an observe-only decision that did not
    touch the real cap.
    """

    at: float  # clock seconds of the decision
    kind: DecisionKind
    cause: Cause
    signal: Signal
    cap_before: int
    cap_after: int
    reason: str  # one sentence for people, e.g. "Decreased concurrency 500 -> 400 (preemption)"
    shed: int = 0  # in-flight episodes to cancel now
    shadow_before: int | None = None
    shadow_after: int | None = None
    alert: bool = False  # needs an operator's attention
    applied: bool = True
    figures: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # The engine a decision is about (a weight update, an engine out of routing or back);
    # empty for the run's own cap decisions. Not a figure: figures are numbers, for charts.
    engine: str = ""

    def __post_init__(self) -> None:
        if self.cap_before < 0 or self.cap_after < 0:
            raise ValueError(f"caps must be >= 0, got {self.cap_before} -> {self.cap_after}")
        if self.shed < 0:
            raise ValueError(f"shed must be >= 0, got {self.shed}")
        if not isinstance(self.figures, MappingProxyType):
            object.__setattr__(self, "figures", MappingProxyType(dict(self.figures)))

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "kind": self.kind.value,
            "cause": self.cause.value,
            "signal": self.signal.value,
            "cap_before": self.cap_before,
            "cap_after": self.cap_after,
            "reason": self.reason,
            "shed": self.shed,
            "shadow_before": self.shadow_before,
            "shadow_after": self.shadow_after,
            "alert": self.alert,
            "applied": self.applied,
            "figures": dict(self.figures),
            "engine": self.engine,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        """Rebuild a decision; a missing or malformed field raises ValueError naming it.
        Strict, as stored state is: ``bool("false")`` is True and ``int(99.9)`` is 99."""
        try:
            return cls(
                at=stored_number(data, "at"),
                kind=DecisionKind(data["kind"]),
                cause=Cause(data["cause"]),
                signal=Signal(data["signal"]),
                cap_before=stored_count(data, "cap_before"),
                cap_after=stored_count(data, "cap_after"),
                reason=_text(data, "reason"),
                shed=stored_count(data, "shed"),
                shadow_before=stored_optional_count(data, "shadow_before"),
                shadow_after=stored_optional_count(data, "shadow_after"),
                alert=stored_bool(data, "alert"),
                applied=stored_bool(data, "applied"),
                figures=_figures(data["figures"]),
                # Absent from what was stored before decisions named engines.
                engine=_text(data, "engine") if "engine" in data else "",
            )
        except KeyError as missing:
            raise ValueError(f"decision JSON lacks field {missing}") from None
        except ValueError as bad:
            raise ValueError(f"decision JSON is malformed: {bad}") from None


def change_reason(before: int, after: int, cause: Cause, detail: str) -> str:
    """The log sentence for a cap change, in the form operators of the reference know."""
    if after < before:
        text = f"Decreased concurrency {before} -> {after} ({cause.value})"
    elif after > before:
        text = f"Increased concurrency {before} -> {after} ({cause.value})"
    else:
        text = f"Concurrency stays {after} ({cause.value})"
    return f"{text}: {detail}" if detail else text


def _text(data: Mapping[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _figures(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ValueError(f"figures must be an object of numbers, got {value!r}")
    figures: dict[str, float] = {}
    for name, number in value.items():
        checked = finite(number)
        if checked is None:
            raise ValueError(f"figures.{name} must be a finite number, got {number!r}")
        figures[str(name)] = checked
    return figures
