"""The real-time server over real HTTP, with the stock OpenAI client and raw httpx."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference.sim import server as server_module
from tests.sim.conftest import SimHttpServer


def client(server: SimHttpServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


async def test_models_lists_the_served_model_with_its_max_model_len(
    sim_server: SimHttpServer,
) -> None:
    models = await client(sim_server).models.list()
    assert [model.id for model in models.data] == ["sim-test"]
    assert models.data[0].model_extra["max_model_len"] == 2048


async def test_completions_whole_and_streamed_agree(sim_server: SimHttpServer) -> None:
    api = client(sim_server)
    whole = await api.completions.create(
        model="sim-test", prompt="Once upon a time", max_tokens=12, seed=5, logprobs=2
    )
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and whole.usage.completion_tokens == 12
    assert len(choice.logprobs.tokens) == 12 and len(choice.logprobs.top_logprobs[0]) == 2
    stream = await api.completions.create(
        model="sim-test", prompt="Once upon a time", max_tokens=12, seed=5, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(chunk.choices[0].text for chunk in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(chunk.choices[0].finish_reason is None for chunk in chunks[:-1])


async def test_chat_completions_with_n_logprobs_and_usage(sim_server: SimHttpServer) -> None:
    api = client(sim_server)
    messages = [{"role": "user", "content": "Say something."}]
    whole = await api.chat.completions.create(
        model="sim-test", messages=messages, max_tokens=6, n=3, logprobs=True, top_logprobs=3
    )
    assert [choice.index for choice in whole.choices] == [0, 1, 2]
    assert len({choice.message.content for choice in whole.choices}) == 3
    assert whole.usage.completion_tokens == 18
    entry = whole.choices[0].logprobs.content[0]
    assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].token == entry.token
    stream = await api.chat.completions.create(
        model="sim-test",
        messages=messages,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == 6 and chunks[-1].choices == []
    assert chunks[-2].choices[0].finish_reason == "length"


async def test_stop_strings_cut_the_text_and_say_stop(sim_server: SimHttpServer) -> None:
    api = client(sim_server)
    free = await api.completions.create(model="sim-test", prompt="x", max_tokens=30, seed=1)
    stop = free.choices[0].text[20:24]
    stopped = await api.completions.create(
        model="sim-test", prompt="x", max_tokens=30, seed=1, stop=[stop]
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == free.choices[0].text[: free.choices[0].text.find(stop)]


async def test_bad_requests_get_openai_errors(sim_server: SimHttpServer) -> None:
    api = client(sim_server)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        await api.completions.create(model="other", prompt="x")
    with pytest.raises(openai.BadRequestError, match="cannot be greater than max_model_len=2048"):
        await api.completions.create(model="sim-test", prompt="x", max_tokens=5000)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 2048"):
        await api.completions.create(model="sim-test", prompt=[7] * 2048, max_tokens=1)
    async with httpx.AsyncClient() as raw:
        response = await raw.post(f"{sim_server.url}/v1/completions", content=b"{not json")
        assert (
            response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
        )
        assert (await raw.get(f"{sim_server.url}/v1/completions")).status_code == 405
        assert (await raw.get(f"{sim_server.url}/nowhere")).status_code == 404
    assert not sim_server.engine.has_unfinished_requests()


async def test_max_tokens_past_the_room_left_is_clamped_as_vllm_does(
    sim_server: SimHttpServer,
) -> None:
    # A turn 40 tokens short of max_model_len (2048) asking for 100: vLLM serves 40, "length".
    api = client(sim_server)
    completion = await api.completions.create(
        model="sim-test", prompt=[7] * 2008, max_tokens=100, seed=1
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 40
    history = "word " * 1600  # about 2,000 tokens of earlier turns
    chat = await api.chat.completions.create(
        model="sim-test",
        messages=[{"role": "user", "content": history}],
        max_completion_tokens=2000,
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage.prompt_tokens + chat.usage.completion_tokens == 2048


async def test_a_chat_re_sent_with_its_answer_hits_the_prefix_cache_on_the_answer(
    sim_server: SimHttpServer,
) -> None:
    # The same conversation over /v1/completions hits every full block of prompt and answer
    # (the last sampled token has no KV); the chat template must give the same ids.
    api = client(sim_server)
    messages = [{"role": "user", "content": "Tell me a long story, please. " * 60}]
    first = await api.chat.completions.create(
        model="sim-test", messages=messages, max_tokens=400, seed=2
    )
    held = first.usage.prompt_tokens + first.usage.completion_tokens - 1
    counters = sim_server.engine.counters
    hits_before = counters.prefix_cache_hits
    answer = {"role": "assistant", "content": first.choices[0].message.content}
    await api.chat.completions.create(
        model="sim-test",
        messages=[*messages, answer, {"role": "user", "content": "And then?"}],
        max_tokens=1,
    )
    assert counters.prefix_cache_hits - hits_before == held // 16 * 16


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("completions", {"prompt": [10**30]}, "is out of vocabulary"),
        ("completions", {"prompt": "x", "sim_length": "fixed:inf"}, "length mean must be"),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "min_tokens": 10**5, "stop": "zz"},
            r"min_tokens \(100000\) must be <= max_tokens",
        ),
        ("completions", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
async def test_malformed_bodies_get_a_400_and_the_server_serves_on(
    sim_server: SimHttpServer, path: str, body: object, message: str
) -> None:
    url = f"{sim_server.url}/v1/{path}"
    async with httpx.AsyncClient() as raw:
        if isinstance(body, bytes):
            response = await raw.post(url, content=body)
        else:
            response = await raw.post(url, json=body)
        after = await raw.post(f"{sim_server.url}/v1/completions", json={"prompt": "x"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert re.search(message, error["message"])
    assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] == 16


async def test_a_bug_in_a_handler_answers_a_json_500_and_is_logged(
    sim_server: SimHttpServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(body: object, model_name: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(server_module, "parse_completion", broken)
    async with httpx.AsyncClient() as raw:
        with caplog.at_level(logging.ERROR, logger=server_module.__name__):
            response = await raw.post(f"{sim_server.url}/v1/completions", json={"prompt": "x"})
        assert (await raw.get(f"{sim_server.url}/health")).status_code == 200
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "InternalServerError"
    assert "RuntimeError: a bug" in caplog.text


async def wait_until_idle(server: SimHttpServer) -> None:
    for _ in range(200):
        if not server.engine.has_unfinished_requests():
            return
        await asyncio.sleep(0.01)


async def test_a_stream_whose_client_disconnects_is_aborted_and_frees_its_kv(
    sim_server: SimHttpServer,
) -> None:
    body = {"model": "sim-test", "prompt": "hello " * 200, "max_tokens": 1500, "stream": True}
    async with httpx.AsyncClient() as raw:
        async with raw.stream("POST", f"{sim_server.url}/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    json.loads(line[len("data: ") :])
                    break
        assert sim_server.engine.kv.num_free_blocks < 256  # it was holding blocks
    await wait_until_idle(sim_server)
    assert not sim_server.engine.has_unfinished_requests()
    assert sim_server.engine.kv.num_free_blocks == 256
    assert sim_server.engine.counters.request_success["abort"] == 1


async def test_a_waiting_request_whose_client_times_out_is_aborted(
    sim_server: SimHttpServer,
) -> None:
    body = {"model": "sim-test", "prompt": "hello", "max_tokens": 1500}
    async with httpx.AsyncClient(timeout=0.05) as raw:
        with pytest.raises(httpx.ReadTimeout):
            await raw.post(f"{sim_server.url}/v1/completions", json=body)
    await wait_until_idle(sim_server)
    assert not sim_server.engine.has_unfinished_requests()
    assert sim_server.engine.kv.num_free_blocks == 256


async def test_a_head_request_gets_the_get_head_and_the_connection_serves_on(
    sim_server: SimHttpServer,
) -> None:
    peers: set[tuple[str, int]] = set()
    async with httpx.AsyncClient() as raw:
        models = await raw.get(f"{sim_server.url}/v1/models")
        heads = [await raw.head(f"{sim_server.url}{path}") for path in ("/health", "/v1/models")]
        refused = await raw.head(f"{sim_server.url}/v1/completions")
        after = await raw.get(f"{sim_server.url}/v1/models")
        for response in (models, *heads, refused, after):
            peers.add(response.extensions["network_stream"].get_extra_info("client_addr"))
    assert [(r.status_code, r.content) for r in heads] == [(200, b""), (200, b"")]
    assert heads[1].headers["content-length"] == str(len(models.content))  # as GET would send
    assert refused.status_code == 405 and refused.content == b""
    assert after.json() == models.json()
    assert len(peers) == 1  # one kept-alive connection throughout


async def test_metrics_and_health_over_http(sim_server: SimHttpServer) -> None:
    await client(sim_server).completions.create(model="sim-test", prompt="a b c", max_tokens=3)
    async with httpx.AsyncClient() as raw:
        assert (await raw.get(f"{sim_server.url}/health")).status_code == 200
        response = await raw.get(f"{sim_server.url}/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    families = {family.name for family in text_string_to_metric_families(response.text)}
    assert {"vllm:num_requests_running", "vllm:generation_tokens"} <= families
    assert 'vllm:generation_tokens_total{engine="0",model_name="sim-test"} 3.0' in response.text
