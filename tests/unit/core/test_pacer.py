"""Pacer's policy: fast ramp, early brakes, knee memory, throughput probing."""

from __future__ import annotations

import pytest

from tests.unit.core.builders import sample
from workers.core.controller.policies.base import PoolView
from workers.core.controller.policies.pacer import PacerConfig, PacerPolicy
from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal


def pool(
    level: float = 100.0,
    inflight: int = 100,
    since_release: int | None = None,
    turnover: float = 0.0,
) -> PoolView:
    return PoolView(level, inflight, since_release, turnover)


def step(policy: PacerPolicy, view: PoolView | None = None, at: float = 0.0, **fields: object):
    """One poll; every episode of the pool is running in it unless ``running`` says not."""
    view = view or pool()
    fields.setdefault("running", view.inflight)
    poll = PollSummary.from_samples([sample(**fields)], at)  # type: ignore[arg-type]
    reading = policy.read(poll, view)
    return reading, policy.propose(reading, view)


@pytest.mark.parametrize(
    ("usage", "growth"),
    [(0.0, 4.0), (0.4, 2.2), (0.78, 0.88 / 0.78), (0.8, 1.05), (0.84, 1.025), (0.87, 1.00625)],
)
def test_growth_puts_kv_on_the_target_in_a_turnover_and_tapers_to_nothing_at_it(
    usage, growth
) -> None:
    reading, proposal = step(PacerPolicy(), pool(inflight=0), kv=usage)  # KV read as it is
    assert reading.signal is Signal.CLEAR
    assert reading.growth == pytest.approx(growth)
    assert proposal is None


def test_kv_between_target_and_trim_line_holds_the_cap() -> None:
    reading, proposal = step(PacerPolicy(), kv=0.9)
    assert (reading.signal, reading.cause, reading.growth, proposal) == (
        Signal.SOFT,
        Cause.KV_HIGH,
        1.0,
        None,
    )


def test_kv_above_the_trim_line_on_three_polls_trims_to_the_target_without_shedding() -> None:
    policy = PacerPolicy()
    for _ in range(PacerConfig().confirm_polls - 1):
        first, proposal = step(policy, kv=0.93)
        assert (first.cause, proposal) == (Cause.KV_HIGH, None)  # a poll or two can be noise
    reading, proposal = step(policy, kv=0.93)
    assert (reading.signal, reading.cause) == (Signal.SOFT, Cause.KV_PRESSURE)
    assert proposal is not None
    assert (proposal.kind, proposal.shed) == (DecisionKind.TRIM, False)
    assert proposal.level == pytest.approx(100 * 0.88 / 0.93)


def test_kv_near_exhaustion_trims_at_once_and_sheds() -> None:
    _, proposal = step(PacerPolicy(), kv=0.98)
    assert proposal is not None
    assert proposal.shed
    assert proposal.level == pytest.approx(100 * 0.88 / 0.98)


def test_trims_rest_3_polls() -> None:
    policy = PacerPolicy()
    assert step(policy, kv=0.98)[1] is not None
    assert step(policy, pool(level=90.0), kv=0.98)[1] is None
    assert step(policy, pool(level=90.0), kv=0.98)[1] is None
    assert step(policy, pool(level=90.0), kv=0.98)[1] is not None


def test_preemption_cuts_to_0_85_and_growth_stops_under_the_knee() -> None:
    policy = PacerPolicy()
    _, cut = step(policy, pool(inflight=200, level=200.0), preemptions=2)
    assert cut is not None
    assert (cut.kind, cut.shed) == (DecisionKind.CUT, True)
    assert cut.level == pytest.approx(170.0)
    under = step(policy, pool(level=170.0, inflight=0), kv=0.1)[0]
    assert (under.signal, under.growth, under.ceiling) == (Signal.CLEAR, 4.0, 180.0)
    at_ceiling = step(policy, pool(level=180.0, inflight=0), kv=0.1)[0]
    assert (at_ceiling.signal, at_ceiling.cause) == (Signal.SOFT, Cause.KNEE)
    assert (at_ceiling.growth, at_ceiling.figures["knee"]) == (1.0, 200.0)


