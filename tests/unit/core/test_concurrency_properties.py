"""Properties of the controller over random sequences of polls, completions and commands."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core.builders import sample
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.fixed import FixedPolicy
from workers.core.controller.policies.pacer import PacerPolicy
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig, EpisodeCompletion
from workers.core.decisions import Decision, DecisionKind
from workers.core.samples import EngineHealth

HEALTH = st.sampled_from([EngineHealth.UP] * 6 + [EngineHealth.STALE, EngineHealth.DOWN])


@dataclass(frozen=True)
class Poll:
    dt: float
    inflight: int
    engines: tuple[tuple[EngineHealth, float, int, int, int], ...]  # health, kv, run, queue, pre


@dataclass(frozen=True)
class Done:
    dt: float
    pool: int
    tokens: int
    ok: bool


@dataclass(frozen=True)
class Command:
    dt: float
    name: str  # pin, set, release
    cap: int
    ttl: float


polls = st.builds(
    Poll,
    dt=st.floats(0.0, 20.0),
    inflight=st.integers(0, 1200),
    engines=st.lists(
        st.tuples(
            HEALTH,
            st.floats(0.0, 1.0),
            st.integers(0, 300),
            st.integers(0, 300),
            st.sampled_from([0, 0, 0, 1, 7]),
        ),
        min_size=1,
        max_size=3,
    ).map(tuple),
)
dones = st.builds(
    Done,
    dt=st.floats(0.0, 3.0),
    pool=st.integers(1, 1200),
    tokens=st.sampled_from([0, 1, 50, 400]),
    ok=st.booleans(),
)
commands = st.builds(
    Command,
    dt=st.floats(0.0, 10.0),
    name=st.sampled_from(["pin", "set", "release"]),
    cap=st.integers(1, 1024),
    ttl=st.floats(1.0, 120.0),
)
events = st.lists(st.one_of(polls, dones, dones, dones, commands), min_size=1, max_size=120)
bounds = st.tuples(st.integers(1, 40), st.integers(40, 1024))
policies = st.sampled_from([ReferencePolicy, PacerPolicy, FixedPolicy])


def to_samples(poll: Poll):
    return [
        sample(
            f"e{i}",
            health=health,
            kv=kv,
            running=running,
            waiting=queue,
            waiting_capacity=queue,
            preemptions=preempted,
            tokens=running * 10,
        )
        for i, (health, kv, running, queue, preempted) in enumerate(poll.engines)
    ]


def complete_poll(poll: Poll) -> bool:
    present = [e for e in poll.engines if e[0] is not EngineHealth.DOWN]
    return bool(present) and all(e[0] is EngineHealth.UP for e in present)


@settings(max_examples=200, deadline=None)
@given(
    script=events, limits=bounds, policy=policies, start=st.one_of(st.none(), st.integers(1, 2000))
)
def test_controller_invariants_hold_over_any_sequence(script, limits, policy, start) -> None:
    low, high = limits
    config = ControllerConfig(min_inflight=low, max_inflight=high, initial_inflight=start)
    ctl = Controller(config, policy())
    now = 0.0
    last_poll: tuple[float, bool] | None = None  # time and completeness of the last poll
    interval: list[DecisionKind] = []  # what was decided since the last poll
    for event in script:
        now += event.dt
        before = ctl.make_stats(now)
        decisions: tuple[Decision, ...]
        if isinstance(event, Poll):
            decisions = ctl.on_poll(to_samples(event), inflight=event.inflight, now=now)
            interval = []
            last_poll = (now, complete_poll(event))
            if before.draining:  # at most one cut per drain epoch
                assert DecisionKind.CUT not in [d.kind for d in decisions]
            for d in decisions:
                assert d.shed <= event.inflight
        elif isinstance(event, Done):
            done = EpisodeCompletion(tokens=event.tokens, ok=event.ok, pool=event.pool)
            decisions = ctl.on_completion(done, now=now)
            after = ctl.make_stats(now)
            fresh = last_poll is not None and last_poll[1] and now - last_poll[0] < config.poll_ttl
            binding = event.pool >= config.binding_fraction * before.policy_cap
            useful = event.ok and event.tokens > 0
            if before.draining or not fresh or not binding or not useful:
                assert after.policy_cap <= before.policy_cap
        else:
            decisions = _command(ctl, event, now)
        interval += [d.kind for d in decisions]
        grows = interval.count(DecisionKind.GROW)
        assert grows <= 1 + len(interval) - grows  # one per interval, or one per other decision
        for d in decisions:
            if d.kind in (DecisionKind.CUT, DecisionKind.TRIM):
                assert d.cap_after <= d.cap_before
                if d.shadow_after is not None and d.shadow_before is not None:
                    assert d.shadow_after <= d.shadow_before
                    assert d.shed == 0  # a pin is never pierced
            json.dumps(d.to_json())
        stats = ctl.make_stats(now)
        assert low <= ctl.cap <= high
        assert low <= stats.policy_cap <= high
    restored, _ = Controller.restore(
        config, policy(), json.loads(json.dumps(ctl.to_json(now))), now=now
    )
    assert restored.cap == ctl.cap


def _command(ctl: Controller, event: Command, now: float) -> tuple[Decision, ...]:
    low, high = ctl.config.min_inflight, ctl.config.max_inflight
    if event.name == "release":
        return (ctl.release(now=now),)
    if not low <= event.cap <= high:
        return ()
    if event.name == "pin":
        return (ctl.pin(event.cap, event.ttl, now=now),)
    return (ctl.set(event.cap, now=now),)
