"""Token ids both ways, as Pacer's rollouts use them: vLLM's ``/tokenize`` and
``return_token_ids``, and a context that grows in place as ids hits the prefix cache."""

from __future__ import annotations

import json

import httpx

from inference.sim import text
from tests.sim.conftest import SimHttpServer


async def test_tokenize_gives_the_ids_a_completion_sees_for_the_same_text(
    sim_server: SimHttpServer,
) -> None:
    async with httpx.AsyncClient(base_url=sim_server.url) as http:
        said = "Compute 12 plus 30, then say the result twice."
        tokens = (
            await http.post("/tokenize", json={"prompt": said, "add_special_tokens": True})
        ).json()
        done = (
            await http.post(
                "/v1/completions",
                json={"prompt": said, "max_tokens": 8, "return_token_ids": True, "seed": 3},
            )
        ).json()
    choice = done["choices"][0]
    assert tokens["tokens"] == choice["prompt_token_ids"] == text.encode(said).tolist()
    assert (tokens["count"], tokens["max_model_len"]) == (len(tokens["tokens"]), 2048)
    assert len(choice["token_ids"]) == done["usage"]["completion_tokens"] == 8
    assert text.encode(choice["text"]).tolist() == choice["token_ids"]


async def test_streamed_token_ids_add_up_to_the_whole_answer(sim_server: SimHttpServer) -> None:
    body = {"prompt": "a b c d", "max_tokens": 10, "seed": 4, "return_token_ids": True}
    async with httpx.AsyncClient(base_url=sim_server.url) as http:
        whole = (await http.post("/v1/completions", json=body)).json()["choices"][0]
        async with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as reply:
            chunks = [line[6:] async for line in reply.aiter_lines() if line.startswith("data: {")]
    parts = [json.loads(chunk)["choices"][0] for chunk in chunks]
    assert [i for part in parts for i in part["token_ids"]] == whole["token_ids"]
    assert parts[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert all(part["prompt_token_ids"] is None for part in parts[1:])


async def test_a_context_grown_in_place_as_ids_hits_the_prefix_cache(
    sim_server: SimHttpServer,
) -> None:
    async with httpx.AsyncClient(base_url=sim_server.url) as http:
        prompt = text.encode(" ".join(["word"] * 300)).tolist()
        first = (
            await http.post(
                "/v1/completions",
                json={
                    "prompt": prompt,
                    "max_tokens": 64,
                    "ignore_eos": True,
                    "return_token_ids": True,
                },
            )
        ).json()["choices"][0]
        observation = (await http.post("/tokenize", json={"prompt": " tool says ok"})).json()
        grown = prompt + first["token_ids"] + observation["tokens"]
        before = sim_server.engine.counters.prefix_cache_hits
        await http.post("/v1/completions", json={"prompt": grown, "max_tokens": 4})
    hits = sim_server.engine.counters.prefix_cache_hits - before
    block = sim_server.engine.config.block_size
    assert hits >= (len(prompt) + 64) // block * block - block  # all but the last partial block


async def test_tokenize_refuses_a_body_without_a_prompt(sim_server: SimHttpServer) -> None:
    async with httpx.AsyncClient(base_url=sim_server.url) as http:
        refused = await http.post("/tokenize", json={"prompt": 7})
    assert refused.status_code == 400
    assert "prompt must be a string" in refused.json()["error"]["message"]