def test_the_knee_is_forgotten_after_20_turnovers() -> None:
    policy = PacerPolicy()
    step(policy, pool(inflight=200, level=200.0), preemptions=2)
    at_21 = step(policy, pool(level=185.0, inflight=0, turnover=21.0), kv=0.1)[0]
    assert (at_21.signal, at_21.growth, at_21.ceiling) == (Signal.CLEAR, 4.0, None)
    assert "knee" not in at_21.figures


def test_a_knee_held_a_whole_epoch_with_the_cache_short_and_no_preemption_is_dropped() -> None:
    def after_an_epoch_at_the_knee(
        kv: float, preemptions: int = 0, running: int = 178
    ) -> PacerPolicy:
        policy = PacerPolicy()
        step(policy, pool(inflight=200, level=200.0), preemptions=2)  # knee 200: ceiling 180
        for turnover, at in ((1.0, 5.0), (1.5, 10.0), (1.9, 15.0), (2.0, 20.0)):
            held = pool(level=180.0, inflight=178, turnover=turnover)
            pre = preemptions if at == 10.0 else 0
            step(policy, held, at=at, kv=kv, preemptions=pre, running=running)
        return policy

    assert after_an_epoch_at_the_knee(kv=0.7)._knee.level is None  # 180 fill 70 %: 200 was no knee
    assert after_an_epoch_at_the_knee(kv=0.86)._knee.level == 200.0  # near the target: a true knee
    # 0.7 with 140 of the 178 running (the rest between turns) is 0.89 with all of them: kept.
    assert after_an_epoch_at_the_knee(kv=0.7, running=140)._knee.level == 200.0
    assert after_an_epoch_at_the_knee(kv=0.7, preemptions=1)._knee.level == 178.0  # cut again there
    under = PacerPolicy()
    step(under, pool(inflight=200, level=200.0), preemptions=2)
    for turnover in (1.0, 1.5, 2.0):  # a pool well under the ceiling tests nothing
        step(under, pool(level=120.0, inflight=120, turnover=turnover), kv=0.5)
    assert under._knee.level == 200.0


def test_growth_reads_the_highest_kv_of_the_last_3_polls() -> None:
    """A real vLLM engine under load once reported 0 running and KV 0 on one scrape: that
    poll alone must not license slow start."""
    policy, empty = PacerPolicy(), pool(inflight=0)
    step(policy, empty, kv=0.7)
    caught_idle = step(policy, empty, kv=0.0)[0]
    assert caught_idle.growth == pytest.approx(0.88 / 0.7)  # growth at KV 0.7, not at 0
    step(policy, empty, kv=0.0)
    idle_for_3 = step(policy, empty, kv=0.0)[0]
    assert idle_for_3.growth == pytest.approx(4.0)


def test_growth_prices_in_one_more_episodes_share_of_kv() -> None:
    """At 7 episodes with KV 0.78, an eighth would take it to 0.89, past the 0.88 target: no
    growth. At 100 episodes the same KV is 0.7878 with one more, under cruise: slow start's
    target / KV."""
    small = step(PacerPolicy(), pool(level=7.0, inflight=7), kv=0.78)[0]
    large = step(PacerPolicy(), pool(level=100.0, inflight=100), kv=0.78)[0]
    assert (small.signal, small.growth) == (Signal.CLEAR, 1.0)
    assert large.growth == pytest.approx(0.88 / (0.78 * 1.01))


def test_after_a_cut_each_kv_reading_is_priced_by_the_pool_that_filled_it() -> None:
    """The real engine's closed loop, cut from 11 to 6 on a cache of 8: KV 0.66 read at 5
    episodes, then 0.6 at 7 of a pool that just grew. Priced against 7, the fuller reading
    let the cap grow to 9 and the engine preempt; priced by its own 5, an eighth episode
    fills the cache, and the cap holds. Slow start, with no knee, still prices against 7."""
    cut = PacerPolicy()
    step(cut, pool(level=11.0, inflight=11), preemptions=3)  # the knee: 11, ceiling 9.9
    step(cut, pool(level=6.0, inflight=5), kv=0.66)
    after_cut = step(cut, pool(level=8.0, inflight=7), kv=0.6)[0]
    assert (after_cut.signal, after_cut.growth) == (Signal.CLEAR, 1.0)
    fresh = PacerPolicy()
    step(fresh, pool(level=6.0, inflight=5), kv=0.66)
    slow_start = step(fresh, pool(level=8.0, inflight=7), kv=0.6)[0]
    assert slow_start.growth == pytest.approx(0.88 / (0.66 * 8 / 7))


