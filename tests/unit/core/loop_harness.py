"""A control loop driven by hand: a scripted monitor, episodes that end when a test says so,
and a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tests.unit.core.builders import sample
from workers.core.clock import ManualClock
from workers.core.control_loop import ControlLoop, LoopConfig, Steering
from workers.core.controller.concurrency import Controller
from workers.core.controller.policies.reference import ReferencePolicy
from workers.core.controller.records import ControllerConfig
from workers.core.decisions import DecisionKind
from workers.core.dispatch.episodes import EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.permits import EpisodeKind
from workers.core.dispatch.records import DispatcherConfig
from workers.core.samples import LoadSample

UNPACED = DispatcherConfig(pacing=PacingConfig(cap_fraction=1.0))


PERIOD = 1.0


@dataclass(frozen=True, slots=True)
class Done:
    """An episode's result, as the rollout client's TurnResult shows it to the loop."""

    tokens: int
    ok: bool = True


class Episodes:
    """Episodes that run until the test ends them; records which ones were cancelled."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, int], asyncio.Future[Done]] = {}
        self.aborted: list[tuple[str, int]] = []
        self.engine_of: dict[tuple[str, int], str] = {}

    async def __call__(self, ticket: EpisodeTicket[int], engine: str) -> Done:
        key = (ticket.group_id, ticket.index)
        self.engine_of[key] = engine
        future: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self.running[key] = future
        try:
            return await future
        except asyncio.CancelledError:
            self.aborted.append(key)  # where the rollout client's HTTP request is closed
            raise
        finally:
            del self.running[key]

    def finish(self, count: int, result: Done = Done(tokens=40)) -> None:
        """End the ``count`` oldest running episodes with ``result``."""
        for future in self._oldest(count):
            future.set_result(result)

    def fail(self, count: int) -> None:
        for future in self._oldest(count):
            future.set_exception(RuntimeError("engine said 500"))

    def _oldest(self, count: int) -> list[asyncio.Future[Done]]:
        """Episodes not yet told how they end (an ended one stays listed until it resumes)."""
        return [future for future in self.running.values() if not future.done()][:count]


class Monitor:
    """The injected poll: answers with ``samples`` or raises ``error``; counts its calls."""

    def __init__(self) -> None:
        self.samples: list[LoadSample] = [sample()]
        self.error: Exception | None = None
        self.calls = 0

    async def __call__(self) -> list[LoadSample]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.samples


class LoopHarness:
    def __init__(
        self,
        controller: Steering,
        log_size: int = 10_000,
        engines: tuple[str, ...] = ("e0",),
        dispatcher_config: DispatcherConfig = UNPACED,
    ) -> None:
        self.clock = ManualClock()
        self.episodes = Episodes()
        self.monitor = Monitor()
        self.finished: list[FinishedEpisode[int, Done]] = []
        self.left: list[str] = []  # engines whose drain ended
        self.controller = controller
        self.loop: ControlLoop[int, Done] = ControlLoop(
            controller=controller,
            poll=self.monitor,
            run_episode=self.episodes,
            clock=self.clock,
            engines=engines,
            config=LoopConfig(poll_period=PERIOD, decision_log_size=log_size),
            dispatcher_config=dispatcher_config,
            on_finished=self.finished.append,
            on_left=self.left.append,
        )
        self._groups = 0

    def submit(self, groups: int, size: int = 1) -> None:
        for _ in range(groups):
            self._groups += 1
            spec = GroupSpec(f"g{self._groups}", EpisodeKind.TRAIN, "math", 0, (0,) * size)
            self.loop.dispatcher.submit(spec)

    async def settle(self) -> None:
        """Let every ready task and callback run: episodes end, permits return, refills start."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    @property
    def inflight(self) -> int:
        return self.loop.dispatcher.inflight

    def kinds(self) -> list[DecisionKind]:
        return [d.kind for d in self.loop.decisions]


MakeLoop = Callable[..., Awaitable[LoopHarness]]


def reference(start: int | None = 8, **config: Any) -> Controller:
    return Controller(ControllerConfig(initial_inflight=start, **config), ReferencePolicy())
