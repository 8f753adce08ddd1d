"""A real asyncio TCP server on a free loopback port, for tests that need real sockets."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod


class LocalServer(ABC):
    """Serves each connection with ``_handle``; ``start`` binds, ``stop`` closes."""

    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the server first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None, "start() the server first"
        self._server.close()
        await self._server.wait_closed()

    @abstractmethod
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection."""
