"""The relay: bringing a run's engines to the policy version its trainer just acknowledged.

A trainer acknowledges a step with the new version and a checkpoint (a Hugging Face model
directory the engines can read). Each engine is brought to it the same way: paused with its
requests kept (frozen where they are, not aborted: no sampled token is thrown away) and its
prefix cache cleared (cached KV was computed by the old weights; vLLM's pause clears it, and
recomputes the frozen requests' KV after the resume), its weights reloaded in place from the
checkpoint (a reload alone clears no cache), told its version, resumed. Two modes decide how
many engines do that at once:

- ``sync``: every engine at once. Once the update returns, no engine serves the old weights:
  what is sampled next is on-policy; the pool serves nothing while the engines reload.
- ``rolling``: one engine at a time, taken out of routing first (no new group goes to it),
  while the others keep serving; the episodes they sample meanwhile are a version behind,
  which the run's off-policy bound accepts or drops.

An engine that fails to reload keeps its version on record (the run says why, an alert) and is
resumed: the relay never leaves an engine paused, and never records a version an engine did
not confirm: after each update it reads the version back (``/weight_info``). An engine that
restarted comes back on its base weights; ``check`` reads every engine's version, records what
it found (base weights are version ``BASE_VERSION``, which the episodes it served are tagged
with) and pushes the current checkpoint again to an engine that lost it, or that it finds
paused: no update of this relay runs during a check, so a paused engine was left so by a host
that died mid-update, its reload perhaps half done, and only a whole push again makes its
weights known. The relay is plain
asyncio over an injected client per engine and an injected clock, so it runs in a worker, a
test and virtual time alike.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from workers.core.clock import Clock
from workers.core.decisions import Cause, Decision, DecisionKind, Signal

BASE_VERSION = 0  # what an engine on the weights it was started with serves: the run's start
# A restart between two polls is seen at the next poll; an engine whose restart no poll
# caught (its counters kept their stamps) is found by reading versions this often: two poll
# periods of 5 s, so such an engine serves its base weights for 10 s at most.
WEIGHTS_CHECK_S = 10.0
# Polls after a resume whose numbers say nothing about load: the first spans the pause (its
# preemptions are the pause's own, the frozen batch recomputed), the next the cold prefix
# cache's first turns, which miss however full the engine is.
UPDATE_SETTLE_POLLS = 2


class UpdateMode(StrEnum):
    SYNC = "sync"
    ROLLING = "rolling"


class EngineWeights(Protocol):
    """One engine's weight-update routes (vLLM's, under ``VLLM_SERVER_DEV_MODE=1``; the
    simulator serves the same). Each raises on an answer that is not a success."""

    async def pause(self) -> None:
        """Requests kept where they are, the prefix cache cleared."""

    async def reload(self, checkpoint: str) -> None: ...
    async def set_version(self, version: int) -> None: ...
    async def resume(self) -> None: ...
    async def served_version(self) -> int | None:
        """The version the engine says it serves; None on its base weights."""

    async def is_paused(self) -> bool: ...


class Routing(Protocol):
    """What the relay asks of the dispatcher in rolling mode."""

    def hold(self, engine: str) -> None:
        """No new group goes to ``engine`` until ``release``."""

    def release(self, engine: str) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineUpdate:
    engine: str
    version: int  # the version it serves now
    seconds: float  # from its pause to its resume
    error: str = ""  # why it kept its old version, when it did


@dataclass
class Relay:
    engines: dict[str, EngineWeights]  # engines join and leave a running run
    clock: Clock
    mode: UpdateMode = UpdateMode.SYNC
    routing: Routing | None = None  # needed in rolling mode
    # The version each engine serves, as the relay last confirmed or read it back (its base
    # weights: BASE_VERSION); every turn an engine serves is tagged with its entry.
    served: dict[str, int] = field(default_factory=dict)
    # The run's cap and the engines' reading now, for the decisions.
    loop_state: Callable[[], tuple[int, Signal]] = lambda: (0, Signal.UNKNOWN)
    # Engines paused for an update now, and when each last resumed from one: what the
    # controller is told, so a pause reads neither stale nor idle (``Orchestrator._polled``).
    updating: set[str] = field(default_factory=set)
    resumed_at: dict[str, float] = field(default_factory=dict)
    # The version and checkpoint the engines are to serve: the last update that reached an
    # engine (or, for a new host, what the run's last acknowledgement named).
    target: tuple[int, str] | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    _suspects: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode is UpdateMode.ROLLING and self.routing is None:
            raise ValueError("rolling updates need the dispatcher's routing to hold engines")

    def add(self, name: str, engine: EngineWeights) -> None:
        """An engine joined the run: no record covers it, so the next ``check`` reads its
        version and brings it to ``target`` if it serves another."""
        self.engines[name] = engine
        self.served.pop(name, None)
        self._suspects.discard(name)

    def remove(self, name: str) -> None:
        """An engine left the run: an update under way leaves it out from now."""
        self.engines.pop(name, None)
        self.served.pop(name, None)
        self.resumed_at.pop(name, None)
        self._suspects.discard(name)

    async def update(self, version: int, checkpoint: str) -> tuple[Decision, ...]:
        """Bring every engine to ``version`` from ``checkpoint``; one decision per engine.
        Each engine's record changes as it resumes, so the turns it serves next carry the
        new version while the others still carry theirs."""
        async with self._lock:
            names = list(self.engines)  # engines may leave meanwhile: each is looked up
            if self.mode is UpdateMode.SYNC:
                done = await asyncio.gather(
                    *(self._one(name, version, checkpoint) for name in names)
                )
            else:
                done = [
                    await self._rolled(name, version, checkpoint)
                    for name in names
                    if name in self.engines
                ]
            if any(not one.error for one in done):
                self.target = (version, checkpoint)
        return tuple(self._decision(one, version) for one in done)

    def suspect(self, name: str) -> None:
        """``name`` restarted or came back up: on record as on its base weights (so a turn
        is never tagged newer than it may be) until the next ``check`` reads it, which then
        treats it as an engine no record covers."""
        self.served[name] = BASE_VERSION
        self._suspects.add(name)

    async def check(self) -> tuple[Decision, ...]:
        """Read every engine's version back. One that lost what the record says it serves
        (restarted: on its base weights), or that no record covers yet (a new host's first
        look), is recorded as serving what it says, at once, and is brought to ``target``
        again, out of routing meanwhile; one whose version agrees with its record (an update
        it failed) is left as it is, unless it is paused (left so by a host that stopped
        mid-update). One that does not answer is left to the monitor (it is down) and checked
        next time."""
        decisions: list[Decision] = []
        async with self._lock:
            if self.target is None:
                return ()
            version, checkpoint = self.target
            for name, engine in list(self.engines.items()):
                try:
                    found = await engine.served_version()
                    paused = await engine.is_paused()
                except Exception:
                    continue
                if name not in self.engines:
                    continue  # it left the run while it was asked
                found_version = BASE_VERSION if found is None else found
                known = None if name in self._suspects else self.served.get(name)
                self._suspects.discard(name)
                self.served[name] = found_version  # the truth until a push confirms another
                if found_version in (version, known) and not paused:
                    continue
                one = await self._rolled(name, version, checkpoint)
                on = "its base weights" if found is None else f"version {found}"
                if paused:
                    lost = f"was left paused on {on}"
                elif found is None:
                    lost = "came back on its base weights"
                else:
                    lost = f"served version {found}, not {version}"
                decisions.append(self._decision(one, version, lost=lost))
        return tuple(decisions)

    async def _rolled(self, name: str, version: int, checkpoint: str) -> EngineUpdate:
        if self.routing is not None:
            self.routing.hold(name)
        try:
            return await self._one(name, version, checkpoint)
        finally:
            if self.routing is not None:
                self.routing.release(name)

    async def _one(self, name: str, version: int, checkpoint: str) -> EngineUpdate:
        self.updating.add(name)
        try:
            one = await self._updated(name, version, checkpoint)
        finally:
            self.updating.discard(name)
            self.resumed_at[name] = self.clock.now()
        self.served[name] = one.version  # the new version, or the old one it kept
        return one

    async def _updated(self, name: str, version: int, checkpoint: str) -> EngineUpdate:
        engine = self.engines[name]
        started = self.clock.now()
        old = self.served.get(name, BASE_VERSION)
        try:
            await engine.pause()
        except Exception as refused:
            return EngineUpdate(name, old, self.clock.now() - started, f"pause: {refused}")
        try:
            await engine.reload(checkpoint)
            await engine.set_version(version)
        except Exception as failed:
            error = f"{type(failed).__name__}: {failed}"
            with contextlib.suppress(Exception):
                await engine.resume()
            return EngineUpdate(name, old, self.clock.now() - started, error)
        try:
            await engine.resume()
        except Exception as failed:  # loaded but not serving: not a version it serves
            return EngineUpdate(name, old, self.clock.now() - started, f"resume: {failed}")
        seconds = self.clock.now() - started
        try:
            found = await engine.served_version()
        except Exception as failed:
            return EngineUpdate(name, old, seconds, f"read back: {failed}")
        if found != version:
            said = "its base weights" if found is None else f"version {found}"
            return EngineUpdate(name, old, seconds, f"it reads back {said}")
        return EngineUpdate(name, version, seconds)

    def _decision(self, one: EngineUpdate, version: int, *, lost: str = "") -> Decision:
        cap, signal = self.loop_state()
        if one.error:
            reason = (
                f"{one.engine} could not load version {version} ({one.error}); "
                f"it serves version {one.version}"
            )
        elif lost:
            again = f"version {version} pushed again after {one.seconds:.1f} s"
            reason = f"{one.engine} {lost}: {again}"
        else:
            reason = f"{one.engine} serves version {version} after {one.seconds:.1f} s"
        return Decision(
            at=self.clock.now(),
            kind=DecisionKind.WEIGHTS,
            cause=Cause.WEIGHTS,
            signal=signal,
            cap_before=cap,
            cap_after=cap,
            reason=f"{reason} ({'version check' if lost else self.mode.value + ' update'})",
            alert=bool(one.error),
            engine=one.engine,
            figures={
                "version": one.version,
                "target": version,
                "seconds": round(one.seconds, 3),
            },
        )