def test_a_state_saved_before_kv_readings_kept_their_pools_restarts_the_window() -> None:
    """Readings of an unknown pool cannot be priced: they are dropped, the next poll refills."""
    data = PacerPolicy().to_json()
    data["recent_kv"] = [0.95, 0.95]
    del data["recent_running"]
    policy = PacerPolicy()
    policy.load_json(data)
    reading = step(policy, pool(level=100.0, inflight=100), kv=0.4)[0]
    assert reading.growth == pytest.approx(0.88 / (0.4 * 1.01))


def test_a_poll_with_none_of_the_pool_running_licenses_no_growth() -> None:
    """A real engine's first poll came before any of the 24 episodes reached it: KV 0 said
    nothing of them, and slow start's x4 on it led a cascade of cuts."""
    before_any_ran = step(PacerPolicy(), pool(level=24.0, inflight=24), kv=0.0, running=0)[0]
    assert (before_any_ran.signal, before_any_ran.growth) == (Signal.CLEAR, 1.0)
    idle = step(PacerPolicy(), pool(level=24.0, inflight=0), kv=0.0)[0]
    assert idle.growth == 4.0  # an empty pool is no blind spot: nothing is in flight


@pytest.mark.parametrize("engines", [1, 2, 4])
def test_one_more_episodes_share_is_priced_on_the_engine_not_the_pool(engines: int) -> None:
    """Seven episodes per engine at KV 0.82: an eighth on the fullest engine takes it to 0.94,
    past the target, whatever the number of engines beside it."""
    samples = [sample(f"e{n}", kv=0.82) for n in range(engines)]
    poll = PollSummary.from_samples(samples, 0.0)
    view = pool(level=7.0 * engines, inflight=7 * engines)
    reading = PacerPolicy().read(poll, view)
    assert (reading.signal, reading.growth) == (Signal.CLEAR, 1.0)


def test_a_cut_soon_after_a_release_is_escalated_to_the_cut_factor_cubed() -> None:
    _, cut = step(PacerPolicy(), pool(since_release=2), preemptions=1)
    assert cut is not None
    assert cut.level == pytest.approx(100 * 0.85**3)
    _, late = step(PacerPolicy(), pool(since_release=7), preemptions=1)
    assert late is not None
    assert late.level == pytest.approx(85.0)  # past 2 x confirm_polls: an ordinary cut


def test_queue_overload_cuts_after_3_polls_not_6() -> None:
    policy = PacerPolicy()
    queued = {"running": 100, "waiting": 60, "waiting_capacity": 60}
    assert step(policy, **queued)[1] is None
    assert step(policy, **queued)[1] is None
    reading, cut = step(policy, **queued)
    assert reading.cause is Cause.QUEUE_OVERLOAD
    assert cut is not None
    assert cut.level == pytest.approx(85.0)  # one cut factor for both hard causes


def test_a_rising_capacity_queue_holds_growth_before_it_becomes_overload() -> None:
    policy = PacerPolicy()
    first = step(policy, running=100, waiting=2, waiting_capacity=2)[0]
    assert (first.signal, first.growth) == (Signal.CLEAR, 1.0)  # any queue: no growth
    rising = step(policy, running=100, waiting=5, waiting_capacity=5)[0]
    assert (rising.signal, rising.cause) == (Signal.SOFT, Cause.QUEUE_RISING)


def test_persistent_waiting_holds_growth() -> None:
    policy = PacerPolicy()
    step(policy, waiting=1, waiting_capacity=0)
    reading = step(policy, waiting=1, waiting_capacity=0)[0]
    assert (reading.signal, reading.cause) == (Signal.SOFT, Cause.WAITING)


def learn_hit_rate(policy: PacerPolicy, rate: float, polls: int = 5) -> None:
    for _ in range(polls):
        step(policy, kv=0.55, hits=int(rate * 1000), queries=1000)


