"""The engine HTTP client drops idle connections before the engine does."""

from __future__ import annotations

import asyncio
import contextlib

from inference.engine_http import engine_http_client, rollout_session
from tests.local_server import LocalServer

IDLE_S = 0.5  # this server's keep-alive: vLLM's 5 s, ten times shorter


class KeepAliveServer(LocalServer):
    """HTTP/1.1 that keeps a connection open between requests, and closes it after ``IDLE_S``
    without one, as vLLM's server does after 5 s; counts the connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            while True:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()


async def test_a_connection_idle_past_the_keepalive_is_never_reused() -> None:
    server = KeepAliveServer()
    await server.start()
    try:
        async with engine_http_client(max_connections=4, keepalive_s=0.3) as http:
            for _ in range(3):
                assert (await http.get(server.url)).text == "ok"
                await asyncio.sleep(0.4)  # past the client's keep-alive, inside the server's
        assert server.connections == 3
        async with engine_http_client(max_connections=4) as http:
            for _ in range(3):
                assert (await http.get(server.url)).text == "ok"
        assert server.connections == 4  # back to back, one connection serves all three
    finally:
        await server.stop()


async def test_a_rollout_sessions_idle_connection_is_never_reused_past_the_keepalive() -> None:
    server = KeepAliveServer()
    await server.start()
    try:
        async with rollout_session(max_connections=4, keepalive_s=0.3) as session:
            for _ in range(3):
                async with session.get(server.url) as answer:
                    assert await answer.text() == "ok"
                await asyncio.sleep(0.4)  # past the client's keep-alive, inside the server's
        assert server.connections == 3
        async with rollout_session(max_connections=4) as session:
            for _ in range(3):
                async with session.get(server.url) as answer:
                    assert await answer.text() == "ok"
        assert server.connections == 4  # back to back, one connection serves all three
    finally:
        await server.stop()
