"""The ceiling a pool of shared engines gives a run (``workers.core.sharing``): the most its
cap may be while other runs share its engines, None while none does."""

from __future__ import annotations

# A ceiling that moves by less than this from the one in force is not taken: the pool's
# capacity is re-measured at every arbitration, and a cap moved (and a decision recorded)
# for each few-episode change would bury the changes that matter.
SHARE_CHANGE = 0.1


class Ceiling:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: int | None = None

    def set(self, value: int | None) -> bool:
        """Take ``value`` if it differs enough from the ceiling in force; whether it did."""
        if value is not None and (isinstance(value, bool) or value < 1):
            raise ValueError(f"a ceiling must be an integer >= 1 or None, got {value!r}")
        now = self.value
        if value == now:
            return False
        if value is not None and now is not None and abs(value - now) < SHARE_CHANGE * now:
            return False
        self.value = value
        return True

    def bound(self, high: float) -> float:
        return high if self.value is None else min(high, float(self.value))
