"""The hosted run's side of an engine joining or leaving: what the runtime keeps per engine.

The core decides (``Orchestrator.add_engine``, ``remove_engine``); this keeps the runtime's
own per-engine parts in step with it: the engine's spec read from the run's stored config
(where the web process put it, names resolved), its rollout client and weights client, the
monitor's polling and the reporter's registered name. An engine that left is forgotten by
all of them once its drain has ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx

from controlplane.runs.services import run_config_resolve
from inference.rollout_client import RolloutClient
from inference.weights_client import EngineWeightsClient
from workers.core.decisions import Decision
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.runtime import store
from workers.runtime.engines import engine_specs
from workers.runtime.foreground import EnginePoll
from workers.runtime.reporter import RunReporter

Call = Callable[..., Awaitable[Any]]  # runs a function in the run's database thread


class RunEngines:
    def __init__(
        self,
        *,
        run_id: int,
        model: str,
        session: aiohttp.ClientSession,
        weights_http: httpx.AsyncClient | None,
        poll: EnginePoll,
        reporter: RunReporter,
        call: Call,
    ) -> None:
        self.run_id = run_id
        self._model = model
        self._session = session
        self._weights_http = weights_http  # None: the run relays no weights
        self._poll = poll
        self._reporter = reporter
        self._call = call
        self.orchestrator: Orchestrator | None = None  # set once built (it calls ``left``)

    def has(self, name: str) -> bool:
        return self.orchestrator is not None and name in self.orchestrator.loop.engines

    async def add(self, name: str) -> Decision:
        """``name`` joins, as the stored config names it; ValueError when the config does not
        (the web process writes it there before it sends the command) or it is in already."""
        assert self.orchestrator is not None
        run = await self._call(store.load_run, self.run_id)
        config, names = await self._call(run_config_resolve, run.config)
        found = [
            (spec, registered)
            for spec, registered in zip(engine_specs(config.engines, names), names, strict=True)
            if spec.name == name
        ]
        if not found:
            raise ValueError(f"engine {name} is not in the run's stored config")
        spec, registered = found[0]
        client = RolloutClient(self._session, base_url=spec.base_url, model=self._model)
        http = self._weights_http
        weights = None if http is None else EngineWeightsClient(http, spec.base_url)
        decision = self.orchestrator.add_engine(name, client, weights)
        self._poll.add(spec)
        self._reporter.register(name, registered)
        return decision

    def remove(self, name: str, drain_s: float) -> Decision:
        assert self.orchestrator is not None
        return self.orchestrator.remove_engine(name, drain_s)

    def left(self, name: str) -> None:
        """The orchestrator's word that ``name``'s drain ended: polled and reported no more."""
        self._poll.remove(name)
        self._reporter.forget(name)
