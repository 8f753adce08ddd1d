"""Admission pacing: how many new episodes may start in the current window.

A raised cap must not land a wall of prefills on the engines at once, so paid admissions per
window are bounded by max(group size, a fraction of the cap). A natural completion whose slot
will be refilled earns a credit that pays for its replacement: replacing a finished episode is
free, so steady turnover and a refill after a barrier are never slowed. A cancellation or a
failure earns nothing, so a mass shed cannot buy a burst of fresh prefills, nor a dead engine
a storm of instant retries. A credit is a free replacement for a slot that is empty now, so
credits never exceed the free room under the cap: a slot taken away by a cut (or never freed,
as a completion while the pool drains above the cap) takes its credit with it, which would
otherwise pay for a burst whenever the cap rose again. A run taking its part of shared engines
over from the runs it displaces is credited with the slots their episodes freed: it replaces
them, as a run replaces its own.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from workers.core.validation import check_range


@dataclass(frozen=True, slots=True)
class PacingConfig:
    window: float = 5.0  # prime-rl: admissions are paced per 5 s
    cap_fraction: float = 0.1  # prime-rl: at most cap / 10 paid new episodes per window

    def __post_init__(self) -> None:
        if not math.isfinite(self.window):
            raise ValueError(f"window must be finite, got {self.window}")
        check_range("window", self.window, 0.001, 3600.0)
        check_range("cap_fraction", self.cap_fraction, 0.001, 1.0)


class AdmissionPacer:
    """A sliding window of paid admissions, and credits earned by refilled completions.

    A completion's credit pays for the next admission whenever that comes: a refund that
    expired with the window would charge a replacement made a moment later, and the pool
    would lag its cap in steady state. ``fit`` keeps credits within the free room.
    """

    def __init__(self, config: PacingConfig | None = None) -> None:
        self.config = config or PacingConfig()
        self._window: deque[tuple[float, int]] = deque()  # (time, count) of paid admissions
        self._paid = 0  # paid admissions within the window
        self._credits = 0

    def budget(self, cap: int, group_size: int) -> int:
        """Paid admissions allowed per window at this cap."""
        return max(group_size, math.floor(cap * self.config.cap_fraction))

    def available(self, now: float, cap: int, group_size: int) -> int:
        """Admissions allowed right now: credits, then what is left of the window's budget."""
        self._expire(now)
        return self._credits + max(0, self.budget(cap, group_size) - self._paid)

    def paid(self, now: float) -> int:
        """Paid admissions within the window ending now."""
        self._expire(now)
        return self._paid

    @property
    def credits(self) -> int:
        """Free replacements banked by completions, not yet spent."""
        return self._credits

    def admit(self, now: float, count: int = 1) -> None:
        """Record admissions; credits pay first, the rest counts against the window."""
        if count <= 0:
            raise ValueError(f"admit count must be >= 1, got {count}")
        free = min(count, self._credits)
        self._credits -= free
        if count > free:
            self._window.append((now, count - free))
            self._paid += count - free

    def refund(self, count: int = 1) -> None:
        """Natural completions: their replacements are free, while their slots stay under the
        cap. ``count`` above 1: the slots other runs sharing the engines freed for this one
        (``Dispatcher.take_over``)."""
        self._credits += count

    def fit(self, room: int) -> None:
        """Drop the credits beyond ``room``, the free slots under the cap now."""
        self._credits = min(self._credits, max(0, room))

    def next_expiry(self) -> float | None:
        """When the oldest paid admission leaves the window: the budget grows then."""
        if not self._window:
            return None
        return self._window[0][0] + self.config.window

    def _expire(self, now: float) -> None:
        """Drop admissions whose window has passed, by the very sum ``next_expiry`` gives: a
        timer woken at that instant must find the budget grown (``now - window`` can round
        below the admission's time, and a clock that stands still would then spin)."""
        window = self._window
        while window and window[0][0] + self.config.window <= now:
            self._paid -= window.popleft()[1]
