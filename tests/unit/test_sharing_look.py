"""A host looks at its pool (and renews its run's claim) every poll period, but at least four
times in a claim's life, whatever the run's poll interval."""

from __future__ import annotations

from workers.core.sharing import CLAIM_TTL_S, LOOK_MAX_S
from workers.runtime.sharing import PoolShare


def looks(poll_interval_s: float) -> PoolShare:
    return PoolShare(
        run_id=1, owner="host", weight=1.0, priority=0, max_inflight=10,
        controller=None, orchestrator=None, engine_urls=frozenset, call=None, clock=None,  # type: ignore[arg-type]
        period_s=poll_interval_s,
    )  # fmt: skip


def test_a_run_polling_every_minute_still_renews_its_claim_four_times_in_its_life() -> None:
    slow = looks(60.0)
    assert slow.period_s == LOOK_MAX_S == CLAIM_TTL_S / 4
    assert slow.taker.renew_s == slow.period_s  # what its claim states to the other hosts
    fast = looks(0.5)
    assert fast.period_s == fast.taker.renew_s == 0.5
