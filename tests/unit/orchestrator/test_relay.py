"""The relay on engines that take their time to reload: sync brings every engine at once,
rolling one at a time with the others in routing, a failed reload keeps the old version on
record and never leaves an engine paused."""

from __future__ import annotations

import asyncio

import pytest

from workers.core.clock import ManualClock
from workers.core.decisions import DecisionKind, Signal
from workers.core.orchestrator.relay import Relay, UpdateMode

RELOAD_S = 2.0


class Engine:
    """An engine's weight routes on a manual clock: a reload takes RELOAD_S."""

    def __init__(self, name: str, clock: ManualClock, log: list[tuple[float, str, str]]) -> None:
        self.name, self.clock, self.log = name, clock, log
        self.paused = False
        self.version: int | None = None
        self.fail_reload = ""
        self.down = False

    def _note(self, what: str) -> None:
        self.log.append((self.clock.now(), self.name, what))

    async def pause(self) -> None:
        self.paused = True
        self._note("pause")

    async def reload(self, checkpoint: str) -> None:
        await self.clock.sleep(RELOAD_S)
        if self.fail_reload:
            raise RuntimeError(self.fail_reload)
        self._note(f"reload {checkpoint}")

    async def set_version(self, version: int) -> None:
        self.version = version
        self._note(f"version {version}")

    async def resume(self) -> None:
        self.paused = False
        self._note("resume")

    async def is_paused(self) -> bool:
        if self.down:
            raise ConnectionError(f"{self.name} is down")
        return self.paused

    async def served_version(self) -> int | None:
        if self.down:
            raise ConnectionError(f"{self.name} is down")
        return self.version

    def restart(self) -> None:
        """The engine's process started again: on its base weights."""
        self.version, self.paused = None, False


class Routing:
    def __init__(self, log: list[tuple[float, str, str]], clock: ManualClock) -> None:
        self.held: set[str] = set()
        self.log, self.clock = log, clock

    def hold(self, engine: str) -> None:
        self.held.add(engine)
        self.log.append((self.clock.now(), engine, "held"))

    def release(self, engine: str) -> None:
        self.held.discard(engine)
        self.log.append((self.clock.now(), engine, "released"))


async def run_update(relay: Relay, clock: ManualClock, version: int) -> tuple:
    """The update, the clock moved on only once everything waits on it."""
    task = asyncio.ensure_future(relay.update(version, f"/ckpt/v{version}"))
    while not task.done():
        for _ in range(20):
            await asyncio.sleep(0)
        if not task.done():
            clock.advance(0.5)
    return task.result()


def engines(clock: ManualClock, log: list) -> dict[str, Engine]:
    return {name: Engine(name, clock, log) for name in ("e0", "e1", "e2")}


async def test_a_sync_update_brings_every_engine_at_once_in_one_reload_time() -> None:
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    relay = Relay(pool, clock, loop_state=lambda: (40, Signal.CLEAR))
    started = clock.now()
    decisions = await run_update(relay, clock, 3)
    assert clock.now() - started == pytest.approx(RELOAD_S, abs=0.5)
    assert relay.served == {"e0": 3, "e1": 3, "e2": 3}
    assert all(e.version == 3 and not e.paused for e in pool.values())
    pauses = [at for at, _, what in log if what == "pause"]
    resumes = [at for at, _, what in log if what == "resume"]
    assert max(pauses) <= min(resumes)  # no engine resumed while another still served old
    for name, engine_log in ((n, [w for _, e, w in log if e == n]) for n in pool):
        assert engine_log == ["pause", "reload /ckpt/v3", "version 3", "resume"], name
    assert [d.kind for d in decisions] == [DecisionKind.WEIGHTS] * 3
    assert decisions[0].reason.startswith("e0 serves version 3 after 2.0 s (sync update)")
    assert decisions[0].figures["version"] == 3 and not decisions[0].alert
    assert decisions[0].cap_after == 40 and decisions[0].signal is Signal.CLEAR


