"""The controller's state as stored between worker processes.

A restarted worker must continue with the same cap and never bootstrap again. Times are stored
relative to the moment of saving, because a monotonic clock means nothing in another process.
Fresh metrics are deliberately not stored: growth waits for the new worker's first poll.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STATE_FORMAT = 1  # bump when the stored shape changes


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
            "turnover": self.turnover,
            "pin": None if pin is None else {"cap": pin.cap, "remaining": pin.remaining},
            "policy_state": dict(self.policy_state),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControllerState:
        """Read stored state; anything missing or malformed raises ValueError naming it."""
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"stored state has format {data.get('format')!r}, not {STATE_FORMAT}")
        try:
            level = float(data["level"])
            if not (math.isfinite(level) and level > 0):
                raise ValueError(f"level {level} must be a finite number > 0")
            since = data["polls_since_release"]
            pin = data["pin"]
            return cls(
                policy=str(data["policy"]),
                level=level,
                bootstrapped=bool(data["bootstrapped"]),
                draining=bool(data["draining"]),
                polls_since_release=None if since is None else int(since),
                turnover=float(data["turnover"]),
                pin=None if pin is None else StoredPin(int(pin["cap"]), float(pin["remaining"])),
                policy_state=dict(data["policy_state"]),
            )
        except KeyError as missing:
            raise ValueError(f"stored state lacks field {missing}") from None
        except (TypeError, ValueError) as bad:
            raise ValueError(f"stored state is malformed: {bad}") from None
