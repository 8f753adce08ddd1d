"""The virtual clock: steps back to back, jumps idle time, returns at each finish, and serves
no request before it arrives, alone or with other engines on the same clock."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inference.sim.request import RequestStatus
from inference.sim.sampling import SamplingParams
from inference.sim.virtual import VirtualEngine
from tests.unit.sim.helpers import make_engine


def test_an_idle_engine_jumps_to_the_arrival_and_to_the_horizon() -> None:
    virtual = VirtualEngine(make_engine())
    assert virtual.run_until(5.0) == [] and virtual.now == 5.0
    req = virtual.submit("a", np.arange(10), SamplingParams(max_tokens=2), at=7.0)
    assert virtual.now == 5.0  # the clock moves only as the engine runs
    assert virtual.run_until(100.0) == [req]
    assert req.scheduled_time == 7.0
    assert req.finish_time == pytest.approx(7.0 + 0.02 + 0.011)  # prefill, then one decode
    assert virtual.now == req.finish_time and virtual.num_steps == 2


def test_run_until_returns_at_the_first_step_that_finishes_something() -> None:
    virtual = VirtualEngine(make_engine())
    short = virtual.submit("short", np.arange(4), SamplingParams(max_tokens=2), at=0.0)
    long = virtual.submit("long", np.arange(20, 24), SamplingParams(max_tokens=9), at=0.0)
    assert virtual.run_until(100.0) == [short]
    follow_up = virtual.submit("next", np.arange(40, 44), SamplingParams(max_tokens=1), virtual.now)
    finished = virtual.run_until(100.0)
    assert finished == [follow_up]  # admitted in the very next step
    assert virtual.run_until(100.0) == [long]


def test_the_virtual_past_cannot_change() -> None:
    virtual = VirtualEngine(make_engine())
    virtual.submit("a", np.arange(4), SamplingParams(max_tokens=30), at=0.0)
    virtual.run_until(0.1)
    with pytest.raises(ValueError, match="before the step in progress"):
        virtual.submit("late", np.arange(4), SamplingParams(max_tokens=1), at=0.01)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_busy_engine_serves_a_later_arrival_no_sooner_than_it_arrives(
    fast_forward: bool,
) -> None:
    virtual = VirtualEngine(make_engine(), fast_forward=fast_forward)
    busy = virtual.submit("busy", np.arange(10), SamplingParams(max_tokens=50), at=0.0)
    later = virtual.submit("later", np.arange(20, 30), SamplingParams(max_tokens=5), at=0.2)
    assert virtual.run_until(0.15) == []
    assert later.status is RequestStatus.WAITING and later.scheduled_time is None
    assert not virtual.engine.has_request("later")
    assert virtual.engine.make_stats().num_waiting_reqs == 0  # not there yet, not waiting
    assert virtual.run_until(100.0) == [later]
    assert later.scheduled_time is not None and later.first_token_time is not None
    # Admitted by the first step that starts at or after its arrival: a decode of "busy"
    # takes 11 ms, so it waits less than one of those.
    assert 0.2 <= later.scheduled_time < 0.2 + 0.011
    assert later.first_token_time > later.scheduled_time
    assert virtual.run_until(100.0) == [busy]
    counters = virtual.engine.counters
    # "busy" adds nothing to the queue time; no observation may be negative.
    assert counters.request_queue_time.sum == pytest.approx(later.scheduled_time - 0.2)
    assert counters.time_to_first_token.sum > later.first_token_time - 0.2 > 0.0


def test_fast_forward_stops_at_an_arrival_and_gives_the_same_times_as_stepping() -> None:
    runs = []
    for fast_forward in (True, False):
        virtual = VirtualEngine(make_engine(), fast_forward=fast_forward)
        reqs = [virtual.submit("a", np.arange(10), SamplingParams(max_tokens=40), at=0.0)]
        reqs += [
            virtual.submit(f"b{i}", np.arange(20, 30), SamplingParams(max_tokens=3), at=at)
            for i, at in enumerate((0.05, 0.13, 0.13, 0.3))
        ]
        while len([req for req in reqs if req.is_finished]) < len(reqs):
            virtual.run_until(100.0)
        runs.append([(req.scheduled_time, req.first_token_time, req.finish_time) for req in reqs])
        assert all(req.scheduled_time >= req.arrival_time for req in reqs)
    assert runs[0] == runs[1]


def test_a_request_arriving_while_the_engine_idled_starts_it_at_its_arrival() -> None:
    virtual = VirtualEngine(make_engine())
    first = virtual.submit("first", np.arange(10), SamplingParams(max_tokens=2), at=0.0)
    assert virtual.run_until(100.0) == [first]
    assert virtual.run_until(10.0) == [] and virtual.now == 10.0  # idle: jumped to the horizon
    idle_arrival = virtual.submit("idle", np.arange(10), SamplingParams(max_tokens=1), at=4.0)
    assert virtual.run_until(100.0) == [idle_arrival]
    assert idle_arrival.scheduled_time == 4.0  # no step ran since "first": nothing to wait for


def test_a_request_withdrawn_before_it_arrives_never_reaches_the_engine() -> None:
    virtual = VirtualEngine(make_engine())
    virtual.submit("busy", np.arange(10), SamplingParams(max_tokens=20), at=0.0)
    gone = virtual.submit("gone", np.arange(20, 30), SamplingParams(max_tokens=5), at=0.1)
    assert virtual.abort(["gone"]) == [gone]
    assert gone.is_finished and gone.finish_time == gone.arrival_time
    assert virtual.run_until(100.0)[0].req_id == "busy"
    assert gone.scheduled_time is None and virtual.engine.counters.request_success["abort"] == 0
    virtual.submit("held", np.arange(4), SamplingParams(max_tokens=1), at=virtual.now + 1.0)
    with pytest.raises(ValueError, match="already in the engine"):
        virtual.submit("held", np.arange(4), SamplingParams(max_tokens=1), at=virtual.now)


def test_engines_on_one_clock_never_serve_a_hand_off_before_it_arrives() -> None:
    # Each finish on one engine sends a follow-up to the other at the finish time; the driver
    # advances the engine whose clock is earliest up to the other's clock (or one step).
    engines = [VirtualEngine(make_engine(seed=i)) for i in range(2)]
    reqs = [
        engines[0].submit("a0", np.arange(30), SamplingParams(max_tokens=20), at=0.0),
        engines[1].submit("b0", np.arange(40, 44), SamplingParams(max_tokens=3), at=0.0),
    ]
    while len(reqs) < 60:
        index = min(range(2), key=lambda i: engines[i].now)
        engine, other = engines[index], engines[1 - index]
        until = max(other.now, math.nextafter(engine.now, math.inf))
        for req in engine.run_until(until):
            assert req.finish_time is not None
            size = 4 + len(reqs) % 7
            params = SamplingParams(max_tokens=2 + len(reqs) % 11)
            reqs.append(other.submit(f"r{len(reqs)}", np.arange(size), params, req.finish_time))
    for engine in engines:
        engine.run_until(math.inf)
    assert all(req.is_finished for req in reqs)
    assert all(req.scheduled_time >= req.arrival_time for req in reqs)
    assert all(req.first_token_time > req.arrival_time for req in reqs)
