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
not confirm. The relay is plain asyncio over an injected client per engine and an injected
clock, so it runs in a worker, a test and virtual time alike.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from workers.core.clock import Clock
from workers.core.decisions import Cause, Decision, DecisionKind, Signal


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
    engines: Mapping[str, EngineWeights]
    clock: Clock
    mode: UpdateMode = UpdateMode.SYNC
    routing: Routing | None = None  # needed in rolling mode
    # The version each engine serves, as far as the relay has seen one confirmed.
    served: dict[str, int] = field(default_factory=dict)
    # The run's cap and the engines' reading now, for the decisions.
    loop_state: Callable[[], tuple[int, Signal]] = lambda: (0, Signal.UNKNOWN)

    def __post_init__(self) -> None:
        if self.mode is UpdateMode.ROLLING and self.routing is None:
            raise ValueError("rolling updates need the dispatcher's routing to hold engines")

    async def update(self, version: int, checkpoint: str) -> tuple[Decision, ...]:
        """Bring every engine to ``version`` from ``checkpoint``; one decision per engine."""
        if self.mode is UpdateMode.SYNC:
            done = await asyncio.gather(
                *(self._one(name, version, checkpoint) for name in self.engines)
            )
        else:
            done = [await self._rolled(name, version, checkpoint) for name in self.engines]
        for one in done:
            if not one.error:
                self.served[one.engine] = one.version
        return tuple(self._decision(one, version) for one in done)

    async def _rolled(self, name: str, version: int, checkpoint: str) -> EngineUpdate:
        assert self.routing is not None
        self.routing.hold(name)
        try:
            return await self._one(name, version, checkpoint)
        finally:
            self.routing.release(name)

    async def _one(self, name: str, version: int, checkpoint: str) -> EngineUpdate:
        engine = self.engines[name]
        started = self.clock.now()
        old = self.served.get(name, 0)
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
        return EngineUpdate(name, version, self.clock.now() - started)

    def _decision(self, one: EngineUpdate, version: int) -> Decision:
        cap, signal = self.loop_state()
        if one.error:
            reason = (
                f"{one.engine} could not load version {version} ({one.error}); "
                f"it serves version {one.version}"
            )
        else:
            reason = f"{one.engine} serves version {version} after {one.seconds:.1f} s"
        return Decision(
            at=self.clock.now(),
            kind=DecisionKind.WEIGHTS,
            cause=Cause.WEIGHTS,
            signal=signal,
            cap_before=cap,
            cap_after=cap,
            reason=f"{reason} ({self.mode.value} update)",
            alert=bool(one.error),
            engine=one.engine,
            figures={
                "version": one.version,
                "target": version,
                "seconds": round(one.seconds, 3),
            },
        )