async def test_a_rolling_update_takes_one_engine_at_a_time_out_of_routing() -> None:
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    routing = Routing(log, clock)
    relay = Relay(pool, clock, mode=UpdateMode.ROLLING, routing=routing)
    started = clock.now()
    await run_update(relay, clock, 5)
    assert clock.now() - started == pytest.approx(3 * RELOAD_S, abs=1.5)
    assert relay.served == {"e0": 5, "e1": 5, "e2": 5} and not routing.held
    order = [(e, w) for _, e, w in log if w in ("held", "released")]
    assert order == [(n, w) for n in ("e0", "e1", "e2") for w in ("held", "released")]
    paused_at_once = max(
        sum(1 for _, e, w in log[: i + 1] if w == "pause")
        - sum(1 for _, e, w in log[: i + 1] if w == "resume")
        for i in range(len(log))
    )
    assert paused_at_once == 1  # the others kept serving


async def test_an_engine_that_fails_to_reload_keeps_its_version_and_is_resumed() -> None:
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    relay = Relay(pool, clock, served={"e0": 1, "e1": 1, "e2": 1})
    pool["e1"].fail_reload = "weights file truncated"
    decisions = await run_update(relay, clock, 2)
    assert relay.served == {"e0": 2, "e1": 1, "e2": 2}
    assert not any(e.paused for e in pool.values())
    failed = next(d for d in decisions if d.engine == "e1")
    assert failed.alert and failed.figures["version"] == 1 and failed.figures["target"] == 2
    assert "could not load version 2 (RuntimeError: weights file truncated)" in failed.reason
    assert "it serves version 1" in failed.reason


def test_rolling_updates_need_routing() -> None:
    with pytest.raises(ValueError, match="routing"):
        Relay({}, ManualClock(), mode=UpdateMode.ROLLING)


async def test_a_rolling_update_records_each_engine_as_it_resumes() -> None:
    """The turns an engine serves after its resume carry the new version while the engines
    still to come carry the old one; the controller is told which engine is paused."""
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    relay = Relay(
        pool,
        clock,
        mode=UpdateMode.ROLLING,
        routing=Routing(log, clock),
        served=dict.fromkeys(pool, 4),
    )
    task = asyncio.ensure_future(relay.update(5, "/ckpt/v5"))
    seen: list[tuple[dict[str, int], set[str]]] = []
    while not task.done():
        for _ in range(20):
            await asyncio.sleep(0)
        seen.append((dict(relay.served), set(relay.updating)))
        clock.advance(0.5)
    assert ({"e0": 5, "e1": 4, "e2": 4}, {"e1"}) in seen
    assert ({"e0": 5, "e1": 5, "e2": 4}, {"e2"}) in seen
    assert all(len(updating) <= 1 for _, updating in seen)
    assert not relay.updating and set(relay.resumed_at) == set(pool)
    assert relay.target == (5, "/ckpt/v5")


async def test_a_version_that_does_not_read_back_is_not_recorded() -> None:
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    relay = Relay(pool, clock, served=dict.fromkeys(pool, 1))

    async def forgets(version: int) -> None:  # the label never sticks
        pool["e2"].version = 1

    pool["e2"].set_version = forgets  # type: ignore[method-assign]
    decisions = await run_update(relay, clock, 2)
    assert relay.served == {"e0": 2, "e1": 2, "e2": 1}
    failed = next(d for d in decisions if d.engine == "e2")
    assert failed.alert and "it reads back version 1" in failed.reason


async def run_check(relay: Relay, clock: ManualClock) -> tuple:
    task = asyncio.ensure_future(relay.check())
    while not task.done():
        for _ in range(20):
            await asyncio.sleep(0)
        if not task.done():
            clock.advance(0.5)
    return task.result()


