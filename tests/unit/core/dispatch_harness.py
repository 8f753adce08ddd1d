"""A dispatcher driven by hand: a fake engine whose episodes end when a test says so, and a
manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from workers.core.clock import ManualClock
from workers.core.dispatch.dispatcher import Dispatcher
from workers.core.dispatch.episodes import EpisodeTicket, FinishedEpisode, GroupSpec
from workers.core.dispatch.pacing import PacingConfig
from workers.core.dispatch.permits import EpisodeKind
from workers.core.dispatch.records import DispatcherConfig

TRAIN, EVAL = EpisodeKind.TRAIN, EpisodeKind.EVAL
UNPACED = DispatcherConfig(pacing=PacingConfig(cap_fraction=1.0))


class FakeEngines:
    """Episodes that run until the test finishes or fails them; records aborts."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, int], asyncio.Future[int]] = {}
        self.engine_of: dict[tuple[str, int], str] = {}
        self.aborted: list[tuple[str, int]] = []

    async def __call__(self, ticket: EpisodeTicket[int], engine: str) -> int:
        key = (ticket.group_id, ticket.index)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.running[key] = future
        self.engine_of[key] = engine
        try:
            return await future
        except asyncio.CancelledError:
            self.aborted.append(key)  # where the real client closes its HTTP request
            raise
        finally:
            del self.running[key]

    def finish(self, group: str, *indices: int, tokens: int = 10) -> None:
        for index in indices:
            self.running[(group, index)].set_result(tokens)

    def fail(self, group: str, index: int) -> None:
        self.running[(group, index)].set_exception(RuntimeError("engine said 500"))

    def live(self, group: str) -> list[int]:
        return sorted(i for g, i in self.running if g == group)


class Harness:
    def __init__(
        self, cap: int, config: DispatcherConfig = UNPACED, engines: tuple[str, ...] = ("a",)
    ) -> None:
        self.clock = ManualClock()
        self.engines = FakeEngines()
        self.finished: list[FinishedEpisode[int, int]] = []
        self.dispatcher: Dispatcher[int, int] = Dispatcher(
            run_episode=self.engines,
            on_finished=self.finished.append,
            clock=self.clock,
            cap=cap,
            config=config,
            engines=engines,
        )

    def submit(self, group: str, size: int = 4, kind: EpisodeKind = TRAIN, version: int = 0):
        spec = GroupSpec(group, kind, "math", version, tuple(range(size)))
        return self.dispatcher.submit(spec)

    async def settle(self) -> None:
        for _ in range(6):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    @property
    def inflight(self) -> int:
        return self.dispatcher.inflight


MakeHarness = Callable[..., Harness]


async def started(count_groups: int, h: Harness, size: int = 4, gap: float = 1.0) -> None:
    for n in range(count_groups):
        h.submit(f"g{n}", size)
        await h.advance(gap)
