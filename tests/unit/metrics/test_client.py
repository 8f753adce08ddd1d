"""The HTTP edge: errors mapped to ScrapeError kinds, body cap, lifecycle, real sockets."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from inference.metrics.client import MetricsClient, ScrapeConfig
from inference.metrics.errors import (
    ScrapeBadFormat,
    ScrapeConnectionError,
    ScrapeHttpStatus,
    ScrapeRefused,
    ScrapeTimeout,
    ScrapeTooLarge,
)
from inference.metrics.parse import parse_exposition
from tests.unit.metrics.conftest import Route, TinyServer
from tests.unit.metrics.texts import exposition

URL = "http://engine:8000"
SMALL = ScrapeConfig(max_body_bytes=4096)


def mocked(handler: Callable[[httpx.Request], httpx.Response], config: ScrapeConfig = SMALL):
    return MetricsClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)), config)


async def test_metrics_text_asks_for_the_classic_text_format() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=exposition())

    async with mocked(handler) as client:
        assert await client.metrics_text(URL + "/") == exposition()
    assert str(seen[0].url) == URL + "/metrics"
    assert seen[0].headers["accept"].startswith("text/plain")


async def test_max_model_len_reads_v1_models() -> None:
    body = {"data": [{"id": "m", "max_model_len": 32768}]}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models"
        return httpx.Response(200, json=body)

    async with mocked(handler) as client:
        assert await client.max_model_len(URL) == 32768


async def test_a_non_success_status_is_an_http_status_error() -> None:
    async with mocked(lambda _: httpx.Response(503, text="<html>busy</html>")) as client:
        with pytest.raises(ScrapeHttpStatus, match="HTTP 503") as caught:
            await client.metrics_text(URL)
    assert caught.value.status_code == 503


async def test_a_declared_length_past_the_cap_is_refused_before_reading() -> None:
    async with mocked(lambda _: httpx.Response(200, content=b"x" * 5000)) as client:
        with pytest.raises(ScrapeTooLarge, match="5000 bytes exceeds the 4096 byte cap"):
            await client.metrics_text(URL)


async def test_an_endless_body_is_abandoned_at_the_cap() -> None:
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for i in range(100_000):  # 100 MB if anyone read it all
            sent.append(i)
            yield b"y" * 1000

    async with mocked(lambda _: httpx.Response(200, content=endless())) as client:
        with pytest.raises(ScrapeTooLarge, match="exceeds the 4096 byte cap"):
            await client.metrics_text(URL)
    assert len(sent) == 5


async def test_a_body_that_is_not_utf8_is_bad_format() -> None:
    async with mocked(lambda _: httpx.Response(200, content=b"\xff\xfe\x00")) as client:
        with pytest.raises(ScrapeBadFormat, match="not UTF-8"):
            await client.metrics_text(URL)


async def test_a_corrupt_gzip_body_is_bad_format() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        gzip = {"content-encoding": "gzip"}
        return httpx.Response(200, headers=gzip, stream=httpx.ByteStream(b"not gzip"))

    async with mocked(handler) as client:
        with pytest.raises(ScrapeBadFormat, match="cannot be decoded"):
            await client.metrics_text(URL)


@pytest.mark.parametrize(
    ("error", "expected", "message"),
    [
        (httpx.ConnectError("refused"), ScrapeConnectionError, "ConnectError: refused"),
        (httpx.RemoteProtocolError("peer closed"), ScrapeConnectionError, "RemoteProtocolError"),
        (httpx.ReadTimeout("slow"), ScrapeTimeout, "read timed out"),
        (httpx.ConnectTimeout("slow"), ScrapeTimeout, "connect timed out"),
        (httpx.PoolTimeout("busy"), ScrapeTimeout, "pool timed out"),
    ],
)
async def test_transport_failures_map_to_one_scrape_error_each(
    error: Exception, expected: type[Exception], message: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    async with mocked(handler) as client:
        with pytest.raises(expected, match=message):
            await client.metrics_text(URL)


@pytest.mark.parametrize(
    ("then", "answered"),
    [(httpx.Response(200, text=exposition()), True), (httpx.ConnectError("refused"), False)],
)
async def test_a_connection_broken_before_an_answer_is_asked_once_more(
    then: httpx.Response | Exception, answered: bool
) -> None:
    """An engine killed with a connection kept alive breaks it; asked again, a dead engine
    refuses (and the monitor marks it down at once, not stale) and a live one answers."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ReadError("connection reset by peer")
        if isinstance(then, Exception):
            raise then
        return then

    async with mocked(handler) as client:
        if answered:
            assert await client.metrics_text(URL) == exposition()
        else:
            with pytest.raises(ScrapeRefused):
                await client.metrics_text(URL)
    assert len(calls) == 2


async def test_the_client_is_entered_once_and_closes_its_http_client() -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200)))
    client = MetricsClient(http)
    with pytest.raises(RuntimeError, match="unopened; scrape inside `async with`"):
        await client.metrics_text(URL)
    async with client:
        pass
    assert http.is_closed
    with pytest.raises(RuntimeError, match="closed"):
        await client.metrics_text(URL)
    with pytest.raises(RuntimeError, match="entered once"):
        await client.__aenter__()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"read_s": 0.0}, "read_s"),
        ({"total_s": 601.0}, "total_s"),
        ({"max_body_bytes": 10}, "max_body_bytes"),
    ],
)
def test_config_out_of_range_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ScrapeConfig(**kwargs)


async def test_over_a_real_socket_the_text_arrives_whole_and_parses(
    tiny_server: TinyServer,
) -> None:
    text = exposition()
    tiny_server.routes["/metrics"] = Route(body=text.encode())
    tiny_server.routes["/v1/models"] = Route(
        body=json.dumps({"data": [{"max_model_len": 2048}]}).encode()
    )
    async with MetricsClient(httpx.AsyncClient()) as client:
        assert await client.metrics_text(tiny_server.url) == text
        assert await client.max_model_len(tiny_server.url) == 2048
    assert parse_exposition(text, "e")["e/0"].num_running == 7


async def test_over_a_real_socket_a_stalled_body_hits_the_read_timeout(
    tiny_server: TinyServer,
) -> None:
    tiny_server.routes["/metrics"] = Route(body=b"late", stall_s=5.0)
    async with MetricsClient(httpx.AsyncClient(), ScrapeConfig(read_s=0.05)) as client:
        with pytest.raises(ScrapeTimeout, match="read timed out"):
            await client.metrics_text(tiny_server.url)


async def test_over_a_real_socket_a_dripping_body_hits_the_total_limit(
    tiny_server: TinyServer,
) -> None:
    tiny_server.routes["/metrics"] = Route(body=b"x" * 1000, drip_s=0.01)
    async with MetricsClient(httpx.AsyncClient(), ScrapeConfig(total_s=0.1)) as client:
        with pytest.raises(ScrapeTimeout, match=r"no complete answer within 0\.1 s"):
            await client.metrics_text(tiny_server.url)


async def test_over_a_real_socket_a_closed_port_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with MetricsClient(httpx.AsyncClient()) as client:
        with pytest.raises(ScrapeConnectionError, match="ConnectError"):
            await client.metrics_text(f"http://127.0.0.1:{port}")
