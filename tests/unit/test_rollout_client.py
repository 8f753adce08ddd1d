"""The rollout client: the request it sends, the record it returns, and that a cancelled or
timed-out turn closes its connection (a real socket here; a real vLLM in tests/vllm)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from inference.rollout_client import RolloutClient, RolloutConfig
from tests.local_server import LocalServer
from workers.core.turns import Turn, TurnResult

URL = "http://engine:8000"


def completion(
    text: str = "four", tokens: int = 3, finish: str = "length", logprobs: Any = None
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"token_logprobs": logprobs}
    return {"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}}


def mocked(
    handler: Callable[[httpx.Request], httpx.Response], config: RolloutConfig | None = None
) -> RolloutClient:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return RolloutClient(http, base_url=URL + "/", model="policy", config=config)


async def test_sends_one_completion_request_and_returns_what_the_engine_generated() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json=completion(text=" 4", tokens=2, finish="stop", logprobs=[-0.1, -0.2])
        )

    turn = Turn(prompt=(5, 6, 7), max_tokens=16, temperature=0.5, logprobs=1, ignore_eos=True)
    result = await mocked(handler).complete(turn)

    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == f"{URL}/v1/completions"
    assert json.loads(request.content) == {
        "model": "policy",
        "prompt": [5, 6, 7],
        "max_tokens": 16,
        "temperature": 0.5,
        "logprobs": 1,
        "ignore_eos": True,
    }
    assert result.ok
    assert (result.tokens, result.text, result.finish_reason) == (2, " 4", "stop")
    assert result.token_logprobs == (-0.1, -0.2)


async def test_a_text_prompt_goes_as_text_and_unasked_options_are_left_out() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=completion())

    result = await mocked(handler).complete(Turn(prompt="2 + 2 =", max_tokens=4))

    assert bodies == [{"model": "policy", "prompt": "2 + 2 =", "max_tokens": 4, "temperature": 1.0}]
    assert result.token_logprobs is None


async def test_logprobs_come_back_per_sampled_token() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion(tokens=3, logprobs=[-0.5, None, -2]))

    result = await mocked(handler).complete(Turn(prompt="x", max_tokens=3, logprobs=0))

    assert result.token_logprobs == (-0.5, None, -2.0)


async def test_an_engine_error_is_a_failed_result_naming_the_status_and_body() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "EngineCore died"}})

    result = await mocked(handler).complete(Turn(prompt="x", max_tokens=3))

    assert not result.ok
    assert result.tokens == 0
    assert result.error is not None
    assert "HTTP 500" in result.error
    assert "EngineCore died" in result.error
    assert f"{URL}/v1/completions" in result.error


async def test_a_long_error_body_is_cut_to_the_configured_length() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="x" * 10_000)

    config = RolloutConfig(max_error_chars=100)
    result = await mocked(handler, config).complete(Turn(prompt="x", max_tokens=3))

    assert result.error is not None
    assert len(result.error) < 200
    assert "chars]" in result.error


@pytest.mark.parametrize(
    "body",
    [
        b"<html>bad gateway</html>",
        json.dumps({"choices": []}).encode(),
        json.dumps({"choices": [{"text": "a"}]}).encode(),
        json.dumps(completion(tokens=-1)).encode(),
        json.dumps(completion(tokens=True)).encode(),
        json.dumps({**completion(), "choices": [{"text": 7}]}).encode(),
    ],
    ids=["html", "no-choice", "no-usage", "negative-tokens", "bool-tokens", "text-not-str"],
)
async def test_a_malformed_answer_is_a_failed_result(body: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    result = await mocked(handler).complete(Turn(prompt="x", max_tokens=3))

    assert not result.ok
    assert result.error is not None
    assert "malformed completion response" in result.error


async def test_asked_logprobs_missing_from_the_answer_is_a_failed_result() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion())

    result = await mocked(handler).complete(Turn(prompt="x", max_tokens=3, logprobs=1))

    assert result.error is not None
    assert "malformed completion response" in result.error


async def test_a_refused_connection_is_a_failed_result() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again on exit: nothing listens there
    async with httpx.AsyncClient() as http:
        client = RolloutClient(http, base_url=f"http://127.0.0.1:{port}", model="policy")
        result = await client.complete(Turn(prompt="x", max_tokens=3))

    assert result.error is not None
    assert "ConnectError" in result.error


class SilentEngine(LocalServer):
    """Reads one request and never answers; records when the client hangs up."""

    def __init__(self) -> None:
        self.received = asyncio.Event()
        self.hung_up = asyncio.Event()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.received.set()
        if await reader.read(1) == b"":  # EOF: the client closed the connection
            self.hung_up.set()
        writer.close()


@pytest.fixture
async def silent_engine() -> AsyncIterator[SilentEngine]:
    engine = SilentEngine()
    await engine.start()
    yield engine
    await engine.stop()


async def test_cancelling_the_turn_closes_its_connection(silent_engine: SilentEngine) -> None:
    async with httpx.AsyncClient() as http:
        client = RolloutClient(http, base_url=silent_engine.url, model="policy")
        task = asyncio.create_task(client.complete(Turn(prompt="x", max_tokens=3)))
        await asyncio.wait_for(silent_engine.received.wait(), 5)
        assert not silent_engine.hung_up.is_set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(silent_engine.hung_up.wait(), 5)


async def test_a_turn_past_its_time_limit_fails_and_closes_its_connection(
    silent_engine: SilentEngine,
) -> None:
    async with httpx.AsyncClient() as http:
        client = RolloutClient(
            http, base_url=silent_engine.url, model="policy", config=RolloutConfig(turn_s=0.2)
        )
        result = await client.complete(Turn(prompt="x", max_tokens=3))
        await asyncio.wait_for(silent_engine.hung_up.wait(), 5)

    assert result.error is not None
    assert "no answer within 0.2 s" in result.error


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prompt": ""}, "prompt must be non-empty"),
        ({"prompt": ()}, "prompt must be non-empty"),
        ({"prompt": (1, -2)}, "token ids must be integers >= 0"),
        ({"prompt": (1, True)}, "token ids must be integers >= 0"),
        ({"max_tokens": 0}, "max_tokens must be in"),
        ({"temperature": float("nan")}, "temperature must be finite"),
        ({"temperature": -0.1}, "temperature must be in"),
        ({"logprobs": 21}, "logprobs must be in"),
    ],
)
def test_a_bad_turn_is_refused_with_the_field_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Turn(**{"prompt": "x", "max_tokens": 3, **fields})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"connect_s": 0.0}, "connect_s must be in"),
        ({"turn_s": float("inf")}, "turn_s must be finite"),
        ({"max_error_chars": 3}, "max_error_chars must be in"),
    ],
)
def test_a_bad_config_is_refused_with_the_field_named(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RolloutConfig(**fields)


async def test_a_client_needs_an_http_url_and_a_model() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(ValueError, match="http"):
            RolloutClient(http, base_url="engine:8000", model="policy")
        with pytest.raises(ValueError, match="model"):
            RolloutClient(http, base_url=URL, model="")


def test_a_result_is_ok_exactly_when_it_has_no_error() -> None:
    assert TurnResult(tokens=5).ok
    assert not TurnResult(tokens=0, error="HTTP 500").ok
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        TurnResult(tokens=-1)
