"""Engines behind ``httpx.MockTransport`` for the monitor's tests: answers per host and path."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable

import httpx

from inference.metrics.client import MetricsClient, ScrapeConfig
from inference.metrics.endpoints import EngineSpec
from inference.metrics.health import HealthConfig
from inference.metrics.monitor import EngineMonitor, MonitorConfig, PollResult
from workers.core.clock import ManualClock
from workers.core.samples import EngineRole, LoadSample

Answer = Callable[[], httpx.Response]
MODELS = json.dumps({"data": [{"id": "m", "max_model_len": 4096}]})


class Engines:
    """Answers per host and path; counts requests; a host may hang or raise."""

    def __init__(self) -> None:
        self.metrics: dict[str, Answer] = {}
        self.models: dict[str, Answer] = {}
        self.requests: Counter[tuple[str, str]] = Counter()
        self.release = asyncio.Event()

    def serve(self, host: str, text: str) -> None:
        self.metrics[host] = lambda: httpx.Response(200, text=text)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        self.requests[host, path] += 1
        table = self.metrics if path == "/metrics" else self.models
        answer = table.get(host, lambda: httpx.Response(200, text=MODELS))
        response = answer()
        if response.status_code == 599:  # stands for "never answers"
            await self.release.wait()
        return response


def refuse() -> httpx.Response:
    raise httpx.ConnectError("connection refused")


def build(
    engines: Engines,
    specs: list[EngineSpec],
    clock: ManualClock,
    scrape: ScrapeConfig | None = None,
    health: HealthConfig | None = None,
) -> tuple[MetricsClient, EngineMonitor]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(engines.handle))
    client = MetricsClient(http, scrape or ScrapeConfig(total_s=0.2))
    return client, EngineMonitor(
        specs, client, clock, MonitorConfig(health=health or HealthConfig())
    )


def spec(name: str, role: EngineRole = EngineRole.UNIFIED) -> EngineSpec:
    return EngineSpec(name, f"http://{name}:8000", role)


def by_id(result: PollResult) -> dict[str, LoadSample]:
    return {s.engine_id: s for s in result.samples}
