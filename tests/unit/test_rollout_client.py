"""The rollout client: the request it sends, the record it returns, and that a cancelled or
timed-out turn closes its connection; against real local HTTP servers (a real vLLM in
tests/vllm)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from inference.engine_http import rollout_session
from inference.rollout_client import RolloutClient, RolloutConfig, TokenizeError
from tests.local_server import LocalServer
from workers.core.turns import Turn, TurnResult

Answer = Callable[[bytes], web.Response]


def completion(
    text: str = "four", tokens: int = 3, finish: str = "length", logprobs: Any = None
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"token_logprobs": logprobs}
    return {"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}}


class FakeEngine:
    """Answers every request with ``answer`` and keeps what it was sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        self.answer: Answer = lambda body: web.json_response(completion())
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append((request.method, request.path, body))
        return self.answer(body)


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    fake = FakeEngine()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    fake.url = str(server.make_url("")).rstrip("/")
    yield fake
    await server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with rollout_session(8) as opened:
        yield opened


def client(
    session: aiohttp.ClientSession, engine: FakeEngine, config: RolloutConfig | None = None
) -> RolloutClient:
    return RolloutClient(session, base_url=engine.url + "/", model="policy", config=config)


async def test_sends_one_completion_request_and_returns_what_the_engine_generated(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    engine.answer = lambda body: web.json_response(
        completion(text=" 4", tokens=2, finish="stop", logprobs=[-0.1, -0.2])
    )

    turn = Turn(prompt=(5, 6, 7), max_tokens=16, temperature=0.5, logprobs=1, ignore_eos=True)
    result = await client(session, engine).complete(turn)

    ((method, path, body),) = engine.requests
    assert (method, path) == ("POST", "/v1/completions")
    assert json.loads(body) == {
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


async def test_a_text_prompt_goes_as_text_and_unasked_options_are_left_out(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    result = await client(session, engine).complete(Turn(prompt="2 + 2 =", max_tokens=4))

    bodies = [json.loads(body) for _, _, body in engine.requests]
    assert bodies == [{"model": "policy", "prompt": "2 + 2 =", "max_tokens": 4, "temperature": 1.0}]
    assert result.token_logprobs is None


async def test_logprobs_come_back_per_sampled_token(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    engine.answer = lambda body: web.json_response(completion(tokens=3, logprobs=[-0.5, None, -2]))

    result = await client(session, engine).complete(Turn(prompt="x", max_tokens=3, logprobs=0))

    assert result.token_logprobs == (-0.5, None, -2.0)


async def test_an_engine_error_is_a_failed_result_naming_the_status_and_body(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    engine.answer = lambda body: web.json_response(
        {"error": {"message": "EngineCore died"}}, status=500
    )

    result = await client(session, engine).complete(Turn(prompt="x", max_tokens=3))

    assert not result.ok
    assert result.tokens == 0
    assert result.error is not None
    assert "HTTP 500" in result.error
    assert "EngineCore died" in result.error
    assert f"{engine.url}/v1/completions" in result.error


async def test_a_long_error_body_is_cut_to_the_configured_length(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    engine.answer = lambda body: web.Response(status=503, text="x" * 10_000)

    config = RolloutConfig(max_error_chars=100)
    result = await client(session, engine, config).complete(Turn(prompt="x", max_tokens=3))

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
async def test_a_malformed_answer_is_a_failed_result(
    engine: FakeEngine, session: aiohttp.ClientSession, body: bytes
) -> None:
    engine.answer = lambda sent: web.Response(body=body, content_type="application/json")

    result = await client(session, engine).complete(Turn(prompt="x", max_tokens=3))

    assert not result.ok
    assert result.error is not None
    assert "malformed completion response" in result.error


async def test_asked_logprobs_missing_from_the_answer_is_a_failed_result(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    result = await client(session, engine).complete(Turn(prompt="x", max_tokens=3, logprobs=1))

    assert result.error is not None
    assert "malformed completion response" in result.error


async def test_a_refused_connection_is_a_failed_result(session: aiohttp.ClientSession) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again on exit: nothing listens there
    refused = RolloutClient(session, base_url=f"http://127.0.0.1:{port}", model="policy")
    result = await refused.complete(Turn(prompt="x", max_tokens=3))

    assert result.error is not None
    assert "ClientConnectorError" in result.error


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


async def test_cancelling_the_turn_closes_its_connection(
    silent_engine: SilentEngine, session: aiohttp.ClientSession
) -> None:
    waiting = RolloutClient(session, base_url=silent_engine.url, model="policy")
    task = asyncio.create_task(waiting.complete(Turn(prompt="x", max_tokens=3)))
    await asyncio.wait_for(silent_engine.received.wait(), 5)
    assert not silent_engine.hung_up.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(silent_engine.hung_up.wait(), 5)


async def test_a_turn_past_its_time_limit_fails_and_closes_its_connection(
    silent_engine: SilentEngine, session: aiohttp.ClientSession
) -> None:
    slow = RolloutClient(
        session, base_url=silent_engine.url, model="policy", config=RolloutConfig(turn_s=0.2)
    )
    result = await slow.complete(Turn(prompt="x", max_tokens=3))
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


async def test_a_client_needs_an_http_url_and_a_model(session: aiohttp.ClientSession) -> None:
    with pytest.raises(ValueError, match="http"):
        RolloutClient(session, base_url="engine:8000", model="policy")
    with pytest.raises(ValueError, match="model"):
        RolloutClient(session, base_url="http://engine:8000", model="")


def test_a_result_is_ok_exactly_when_it_has_no_error() -> None:
    assert TurnResult(tokens=5).ok
    assert not TurnResult(tokens=0, error="HTTP 500").ok
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        TurnResult(tokens=-1)


async def test_token_ids_come_back_when_asked_and_must_match_the_usage(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    answer = {
        **completion(tokens=2),
        "choices": [{**completion()["choices"][0], "token_ids": [7, 8]}],
    }
    engine.answer = lambda body: web.json_response(answer)
    turn = Turn(prompt=(1, 2), max_tokens=2, return_token_ids=True, seed=9)
    result = await client(session, engine).complete(turn)
    assert result.token_ids == (7, 8)
    assert json.loads(engine.requests[0][2])["return_token_ids"] is True
    answer["choices"][0]["token_ids"] = [7]  # fewer ids than the usage counts
    broken = await client(session, engine).complete(turn)
    assert broken.error is not None and "vLLM >= 0.10.2" in broken.error


async def test_tokenize_asks_the_engines_own_endpoint(
    engine: FakeEngine, session: aiohttp.ClientSession
) -> None:
    engine.answer = lambda body: web.json_response({"count": 3, "tokens": [4, 5, 6]})
    ids = await client(session, engine).tokenize("a b c", add_special_tokens=False)
    method, path, body = engine.requests[0]
    assert (ids, method, path) == ((4, 5, 6), "POST", "/tokenize")
    assert json.loads(body) == {"model": "policy", "prompt": "a b c", "add_special_tokens": False}


@pytest.mark.parametrize(
    "answer",
    [
        lambda body: web.json_response({"tokens": ["a"]}),
        lambda body: web.json_response({"count": 1}),
        lambda body: web.Response(status=404, text="no such route"),
    ],
    ids=["not-ids", "no-tokens", "not-found"],
)
async def test_a_failed_tokenize_raises_tokenize_error_naming_the_engine(
    engine: FakeEngine, session: aiohttp.ClientSession, answer: Answer
) -> None:
    engine.answer = answer
    with pytest.raises(TokenizeError, match=f"{engine.url}/tokenize"):
        await client(session, engine).tokenize("x", add_special_tokens=True)
