"""An in-process simulator served over real TCP, for the HTTP tests of this folder."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from inference.sim.config import EngineConfig
from inference.sim.cost import StepCost
from inference.sim.engine import Engine
from inference.sim.http11 import start_server
from inference.sim.server import EngineLoop, SimServer

# 2 ms a step plus 0.1 ms a token: fast tests, yet a long request takes a while.
TEST_COST = StepCost(
    step_overhead_s=0.002, per_batched_token_s=1e-4, per_seq_s=0.0, per_context_token_s=0.0
)


@dataclass(frozen=True)
class SimHttpServer:
    url: str
    engine: Engine


@contextlib.asynccontextmanager
async def serve_sim(dev_mode: bool = False, reload_s: float = 0.0) -> AsyncIterator[SimHttpServer]:
    """A test engine on an ephemeral port, its loop running, until the block exits."""
    config = EngineConfig(
        model_name="sim-test", block_size=16, num_gpu_blocks=257, max_model_len=2048
    )
    engine = Engine(config, TEST_COST, reload_s=reload_s)
    loop = EngineLoop(engine)
    tcp = await start_server(SimServer(loop, dev_mode).handle, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    runner = asyncio.create_task(loop.run())
    try:
        yield SimHttpServer(f"http://127.0.0.1:{port}", engine)
    finally:
        runner.cancel()
        tcp.close()
        await tcp.wait_closed()


@pytest.fixture
async def sim_server() -> AsyncIterator[SimHttpServer]:
    async with serve_sim() as server:
        yield server
