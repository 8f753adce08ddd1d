"""A tiny real HTTP server on a real socket, for the client and monitor tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.local_server import LocalServer


@dataclass(frozen=True, slots=True)
class Route:
    status: int = 200
    body: bytes = b""
    stall_s: float = 0.0  # pause after the headers, before the body
    drip_s: float = 0.0  # when > 0: send the body one byte at a time, this far apart


class TinyServer(LocalServer):
    """Answers GET requests from a path -> Route table, one request per connection."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            self.requests.append(path)
            route = self.routes.get(path, Route(404, b"not found"))
            writer.write(
                f"HTTP/1.1 {route.status} X\r\nContent-Length: {len(route.body)}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            await writer.drain()
            await asyncio.sleep(route.stall_s)
            if route.drip_s > 0:
                for i in range(len(route.body)):
                    writer.write(route.body[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(route.drip_s)
            else:
                writer.write(route.body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up first: that is what some tests are for
        finally:
            writer.close()


@pytest.fixture
async def tiny_server() -> AsyncIterator[TinyServer]:
    server = TinyServer()
    await server.start()
    yield server
    await server.stop()
