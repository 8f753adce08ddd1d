"""The operator's hold on the cap: a pin with a time limit, and the checks on command input."""

from __future__ import annotations

from dataclasses import dataclass

from workers.core.validation import check_cap, check_seconds

# A week: a hold longer than that is a fixed cap, which belongs in the run's config.
MAX_PIN_TTL_S = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Pin:
    """An operator's hold on the cap."""

    cap: int
    until: float  # clock seconds when the hold lapses


class Overrides:
    """Holds at most one pin; refuses commands outside the controller's bounds."""

    __slots__ = ("high", "low", "pin")

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high
        self.pin: Pin | None = None

    def check_cap(self, cap: int) -> None:
        check_cap(cap, self.low, self.high)

    def hold(self, cap: int, ttl: float, now: float) -> None:
        """Pin ``cap`` for ``ttl`` seconds; bad input raises ValueError and changes nothing."""
        self.check_cap(cap)
        seconds = check_seconds("pin ttl", ttl)
        if seconds > MAX_PIN_TTL_S:
            raise ValueError(f"pin ttl must be at most {MAX_PIN_TTL_S:g} s (a week), got {ttl!r}")
        self.pin = Pin(cap, now + seconds)

    def drop(self) -> Pin | None:
        """End the pin, if any; returns what was held."""
        held, self.pin = self.pin, None
        return held

    def due(self, now: float) -> bool:
        """Whether a pin is held and its time is up."""
        return self.pin is not None and now >= self.pin.until

    def lapse(self, now: float) -> Pin | None:
        """End the pin if its time is up; returns it when it just lapsed."""
        return self.drop() if self.due(now) else None

    def seconds_left(self, now: float) -> float | None:
        return None if self.pin is None else max(0.0, self.pin.until - now)
