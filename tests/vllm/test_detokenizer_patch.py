"""The detokenizer crash, on a real engine: unpatched it kills vLLM, patched it does not.

The tiny model's output layer is 64 rows wider than its tokenizer and its weights are random, so
at temperature 2 about one sampled token in nine has no tokenizer piece; asking for logprobs
sends each of them through the code that crashes.
"""

import asyncio
import subprocess
from collections import Counter

import httpx
import pytest

from tests.vllm.conftest import PATCH_ACTIVE, SERVED_MODEL, Engine, EngineFactory

pytestmark = pytest.mark.vllm

LOGPROBS_REQUEST = {
    "model": SERVED_MODEL,
    "prompt": "Bako lite mu",
    "max_tokens": 16,
    "temperature": 2.0,
    "logprobs": 1,
    # Tokens come back as "token_id:N", so the test can see which ids were sampled.
    "return_tokens_as_token_ids": True,
}
PATCHED_REQUESTS = 200
CONCURRENCY = 16
# At ~11 % unknown ids per token, 16-token requests all but surely hit one within a few.
CONTROL_MAX_REQUESTS = 20
# vLLM tears itself down within seconds once its output loop has died.
EXIT_TIMEOUT_S = 60.0
CRASH = "TypeError: 'NoneType' object is not iterable"


def sampled_ids(completion: dict) -> list[int]:
    return [int(token.removeprefix("token_id:")) for token in completion["logprobs"]["tokens"]]


async def test_unpatched_engine_dies(engine_factory: EngineFactory) -> None:
    engine = engine_factory("--allow-unpatched", env={"VLLM_PLUGINS": ""})
    assert PATCH_ACTIVE not in engine.log()
    statuses = []
    async with httpx.AsyncClient(base_url=engine.url, timeout=60.0) as client:
        for _ in range(CONTROL_MAX_REQUESTS):
            response = await client.post("/v1/completions", json=LOGPROBS_REQUEST)
            statuses.append(response.status_code)
            if response.status_code != 200:
                break
    assert statuses[-1] == 500, f"no failure in {len(statuses)} requests: {statuses}"
    print(f"unpatched: statuses {statuses}; the server exits next")
    try:
        engine.process.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the unpatched engine answered 500 but still runs after {EXIT_TIMEOUT_S} s")
    assert CRASH in engine.log()


async def test_patched_engine_survives_load(engine: Engine, first_unknown_id: int) -> None:
    assert PATCH_ACTIVE in engine.log()
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(client: httpx.AsyncClient) -> httpx.Response:
        async with gate:
            return await client.post("/v1/completions", json=LOGPROBS_REQUEST)

    async with httpx.AsyncClient(base_url=engine.url, timeout=60.0) as client:
        responses = await asyncio.gather(*(one(client) for _ in range(PATCHED_REQUESTS)))
        health = await client.get("/health")

    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: PATCHED_REQUESTS}
    ids = [i for r in responses for choice in r.json()["choices"] for i in sampled_ids(choice)]
    unknown = sum(i >= first_unknown_id for i in ids)
    print(
        f"patched: {PATCHED_REQUESTS} requests at concurrency {CONCURRENCY}: statuses "
        f"{dict(statuses)}, {unknown} of {len(ids)} sampled ids out of vocabulary, "
        f"/health afterwards {health.status_code}"
    )
    assert unknown > 0, f"no unknown id among {len(ids)} sampled tokens: the load proves nothing"
    assert health.status_code == 200
    assert engine.process.poll() is None
