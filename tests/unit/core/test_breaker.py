"""The engines' breakers alone (pure, times given), and through the dispatcher's routing."""

from __future__ import annotations

import pytest

from tests.unit.core.dispatch_harness import MakeHarness
from workers.core.dispatch.breaker import BreakerConfig, ChangeKind, EngineBreakers, Standing
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.records import DispatcherConfig

CONFIG = BreakerConfig(failures=3, backoff_s=5.0, backoff_max_s=20.0, give_up_s=60.0)


def fail(b: EngineBreakers, engine: str, times: int, at: float, started_at: float = 0.0):
    changes = [
        b.failed(engine, started_at=started_at, now=at, error="HTTP 500 Internal Server Error")
        for _ in range(times)
    ]
    return [c for c in changes if c is not None]


def test_consecutive_failures_take_an_engine_out_and_a_success_between_resets_the_count() -> None:
    b = EngineBreakers(["a", "b"], CONFIG, now=0.0)
    assert fail(b, "a", 2, at=1.0) == []
    assert b.succeeded("a", 1.5) is None  # in already: only the count starts again
    assert fail(b, "a", 2, at=2.0) == []
    [out] = fail(b, "a", 1, at=3.0)
    assert (out.engine, out.kind, out.failures, out.backoff_s, out.alert) == (
        "a",
        ChangeKind.OUT,
        3,
        5.0,
        True,
    )
    assert "3 failed episodes in a row" in out.reason and "HTTP 500" in out.reason
    assert b.standing("a") is Standing.OUT and not b.takes_new("a", 7.9)
    assert not b.keeps("a")  # groups on it go elsewhere
    assert b.takes_new("b", 3.0)


def test_after_its_backoff_one_group_probes_it_and_a_failed_probe_doubles_the_backoff() -> None:
    b = EngineBreakers(["a"], CONFIG, now=0.0)
    fail(b, "a", 3, at=10.0)
    assert b.next_probe_at() == 15.0
    assert b.takes_new("a", 15.0)
    b.routed("a", 15.0)
    assert b.standing("a") is Standing.PROBING
    assert not b.takes_new("a", 15.0) and b.keeps("a")  # one probe group, which may go on
    # A late failure of an episode from before the probe is no verdict on it.
    assert fail(b, "a", 1, at=15.5, started_at=9.0) == []
    assert b.standing("a") is Standing.PROBING
    backoffs = []
    at = 15.0
    for _ in range(4):
        [again] = fail(b, "a", 1, at=at + 1, started_at=at)
        assert again.kind is ChangeKind.OUT and not again.alert and "probe failed" in again.reason
        backoffs.append(again.backoff_s)
        at = b.next_probe_at()  # type: ignore[assignment]
        b.routed("a", at)
    assert backoffs == [10.0, 20.0, 20.0, 20.0]  # doubled, up to backoff_max_s


def test_an_engine_that_answers_comes_back_in_and_starts_afresh() -> None:
    b = EngineBreakers(["a", "b"], CONFIG, now=0.0)
    fail(b, "a", 3, at=10.0)
    b.routed("a", 15.0)
    back = b.succeeded("a", 16.0)
    assert back is not None and back.kind is ChangeKind.BACK and not back.alert
    assert back.reason == "Engine a back in routing after 6 s out: an episode on it completed"
    assert b.standing("a") is Standing.IN
    [out] = fail(b, "a", 3, at=20.0)
    assert out.alert and out.backoff_s == 5.0  # the first trip since it answered


def test_the_run_gives_up_once_no_engine_has_been_usable_for_give_up_s() -> None:
    b = EngineBreakers(["a", "b"], CONFIG, now=0.0)
    fail(b, "a", 3, at=10.0)
    assert b.gave_up(1000.0) is None  # b still serves
    fail(b, "b", 3, at=20.0)
    assert b.gave_up(79.9) is None
    reason = b.gave_up(80.0)
    assert reason is not None and reason.startswith("no engine has been usable for 60 s: ")
    assert "a out of routing after 3 failed episodes" in reason and "HTTP 500" in reason
    b.routed("b", 25.0)
    b.succeeded("b", 81.0)
    assert b.gave_up(200.0) is None  # usable again: the clock starts afresh


