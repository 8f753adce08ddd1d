"""The knee: the pool that last overloaded the engines, and the ceiling it sets under itself.

After a cut, growth stops ``margin`` under the pool that overloaded, as TCP's slow-start
threshold does after a loss, for ``memory`` turnovers. A knee is disproved sooner by a whole
epoch held at its ceiling with the engines clear: no preemption, and KV under ``clear_kv`` on
average, read as if every episode in flight ran at once (a pool just under a true knee runs its
cache near the target; on the real engine, a pool of 8 on a cache of 8 read 0.7 with some
episodes between requests, dropped its knee and grew into preemptions). Such a knee came from
the pool's make-up then (a burst of long episodes, runs sharing the engines changing hands),
not from its size, and kept for its whole memory it would hold the pool under what the engines
take.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.kv_window import all_running_kv
from workers.core.controller.polls import PollSummary
from workers.core.validation import stored_number, stored_optional_number

# A pool within a group of the ceiling (at 100 or so: 5 %) is held by it, for the test that
# disproves the knee.
KNEE_HELD = 0.95


class Knee:
    """Where the cliff was, for how long it is believed, and the test that can disprove it."""

    def __init__(self, *, margin: float, memory: float, clear_kv: float) -> None:
        self._margin = margin
        self._memory = memory
        self._clear_kv = clear_kv
        self.level: float | None = None  # the pool that overloaded
        self._since = 0.0  # the turnover it did
        self._epoch: int | None = None  # the epoch the knee is being tested over
        self._clear = False  # ...whether every poll of it held the pool at the ceiling clear
        self._kv: list[float] = []  # ...and the KV usage of its polls

    @property
    def ceiling(self) -> float | None:
        return None if self.level is None else self._margin * self.level

    def set(self, inflight: float, turnover: float) -> None:
        self.level, self._since = inflight, turnover

    def drop(self) -> None:
        self.level = None

    def observe(self, poll: PollSummary, pool: PoolView) -> None:
        """Forget the knee past its memory, or drop it when the epoch that ended disproved it."""
        if self.level is not None and pool.turnover - self._since > self._memory:
            self.level = None
        ceiling = self.ceiling
        if ceiling is None:
            self._epoch = None
            return
        epoch = math.floor(pool.turnover)
        if epoch != self._epoch:
            kv = self._kv
            if self._clear and kv and sum(kv) / len(kv) < self._clear_kv:
                self.level = self._epoch = None
                return
            self._epoch, self._clear, self._kv = epoch, True, []
        self._kv.append(all_running_kv(poll, pool.inflight))
        held = pool.inflight >= KNEE_HELD * ceiling
        self._clear = self._clear and held and poll.preemptions == 0

    def to_json(self) -> dict[str, Any]:
        return {"knee": self.level, "knee_turnover": self._since}

    def load_json(self, data: Mapping[str, Any]) -> None:
        self.level = stored_optional_number(data, "knee", low=0.0)
        self._since = stored_number(data, "knee_turnover", low=0.0)
