"""What the controller remembers across polls besides the policy's own state: the drain latch,
the freshness of metrics, and the count of engine requests that no permit accounts for."""

from __future__ import annotations


class DrainLatch:
    """Set by a cut; while it holds, nothing cuts, trims or grows.

    Signals already in the pipeline when a cut happens (preemption counters scraped a moment
    later, a queue that takes a while to empty) describe the pool from before the cut; acting
    on them cut cap 1024 down to 8 elsewhere. So the latch releases when the pool is at or
    under the cap on a complete poll that is not hard. Complete, because the engine that
    overloaded is the likeliest to miss a scrape, and its next good one still reports the
    preemptions from before the cut: released without it, the latch would let them cut again.

    That rule alone deadlocks when the cut was not deep enough: a cap the engines cannot carry
    keeps them preempting, no poll is ever clear, and the latch holds the overload forever (a
    real vLLM engine held 22 episodes where 8 fit for 84 s, preempting all along). Once the pool
    has sat at or under the cap for ``stuck_polls`` hard polls in a row, every one of those
    polls measured the cap's own pool, not the backlog of the cut, so the latch releases and
    the next hard poll may cut again (escalated, being soon after a release).
    """

    __slots__ = ("hard_at_cap", "holding", "polls_since_release", "suppressed")

    def __init__(
        self,
        *,
        holding: bool = False,
        polls_since_release: int | None = None,
        hard_at_cap: int = 0,
        suppressed: int = 0,
    ) -> None:
        self.holding = holding
        self.polls_since_release = polls_since_release  # None until the first release
        self.suppressed = suppressed  # hard polls ignored while holding
        # Consecutive hard polls with the pool already at or under the cap: kept across a
        # restart, or each restart of a worker would give a stuck drain more polls.
        self.hard_at_cap = hard_at_cap

    def set(self) -> None:
        self.holding = True
        self.hard_at_cap = 0

    def count_poll(self) -> None:
        if self.polls_since_release is not None:
            self.polls_since_release += 1

    def release(
        self,
        *,
        hard: bool,
        complete: bool,
        inflight: int,
        cap: int,
        stuck_polls: int = 0,
        shadow: bool = False,
    ) -> str | None:
        """Release on this poll if it allows; when it did, why.

        A ``shadow`` cap's sheds are not carried out (a pin holds the real cap, or the run only
        observes), so the pool it is judged on is the one it would have had: at most its cap.
        ``stuck_polls`` 0 never releases on hard polls, as the reference controller.
        """
        pool = min(inflight, cap) if shadow else inflight
        would = " (the pool the policy would have had)" if shadow else ""
        if hard:
            self.suppressed += 1
            self.hard_at_cap = self.hard_at_cap + 1 if pool <= cap else 0
            if not stuck_polls or self.hard_at_cap < stuck_polls:
                return None
            self._open()
            return (
                f"pool {pool} <= cap {cap}{would} for {stuck_polls} polls, still overloaded: "
                "the cap itself is too high"
            )
        if pool > cap or not complete:
            return None
        self._open()
        return f"pool {pool} <= cap {cap}{would}, no overload"

    def _open(self) -> None:
        self.holding = False
        self.polls_since_release = 0
        self.hard_at_cap = 0


class Freshness:
    """Whether the numbers behind growth can be trusted, and since when they cannot.

    Growth needs the last poll to be complete (every engine fresh) and younger than the TTL.
    The stall clock runs from the last complete poll, or, before there was one, from the
    controller's start or restore: metrics that never arrive must raise an alert too. The
    freeze flag makes each loss of fresh numbers reported once, and its end reported too.
    """

    __slots__ = ("frozen", "last_complete_at", "since", "ttl")

    def __init__(self, ttl: float, *, since: float | None = None) -> None:
        self.ttl = ttl
        self.frozen = False
        self.last_complete_at: float | None = None
        self.since = since  # when the stall clock started; None until the first input

    def start(self, now: float) -> None:
        """Start the stall clock, unless it runs already."""
        if self.since is None:
            self.since = now

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
        self.last_complete_at = self.since = now
        thawed = self.frozen
        self.frozen = False
        return thawed

    def paused(self, now: float) -> None:
        """A poll of a pool paused for a weight update: no numbers, and none missing. The
        stall clock restarts (a freeze in force stays); growth still waits for a complete
        poll, so the first completions after the resume cannot grow on the pause's reading."""
        if not self.frozen:
            self.since = now

    def stalled(self, now: float) -> bool:
        """Whether the TTL passed without a complete poll and no freeze has reported it yet."""
        since = self.since
        return not self.frozen and since is not None and now - since >= self.ttl

    def freeze_if_stalled(self, now: float) -> str | None:
        """Freeze when ``stalled``, and say for the decision how long the stall has lasted."""
        if not self.stalled(now):
            return None
        self.frozen = True
        assert self.since is not None
        return f"no complete poll for {now - self.since:.1f} s (ttl {self.ttl:g} s)"


class RequestWatch:
    """Counts consecutive polls whose engines hold more requests than there are permits.

    Every episode holds one permit and at most one engine request at a time, so requests over
    the permits are requests nobody will read: aborts that never reached the engine, or
    another client on the same engines. Either way they hold KV the cap does not see. One
    poll over can be timing (a scrape a moment older than the permit count); a stretch of
    ``polls`` is not, and is reported once.
    """

    __slots__ = ("polls", "streak")

    def __init__(self, polls: int) -> None:
        self.polls = polls
        self.streak = 0

    def observe(self, requests: int, permits: int) -> str | None:
        """Count one poll; on the poll that completes a stretch, the alert's reason."""
        self.streak = self.streak + 1 if requests > permits else 0
        if self.streak != self.polls:
            return None
        return (
            f"Engines hold {requests} requests against {permits} permits for {self.polls} "
            "polls: requests no episode owns keep KV the cap cannot see"
        )
