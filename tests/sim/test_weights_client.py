"""The relay's HTTP client against a simulator process serving vLLM's weight routes (and one
that does not): versions read back, a failed reload and a missing route say why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference.weights_client import EngineWeightsClient, WeightsError
from tests.conftest import free_port, stop_process_group
from tests.integration.hosting import SimEngine, start_sim, wait_healthy
from tests.model_folders import safetensors


@pytest.fixture
def sim(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SimEngine]:
    dev = getattr(request, "param", True)
    engine = start_sim(
        tmp_path / "sim.log",
        free_port(),
        1,
        "--reload-s",
        "0.1",
        env={"VLLM_SERVER_DEV_MODE": "1" if dev else "0"},
    )
    try:
        wait_healthy(engine)
        yield engine
    finally:
        stop_process_group(engine.process)


async def test_an_update_through_the_client_is_read_back(sim: SimEngine, tmp_path: Path) -> None:
    checkpoint = tmp_path / "v7"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(safetensors())
    async with httpx.AsyncClient() as http:
        engine = EngineWeightsClient(http, f"{sim.url}/v1")  # the OpenAI base, as configured
        assert await engine.served_version() is None  # "default": its base weights
        assert await engine.is_paused() is False
        await engine.pause()
        assert await engine.is_paused() is True
        await engine.reload(str(checkpoint))
        await engine.set_version(7)
        await engine.resume()
        assert await engine.served_version() == 7
        assert await engine.is_paused() is False
        with pytest.raises(WeightsError, match=r"POST /collective_rpc: 500"):
            await engine.reload(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("sim", [False], indirect=True)
async def test_an_engine_without_the_dev_routes_says_what_to_turn_on(sim: SimEngine) -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(WeightsError, match="VLLM_SERVER_DEV_MODE=1"):
            await EngineWeightsClient(http, sim.url).pause()