def test_engines_the_polls_find_down_count_as_unusable_and_are_not_probed() -> None:
    b = EngineBreakers(["a", "b"], CONFIG, now=0.0)
    fail(b, "a", 3, at=10.0)
    b.observe(["a"], now=12.0)  # b down: no engine usable from now
    assert b.next_probe_at() == 15.0
    b.observe([], now=13.0)
    assert b.next_probe_at() is None  # a down too: nothing to probe until a poll finds it
    assert b.gave_up(71.9) is None
    reason = b.gave_up(72.0)
    assert reason is not None and "b down" in reason
    b.observe(["b"], now=80.0)
    assert b.gave_up(1000.0) is None


def test_a_long_error_is_cut_in_the_reason() -> None:
    b = EngineBreakers(["a"], BreakerConfig(failures=1), now=0.0)
    out = b.failed("a", started_at=0.0, now=1.0, error="x" * 5000)
    assert out is not None and len(out.reason) < 500


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"failures": 0}, "failures must be"),
        ({"backoff_s": 0.0}, "backoff_s must be"),
        ({"backoff_s": 10.0, "backoff_max_s": 5.0}, "backoff_max_s must be >= backoff_s"),
        ({"give_up_s": float("inf")}, "give_up_s must be finite"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BreakerConfig(**fields)


# -- through the dispatcher ------------------------------------------------------------------

ROUTED = DispatcherConfig(
    pacing=PacingConfig(window=0.001, cap_fraction=1.0),  # no pacing after 1 ms
    breaker=BreakerConfig(failures=2, backoff_s=5.0, backoff_max_s=20.0),
)


async def test_a_failing_engine_listed_first_stops_taking_groups_and_is_probed_later(
    make: MakeHarness,
) -> None:
    h = make(cap=2, config=ROUTED, engines=("bad", "good"))
    changes = []
    h.dispatcher._on_engine = changes.append
    for n in range(2):
        h.submit(f"g{n}", 1)
    await h.settle()
    assert h.engines.engine_of[("g0", 0)] == "bad"
    h.engines.fail("g0", 0)
    await h.settle()
    h.submit("g2", 1)  # the fewest in flight: bad again
    await h.advance(0.01)
    assert h.engines.engine_of[("g2", 0)] == "bad"
    h.engines.fail("g2", 0)
    await h.settle()
    assert [c.kind for c in changes] == [ChangeKind.OUT]
    for n in range(3, 6):
        h.submit(f"g{n}", 1)
        await h.advance(0.01)
        h.engines.finish(next(g for g, _ in h.engines.running), 0)
        await h.settle()
    assert {h.engines.engine_of[(f"g{n}", 0)] for n in range(3, 6)} == {"good"}
    for group, _ in list(h.engines.running):
        h.engines.finish(group, 0)
    h.submit("g6", 1)  # good, before the backoff passed
    await h.advance(5.0)
    h.submit("g7", 1)  # the backoff passed: the next group probes it
    await h.advance(0.01)
    assert (h.engines.engine_of[("g6", 0)], h.engines.engine_of[("g7", 0)]) == ("good", "bad")
    h.engines.finish("g7", 0)
    await h.settle()
    assert [c.kind for c in changes] == [ChangeKind.OUT, ChangeKind.BACK]


async def test_with_every_engine_out_admission_waits_for_the_probe(make: MakeHarness) -> None:
    h = make(cap=4, config=ROUTED, engines=("a",))
    h.submit("g0", 2)
    await h.settle()
    h.engines.fail("g0", 0)
    h.engines.fail("g0", 1)
    await h.settle()
    h.submit("g1", 2)
    await h.advance(0.01)
    assert h.inflight == 0  # out: nothing admitted
    await h.advance(4.8)
    assert h.inflight == 0
    await h.advance(0.2)
    assert h.inflight == 2  # the probe timer fired: g1 went to it