def test_a_falling_prefix_hit_rate_under_kv_pressure_trims_a_tenth_without_shedding() -> None:
    policy = PacerPolicy()
    learn_hit_rate(policy, 0.9)
    reading, trim = step(policy, kv=0.6, hits=500, queries=1000)
    assert (reading.signal, reading.cause) == (Signal.SOFT, Cause.PREFIX_EVICTION)
    assert reading.figures["prefix_hit_baseline"] == pytest.approx(0.9)
    assert trim is not None
    assert (trim.kind, trim.shed, trim.level) == (DecisionKind.TRIM, False, pytest.approx(90.0))


def test_an_eviction_trim_is_a_knee_growth_does_not_climb_straight_back_over() -> None:
    """Grown back at once, the pool evicts again and is trimmed again: a saw that changed
    direction 18 times in W11's half hour (12 since)."""
    policy = PacerPolicy()
    learn_hit_rate(policy, 0.9)
    _, trim = step(policy, kv=0.6, hits=500, queries=1000)
    assert trim is not None and trim.level == pytest.approx(90.0)
    learn_hit_rate(policy, 0.5)  # the baseline relearnt at the lower rate: clear again
    at_knee, _ = step(policy, pool(level=90.0, inflight=90), kv=0.6, hits=500, queries=1000)
    assert (at_knee.signal, at_knee.cause, at_knee.ceiling) == (Signal.SOFT, Cause.KNEE, 90.0)
    under, _ = step(policy, pool(level=80.0, inflight=80), kv=0.5, hits=500, queries=1000)
    assert (under.signal, under.growth > 1.0, under.ceiling) == (Signal.CLEAR, True, 90.0)


def test_a_falling_prefix_hit_rate_with_kv_to_spare_is_not_eviction() -> None:
    policy = PacerPolicy()
    learn_hit_rate(policy, 0.9)
    reading, trim = step(policy, kv=0.3, hits=500, queries=1000)
    assert (reading.signal, trim) == (Signal.CLEAR, None)


def test_a_lasting_drop_of_the_hit_rate_costs_one_trim_not_one_every_few_polls() -> None:
    policy = PacerPolicy()
    learn_hit_rate(policy, 0.9)
    trims = [step(policy, kv=0.6, hits=500, queries=1000)[1] for _ in range(20)]
    assert sum(t is not None for t in trims) == 1


def test_a_flat_throughput_probe_holds_growth_for_one_epoch() -> None:
    policy = PacerPolicy()
    at = 0.0
    readings = []
    # Epoch 0 at 100 in flight, then 130 in flight with the same tokens per poll: flat, once
    # a second epoch of 130 confirms the first.
    for index, inflight in enumerate([100] * 4 + [130] * 8 + [130] * 12):
        at += 5.0
        view = pool(level=float(inflight), inflight=inflight, turnover=index / 4)
        readings.append(step(policy, view, at=at, tokens=1000)[0])
    causes = [r.cause for r in readings]
    assert Cause.THROUGHPUT_FLAT not in causes[:12]
    assert causes[12:16] == [Cause.THROUGHPUT_FLAT] * 4
    assert causes[16:] == [Cause.CLEAR] * 8
    assert readings[16].growth > 1.0


def test_every_stored_field_is_restored() -> None:
    """A state with no field at its default loads and saves back unchanged."""
    stored = {
        "overload": {"queue_streak": 2, "waiting": ["e1"]},
        "probe": {"anchor": [120.0, 900.0]},
        "queue_before": 7,
        "kv_streak": 1,
        "hit_baseline": 0.6,
        "knee": 150.0,
        "knee_turnover": 33.5,
        "hold_until": 40.0,
        "recent_kv": [0.5, 0.7],
        "recent_running": [40.0, 52.5],
        "polls_since_trim": 2,
        "frontier": 130.0,
        "frontier_turnover": 31.0,
        "settling": True,
        "frontier_flat": True,
        "recheck": [130.0, 950.0, 36.0],
    }
    policy = PacerPolicy()
    policy.load_json(stored)
    assert policy.to_json() == stored


