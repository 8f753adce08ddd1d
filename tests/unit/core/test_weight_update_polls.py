"""The controller during weight updates: an engine the run's relay paused (or just resumed)
is neither stale nor idle, its pause's preemptions and cold prefix cache are no signal, and
the throughput probe's epochs leave the pause out. Each case is checked against the same
numbers without the ``updating`` mark, which the controller does act on."""

from __future__ import annotations

from tests.unit.core.builders import complete, controller, sample
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind
from workers.core.samples import EngineHealth

# What an engine paused in keep mode with its cache cleared shows: nothing running, KV
# empty, the frozen batch waiting (preempted by the cache reset, so counted as preemptions).
PAUSED = {"kv": 0.0, "running": 0, "waiting": 12, "waiting_capacity": 12, "tokens": 0}
IDLE = {"kv": 0.0, "running": 0, "tokens": 0}  # a pause that left nothing queued: clear


def test_an_updating_engine_keeps_its_capacity_and_gives_no_numbers() -> None:
    poll = PollSummary.from_samples(
        [sample("a", kv=0.5, running=8), sample("b", updating=True, preemptions=9, **PAUSED)],
        at=1.0,
    )
    assert (poll.fresh, poll.stale, poll.down, poll.updating) == (1, 0, 0, frozenset({"b"}))
    assert (poll.preemptions, poll.waiting, poll.max_kv_usage) == (0, 0, 0.5)
    assert poll.kv_capacity_tokens == 200_000
    assert poll.complete and not poll.whole  # the probe's epoch leaves the pause out
    assert not poll.blind and not poll.paused


def test_a_pool_with_every_engine_updating_is_paused_not_blind_for_staleness() -> None:
    paused = PollSummary.from_samples(
        [
            sample("a", updating=True, **PAUSED),
            sample("b", updating=True, health=EngineHealth.STALE),
        ],
        at=1.0,
    )
    assert paused.blind and paused.paused
    stale = PollSummary.from_samples(
        [sample("a", updating=True), sample("b", health=EngineHealth.STALE)], at=1.0
    )
    assert stale.blind and not stale.paused  # a stale engine that is not updating is stale


def test_a_sync_update_longer_than_the_ttl_freezes_nothing_and_grows_nothing() -> None:
    ctl = controller(start=100)
    cap = ctl.cap
    pause = [sample("a", updating=True, **IDLE), sample("b", updating=True, **IDLE)]
    decisions = []
    for second in range(5, 45, 5):  # 40 s of reload, the TTL is 15 s
        decisions += ctl.on_poll(pause, inflight=100, now=float(second))
        decisions += complete(ctl, 20, now=second + 0.1, pool=100)
    assert decisions == [] and ctl.cap == cap
    assert not ctl.make_stats(45.0).frozen
    # Against the same pause unmarked: idle engines to grow into, or stale ones to freeze on.
    unmarked = controller(start=100)
    idle = [sample("a", **IDLE), sample("b", **IDLE)]
    unmarked.on_poll(idle, inflight=100, now=5.0)
    assert complete(unmarked, 100, now=5.1, pool=100)
    assert unmarked.cap > cap
    gone = controller(start=100)
    stale = [sample("a", health=EngineHealth.STALE), sample("b", health=EngineHealth.STALE)]
    frozen = [d for s in (5, 10, 15, 20) for d in gone.on_poll(stale, inflight=100, now=float(s))]
    assert [d.kind for d in frozen] == [DecisionKind.STALE_FREEZE]


def test_after_the_pause_growth_waits_for_a_complete_poll() -> None:
    ctl = controller(start=100)
    ctl.on_poll([sample("a", updating=True, **PAUSED)], inflight=100, now=30.0)
    assert complete(ctl, 100, now=31.0, pool=100) == []  # the last complete poll is 30 s old
    assert ctl.on_poll([sample("a")], inflight=100, now=32.0) == ()  # no thaw: never frozen
    assert complete(ctl, 100, now=33.0, pool=100)


def test_the_pause_s_own_preemptions_do_not_cut_but_the_other_engine_s_do() -> None:
    marked = controller(start=100)
    quiet = [sample("a"), sample("b", updating=True, preemptions=12, **PAUSED)]
    assert marked.on_poll(quiet, inflight=100, now=1.0) == ()
    (cut,) = marked.on_poll(
        [sample("a", preemptions=3), sample("b", updating=True, **PAUSED)], inflight=100, now=2.0
    )
    assert (cut.kind, cut.cause) == (DecisionKind.CUT, Cause.PREEMPTION)
    unmarked = controller(start=100)
    (cut,) = unmarked.on_poll([sample("a"), sample("b", preemptions=12)], inflight=100, now=1.0)
    assert cut.kind is DecisionKind.CUT


def _learned(policy: PacerPolicy) -> object:
    """A pacer controller whose prefix-hit baseline is 0.9 on both engines."""
    ctl = controller(policy, start=100)
    warm = [sample(e, kv=0.6, hits=900, queries=1000) for e in ("a", "b")]
    for second in range(1, 6):
        ctl.on_poll(warm, inflight=100, now=float(second))
    return ctl


def test_a_cold_prefix_cache_after_an_update_is_no_eviction() -> None:
    marked = _learned(PacerPolicy())
    cold = [sample("a", kv=0.6, hits=900, queries=1000)]
    cold.append(sample("b", kv=0.6, hits=0, queries=1000, updating=True))
    assert marked.on_poll(cold, inflight=100, now=6.0) == ()  # type: ignore[attr-defined]
    unmarked = _learned(PacerPolicy())
    cold[1] = sample("b", kv=0.6, hits=0, queries=1000)
    (trim,) = unmarked.on_poll(cold, inflight=100, now=6.0)  # type: ignore[attr-defined]
    assert (trim.kind, trim.cause) == (DecisionKind.TRIM, Cause.PREFIX_EVICTION)


def _epochs_around_a_sync_update(marked: bool) -> list[DecisionKind]:
    """A pacer pool of 100, then two epochs of 130 with tokens rising in proportion (it
    pays), where one poll of each epoch of 130 falls in a synchronous update: every engine
    paused, so that poll's tokens are never reported. Unmarked, the same stretch is a poll of
    engines that generated nothing (two such epochs, as a flat verdict needs two)."""
    ctl = controller(PacerPolicy(), start=130)
    kinds: list[DecisionKind] = []
    at = 0.0
    for inflight in (100, 130, 130):
        for k in range(4):
            at += 5.0
            paused = inflight == 130 and k == 1
            if paused and marked:
                engines = [sample(e, updating=True, **IDLE) for e in ("a", "b")]
            else:
                engines = [sample(e, kv=0.3, tokens=0 if paused else inflight * 10) for e in "ab"]
            kinds += [d.kind for d in ctl.on_poll(engines, inflight=inflight, now=at)]
            kinds += [d.kind for d in complete(ctl, inflight // 4 + 1, now=at + 0.1, pool=inflight)]
    at += 5.0
    closing = [sample(e, kv=0.3, tokens=1300) for e in ("a", "b")]
    kinds += [d.kind for d in ctl.on_poll(closing, inflight=130, now=at)]
    return kinds


def test_a_sync_update_in_a_probe_epoch_is_no_flat_verdict() -> None:
    """The pause's seconds are in the epoch but its tokens are not: judged, the epoch reads
    30 % more pool for 2 % more tokens and trims a pool that paid."""
    assert DecisionKind.TRIM not in _epochs_around_a_sync_update(marked=True)
    assert DecisionKind.TRIM in _epochs_around_a_sync_update(marked=False)