async def test_a_check_pushes_the_current_weights_again_to_an_engine_that_restarted() -> None:
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    routing = Routing(log, clock)
    relay = Relay(pool, clock, routing=routing)
    await run_update(relay, clock, 3)
    assert await run_check(relay, clock) == ()  # every engine serves what the record says
    pool["e1"].restart()
    pool["e2"].down = True  # down: not answering, left to the monitor
    task = asyncio.ensure_future(relay.check())
    for _ in range(20):
        await asyncio.sleep(0)
    assert relay.served["e1"] == 0 and "e1" in routing.held  # base weights, on record at once
    while not task.done():
        clock.advance(0.5)
        for _ in range(20):
            await asyncio.sleep(0)
    (decision,) = task.result()
    assert pool["e1"].version == 3 and relay.served == {"e0": 3, "e1": 3, "e2": 3}
    assert not routing.held and not pool["e1"].paused
    assert decision.kind is DecisionKind.WEIGHTS and not decision.alert
    assert decision.reason == (
        "e1 came back on its base weights: version 3 pushed again after 2.0 s (version check)"
    )
    assert (decision.figures["version"], decision.figures["target"]) == (3, 3)


async def test_a_check_leaves_an_engine_that_failed_its_update_as_it_is() -> None:
    """Its version agrees with its record: pushing the same checkpoint again every check
    would repeat the failure (an alert every WEIGHTS_CHECK_S) and pause it for nothing."""
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    relay = Relay(pool, clock)
    pool["e0"].fail_reload = "no space left on device"
    await run_update(relay, clock, 2)
    assert relay.served == {"e0": 0, "e1": 2, "e2": 2}
    reloads = sum(1 for _, _, what in log if what.startswith("reload"))
    assert await run_check(relay, clock) == ()
    assert sum(1 for _, _, what in log if what.startswith("reload")) == reloads


async def test_a_new_host_brings_an_engine_on_other_weights_to_the_run_s_version() -> None:
    """A takeover: the record is empty, the run's last acknowledgement is the target."""
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    pool["e0"].version, pool["e1"].version = 7, 6
    relay = Relay(pool, clock, target=(7, "/ckpt/v7"))
    decisions = await run_check(relay, clock)
    assert relay.served == {"e0": 7, "e1": 7, "e2": 7}
    assert sorted(d.engine for d in decisions) == ["e1", "e2"]
    assert "e1 served version 6, not 7: version 7 pushed again" in decisions[0].reason


async def test_a_suspect_is_on_its_base_weights_until_a_check_reads_it() -> None:
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    relay = Relay(pool, clock)
    await run_update(relay, clock, 3)
    pool["e0"].restart()
    relay.suspect("e0")
    relay.suspect("e1")  # came back up on the weights it had: a network blip
    assert relay.served == {"e0": 0, "e1": 0, "e2": 3}
    (decision,) = await run_check(relay, clock)
    assert decision.engine == "e0" and "came back on its base weights" in decision.reason
    assert relay.served == {"e0": 3, "e1": 3, "e2": 3}


async def test_a_check_pushes_again_to_an_engine_left_paused_on_the_run_s_version() -> None:
    """A host that died between an engine's new version and its resume left it paused on the
    right version: the next host's check sees the pause, not only the version, and pushes
    the weights again whole (the dead host's reload cannot be known to have finished)."""
    clock, log = ManualClock(), []
    pool = engines(clock, log)
    for engine in pool.values():
        engine.version = 3
    pool["e1"].paused = True
    relay = Relay(pool, clock)  # the new host's: no record of its own yet
    relay.target = (3, "/ckpt/v3")
    (decision,) = await run_check(relay, clock)
    assert decision.engine == "e1" and not decision.alert
    assert "e1 was left paused on version 3: version 3 pushed again" in decision.reason
    assert [w for _, e, w in log if e == "e1"] == [
        "pause",
        "reload /ckpt/v3",
        "version 3",
        "resume",
    ]
    assert not any(e.paused for e in pool.values())
    assert relay.served == {"e0": 3, "e1": 3, "e2": 3}
