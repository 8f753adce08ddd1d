"""The fixed policy never moves the cap, yet reads the load like the reference."""

from __future__ import annotations

from tests.unit.core.builders import complete, controller, sample
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.decisions import Cause, Signal


def test_fixed_never_grows_trims_or_cuts() -> None:
    ctl = controller(FixedPolicy(), start=64)
    assert complete(ctl, 500, now=1.0) == []
    assert ctl.on_poll([sample(kv=0.97)], inflight=64, now=2.0) == ()
    assert ctl.on_poll([sample(preemptions=9)], inflight=64, now=3.0) == ()
    assert ctl.cap == 64


def test_fixed_still_reports_the_reference_signal() -> None:
    ctl = controller(FixedPolicy(), start=64)
    ctl.on_poll([sample(preemptions=9)], inflight=64, now=1.0)
    stats = ctl.make_stats(1.0)
    assert (stats.signal, stats.cause, stats.growth) == (Signal.HARD, Cause.PREEMPTION, 1.0)
