"""The controller's state as stored between worker processes, and how it is read back.

A restarted worker must continue with the same cap and never bootstrap again. Times are stored
relative to the moment of saving, because a monotonic clock means nothing in another process.
Fresh metrics are deliberately not stored: growth waits for the new worker's first complete
poll, and the stall clock restarts at the restore.

Reading back is strict (every field of the right type and range, or a ValueError naming it);
caps that the new bounds exclude are brought inside them, and the restore decision says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from workers.core.controller.latches import DrainLatch
from workers.core.controller.overrides import Pin
from workers.core.controller.policies.base import Policy
from workers.core.controller.records import MAX_CAP, ControllerConfig
from workers.core.validation import (
    check_cap,
    finite,
    stored_bool,
    stored_count,
    stored_number,
    stored_optional_count,
)

STATE_FORMAT = 3  # bump when the stored shape changes (2: drain streak and counters; 3:
# pacer's frontier)


@dataclass(frozen=True, slots=True)
class StoredPin:
    cap: int
    remaining: float  # seconds left when saved; <= 0 for a pin that lapsed unnoticed


@dataclass(frozen=True, slots=True)
class ControllerState:
    """Everything a controller needs to resume, and nothing tied to one process."""

    policy: str  # the policy's name; state of one policy never restores into another
    level: float  # the policy's unrounded cap
    bootstrapped: bool
    draining: bool
    polls_since_release: int | None
    hard_at_cap: int  # the drain's streak of hard polls with the pool at the cap
    suppressed_cuts: int  # hard polls a drain ignored, since the start
    cuts: int
    trims: int
    turnover: float
    pin: StoredPin | None
    policy_state: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        pin = self.pin
        return {
            "format": STATE_FORMAT,
            "policy": self.policy,
            "level": self.level,
            "bootstrapped": self.bootstrapped,
            "draining": self.draining,
            "polls_since_release": self.polls_since_release,
            "hard_at_cap": self.hard_at_cap,
            "suppressed_cuts": self.suppressed_cuts,
            "cuts": self.cuts,
            "trims": self.trims,
            "turnover": self.turnover,
            "pin": None if pin is None else {"cap": pin.cap, "remaining": pin.remaining},
            "policy_state": dict(self.policy_state),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControllerState:
        """Read stored state; anything missing or malformed raises ValueError naming it."""
        if not isinstance(data, Mapping):
            raise ValueError(f"stored state must be a JSON object, got {type(data).__name__}")
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"stored state has format {data.get('format')!r}, not {STATE_FORMAT}")
        try:
            return cls(
                policy=_policy_name(data["policy"]),
                level=_level(data),
                bootstrapped=stored_bool(data, "bootstrapped"),
                draining=stored_bool(data, "draining"),
                polls_since_release=stored_optional_count(data, "polls_since_release"),
                hard_at_cap=stored_count(data, "hard_at_cap"),
                suppressed_cuts=stored_count(data, "suppressed_cuts"),
                cuts=stored_count(data, "cuts"),
                trims=stored_count(data, "trims"),
                turnover=stored_number(data, "turnover", low=0.0),
                pin=_pin(data["pin"]),
                policy_state=_policy_state(data["policy_state"]),
            )
        except KeyError as missing:
            raise ValueError(f"stored state lacks field {missing}") from None
        except ValueError as bad:
            raise ValueError(f"stored state is malformed: {bad}") from None

    def bounded(self, low: int, high: int) -> tuple[ControllerState, str]:
        """This state with its level and pin inside [low, high], and a note naming what moved
        (empty when nothing did)."""
        level = min(float(high), max(float(low), self.level))
        notes = [] if level == self.level else [f"stored level {self.level:g} out of bounds"]
        pin = self.pin
        if pin is not None and not low <= pin.cap <= high:
            notes.append(f"stored pin cap {pin.cap} out of bounds")
            pin = StoredPin(min(high, max(low, pin.cap)), pin.remaining)
        note = f" ({'; '.join(notes)})" if notes else ""
        return replace(self, level=level, pin=pin), note

    def load_policy(self, policy: Policy) -> None:
        """Hand the policy its stored state; another policy's state or a malformed one raises
        ValueError, and leaves the policy as it was: a policy loads field by field, and a
        caller that falls back to a fresh start must not start from half a stored state."""
        if self.policy != policy.name:
            raise ValueError(f"stored state is policy {self.policy!r}, not {policy.name!r}")
        before = policy.to_json()
        try:
            policy.load_json(self.policy_state)
        except KeyError as missing:
            policy.load_json(before)
            raise ValueError(f"stored policy state lacks field {missing}") from None
        except (TypeError, ValueError, ArithmeticError) as bad:
            policy.load_json(before)
            raise ValueError(f"stored policy state is malformed: {bad}") from None


@dataclass(frozen=True, slots=True)
class Kept:
    """What a controller keeps across a worker restart, in the form it runs with."""

    level: float  # the policy's unrounded cap
    bootstrapped: bool
    turnover: float
    drain: DrainLatch
    pin: Pin | None
    cuts: int
    trims: int


def save(policy: Policy, kept: Kept, *, now: float) -> dict[str, Any]:
    """The JSON a restarted worker gives to ``resume``."""
    pin, drain = kept.pin, kept.drain
    return ControllerState(
        policy=policy.name,
        level=kept.level,
        bootstrapped=kept.bootstrapped,
        draining=drain.holding,
        polls_since_release=drain.polls_since_release,
        hard_at_cap=drain.hard_at_cap,
        suppressed_cuts=drain.suppressed,
        cuts=kept.cuts,
        trims=kept.trims,
        turnover=kept.turnover,
        pin=None if pin is None else StoredPin(pin.cap, pin.until - now),
        policy_state=policy.to_json(),
    ).to_json()


def resume(
    config: ControllerConfig,
    policy: Policy,
    data: Mapping[str, Any],
    *,
    now: float,
    away: float = 0.0,
) -> tuple[Kept, str]:
    """Read what ``save`` wrote ``away`` seconds ago, for ``policy`` under ``config``;
    malformed data raises ValueError naming the fault, and the policy has its state back when
    this returns.

    Stored caps outside the current bounds are brought inside them; the note (for the restore
    decision) says which. A pin's time runs while no worker hosts the run: what was left of it
    when saved, less ``away`` (the caller's wall-clock reading, as no monotonic clock spans
    two processes), so it lapses at its TTL from when it was made. A pin that lapsed
    meanwhile, or unnoticed, is kept until the next input, which reports its expiry exactly
    as the stored controller would have.
    """
    state, note = ControllerState.from_json(data).bounded(config.min_inflight, config.max_inflight)
    state.load_policy(policy)
    pin = state.pin
    kept = Kept(
        level=state.level,
        bootstrapped=state.bootstrapped,
        turnover=state.turnover,
        drain=DrainLatch(
            holding=state.draining,
            polls_since_release=state.polls_since_release,
            hard_at_cap=state.hard_at_cap,
            suppressed=state.suppressed_cuts,
        ),
        pin=None if pin is None else Pin(pin.cap, now + max(0.0, pin.remaining - max(0.0, away))),
        cuts=state.cuts,
        trims=state.trims,
    )
    return kept, note


def _policy_name(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"policy must be a string, got {value!r}")
    return value


def _level(data: Mapping[str, Any]) -> float:
    value = data["level"]
    level = finite(value)
    if level is None or level <= 0:
        raise ValueError(f"level must be a finite number > 0, got {value!r}")
    return level


def _pin(value: object) -> StoredPin | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"pin must be null or an object with cap and remaining, got {value!r}")
    try:
        return StoredPin(check_cap(value["cap"], 1, MAX_CAP), stored_number(value, "remaining"))
    except ValueError as bad:
        raise ValueError(f"pin {bad}") from None


def _policy_state(value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"policy_state must be an object, got {value!r}")
    return dict(value)