def test_a_state_saved_before_frontier_rechecks_loads_with_none_under_way() -> None:
    older = PacerPolicy().to_json()
    del older["recheck"]
    policy = PacerPolicy()
    policy.load_json(older)
    assert policy.to_json()["recheck"] is None


@pytest.mark.parametrize(
    ("recheck", "message"),
    [
        ([130.0, 950.0], r"recheck must be null or \[inflight, rate, until\]"),
        ("130", r"recheck must be null or \[inflight, rate, until\]"),
        ([130.0, -1.0, 36.0], r"recheck rate"),
    ],
)
def test_a_malformed_stored_recheck_is_refused_by_name(recheck: object, message: str) -> None:
    stored = PacerPolicy().to_json() | {"recheck": recheck}
    with pytest.raises(ValueError, match=message):
        PacerPolicy().load_json(stored)


def test_state_round_trips() -> None:
    policy = PacerPolicy()
    learn_hit_rate(policy, 0.9)
    step(policy, pool(inflight=200, level=200.0), preemptions=2)
    copy = PacerPolicy()
    copy.load_json(policy.to_json())
    view = pool(level=185.0, inflight=185)
    assert step(copy, view, kv=0.6, hits=500, queries=1000) == step(
        policy, view, kv=0.6, hits=500, queries=1000
    )


def test_config_rejects_inconsistent_thresholds() -> None:
    with pytest.raises(ValueError, match=r"trim_kv_usage must be in \[0.88, 1.0\]"):
        PacerConfig(trim_kv_usage=0.85)
    with pytest.raises(ValueError, match=r"trim_kv_usage 0\.95 is too far over"):
        PacerConfig(target_kv_usage=0.3, trim_kv_usage=0.95)
    with pytest.raises(ValueError, match=r"frontier_growth must be in \[1.02, 4.0\]"):
        PacerConfig(frontier_growth=1.0)
    with pytest.raises(ValueError, match=r"probe_growth must be in \[1.0, 4.0\]"):
        PacerConfig(probe_growth=5.0)


def test_prefix_eviction_is_seen_inside_the_kv_dead_band_too() -> None:
    policy = PacerPolicy()
    learn_hit_rate(policy, 0.9)
    reading, trim = step(policy, kv=0.9, hits=500, queries=1000)
    assert reading.cause is Cause.PREFIX_EVICTION
    assert trim is not None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("kv_streak", -2, "kv_streak must be an integer >= 0"),
        ("queue_before", 1.5, "queue_before must be an integer >= 0"),
        ("knee", float("nan"), "knee must be a finite number >= 0"),
        ("knee_turnover", None, "knee_turnover must be a finite number >= 0"),
        ("hold_until", "soon", "hold_until must be a finite number >= 0"),
        ("recent_kv", [0.5, 1.5], r"recent_kv must be a list of numbers in \[0, 1\]"),
        ("recent_kv", 0.5, r"recent_kv must be a list of numbers in \[0, 1\]"),
        ("recent_running", [-1.0], "recent_running must be a list of numbers >= 0"),
        ("recent_running", [4.0], "recent_running must have one count per recent_kv reading"),
        ("probe", {"anchor": [100, "fast"]}, "anchor rate must be a finite number"),
        ("probe", {"anchor": [100]}, "anchor must be null or"),
    ],
)
def test_stored_state_of_the_wrong_type_is_refused(field, value, message) -> None:
    data = PacerPolicy().to_json()
    data[field] = value
    with pytest.raises(ValueError, match=message):
        PacerPolicy().load_json(data)


def test_the_derived_lines_follow_the_twelve() -> None:
    """The defaults keep the 25-threshold pacer's lines; moving a setting moves its lines."""
    config = PacerConfig()
    assert config.cruise_kv_usage == pytest.approx(0.80)
    assert config.shed_kv_usage == pytest.approx(0.96)
    assert config.probe_step == pytest.approx(0.10)
    assert (config.escalation_polls, config.eviction_kv_usage) == (6, pytest.approx(0.44))
    moved = PacerConfig(target_kv_usage=0.8, trim_kv_usage=0.9, frontier_growth=1.3)
    assert moved.cruise_kv_usage == pytest.approx(0.6)
    assert moved.shed_kv_usage == pytest.approx(0.95)
    assert moved.probe_step == pytest.approx(0.2)
