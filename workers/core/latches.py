"""The two guards every policy runs behind: the drain latch and the freshness of metrics."""

from __future__ import annotations


class DrainLatch:
    """Set by a cut; while it holds, nothing cuts, trims or grows.

    Signals already in the pipeline when a cut happens (preemption counters scraped a moment
    later, a queue that takes a while to empty) describe the pool from before the cut; acting
    on them cut cap 1024 down to 8 elsewhere. So the latch releases only when the pool is at or
    under the cap on a poll that is not hard.
    """

    __slots__ = ("holding", "polls_since_release", "suppressed")

    def __init__(self, *, holding: bool = False, polls_since_release: int | None = None) -> None:
        self.holding = holding
        self.polls_since_release = polls_since_release  # None until the first release
        self.suppressed = 0  # hard polls ignored while holding

    def set(self) -> None:
        self.holding = True

    def count_poll(self) -> None:
        if self.polls_since_release is not None:
            self.polls_since_release += 1

    def release_if(self, *, hard: bool, inflight: int, cap: int) -> bool:
        """Release on this poll if it allows; True when it did."""
        if hard:
            self.suppressed += 1
            return False
        if inflight > cap:
            return False
        self.holding = False
        self.polls_since_release = 0
        return True


class Freshness:
    """Whether the numbers behind growth can be trusted.

    Growth needs the last poll to be complete (every engine fresh) and younger than the TTL.
    The freeze flag makes each loss of fresh numbers reported once, and its end reported too.
    """

    __slots__ = ("frozen", "last_complete_at", "ttl")

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.frozen = False
        self.last_complete_at: float | None = None

    def fresh(self, now: float) -> bool:
        last = self.last_complete_at
        return not self.frozen and last is not None and now - last < self.ttl

    def freeze(self) -> bool:
        """Freeze; True when this starts a freeze rather than continuing one."""
        started = not self.frozen
        self.frozen = True
        return started

    def complete(self, now: float) -> bool:
        """A complete poll arrived; True when it ends a freeze."""
        self.last_complete_at = now
        thawed = self.frozen
        self.frozen = False
        return thawed

    def stalled_for(self, now: float) -> float | None:
        """Seconds since the last complete poll, when that just passed the TTL; else None."""
        last = self.last_complete_at
        if self.frozen or last is None or now - last < self.ttl:
            return None
        self.frozen = True
        return now - last
