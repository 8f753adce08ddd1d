"""How long a host may still act on its run, by its own clock.

The lease in the database says who hosts a run; but a host cannot ask the database whether
it still holds the lease when the database is the thing that stopped answering (a hung
connection, a partition that resets nothing). So each host keeps a local deadline: the moment
its last successful renewal was *sent*, plus the lease's TTL, less a margin. The database set
that renewal's expiry later than it was sent, so the host's deadline always falls before the
moment another host may take the run, whatever the database does meanwhile. Past the deadline
the host writes no file, no row and sends no engine request; each batch write checks the
tenure right before its rename.

``Tenure.keep`` is the heartbeat that renews it: each renewal runs on its own (in a database
thread of the lease's own, so a flush stuck on a hung connection cannot hold it up) and is
never waited on, so the deadline runs on whether or not the database answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from workers.core.clock import Clock
from workers.runtime.lease import LEASE_RENEW_S, LEASE_TTL_S

logger = logging.getLogger(__name__)

# The host stops this long before its lease could expire: it covers a batch's rename after
# its last check (milliseconds) and the drift between the host's clock and the database's
# (NTP keeps it far below a second), with room to spare.
LEASE_MARGIN_S = 5.0
CHECK_S = 0.5  # how often the heartbeat looks at the deadline (well inside the margin)
RAN_OUT = "the lease could not be renewed in time"
TAKEN = "another host holds the lease now"


class TenureLost(Exception):
    """The host's tenure ended: whatever it was about to write is not its to write."""


class Tenure:
    def __init__(self, clock: Clock, *, taken_at: float, ttl_s: float = LEASE_TTL_S) -> None:
        """``taken_at``: the clock reading just before the lease was asked for."""
        self._clock = clock
        self._ttl_s = ttl_s
        self._deadline = taken_at + ttl_s - LEASE_MARGIN_S
        self.lost: str | None = None  # why the tenure ended early, when it did

    @property
    def deadline(self) -> float:
        return self._deadline

    @property
    def held(self) -> bool:
        return self.lost is None and self._clock.now() < self._deadline

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` succeeded."""
        self._deadline = max(self._deadline, sent_at + self._ttl_s - LEASE_MARGIN_S)

    def lose(self, reason: str) -> None:
        """End the tenure now: another host holds the lease."""
        if self.lost is None:
            self.lost = reason

    def check(self) -> None:
        """Raise ``TenureLost`` unless the tenure is held."""
        if not self.held:
            raise TenureLost(self.lost or RAN_OUT)

    async def keep(
        self,
        renew: Callable[[], Awaitable[bool]],
        *,
        on_check: Callable[[], None] = lambda: None,
    ) -> str:
        """Renew every ``LEASE_RENEW_S`` until the tenure ends; why it ended. ``renew`` starts
        one renewal (True: renewed, False: another host holds the lease); ``on_check`` runs at
        every look at the deadline (the host's shutdown check)."""
        renewal: asyncio.Future[bool] | None = None
        sent_at = next_at = self._clock.now()
        while True:
            await asyncio.sleep(CHECK_S)
            on_check()
            if renewal is not None and renewal.done():
                try:
                    if renewal.result():
                        self.renewed(sent_at)
                    else:
                        self.lose(TAKEN)
                except Exception:
                    logger.warning("tenure: lease renewal failed", exc_info=True)
                renewal = None
            if not self.held:
                return self.lost or RAN_OUT
            now = self._clock.now()
            if renewal is None and now >= next_at:
                sent_at, next_at = now, now + LEASE_RENEW_S
                renewal = asyncio.ensure_future(renew())
