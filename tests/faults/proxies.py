"""Proxies that break a connection on demand, run as their own processes by the fault tests.

    python -m tests.faults.proxies tcp --port P --upstream HOST:PORT --fault FILE
    python -m tests.faults.proxies hold --port P --upstream HOST:PORT --fault FILE
    python -m tests.faults.proxies metrics --port P --upstream URL --fault FILE
    python -m tests.faults.proxies errors --port P --upstream URL --fault FILE

``tcp`` passes bytes both ways; while FILE exists it refuses new connections and drops the
ones it holds, which is how a database server that went away looks to its clients. ``hold``
passes bytes too, but while FILE exists it holds them, both ways, and closes nothing: new
connections are accepted and wait; this is a partition that resets nothing, where every
call of a client hangs (no error, no timeout but its own) until FILE is removed. ``metrics``
and ``errors`` are HTTP/1.1 proxies in front of an engine. With ``metrics``, while FILE exists,
``/metrics`` is accepted and never answered (the hang of an overloaded API server); with
``errors``, every completion is answered HTTP 500 at once, with vLLM's JSON error body (an
engine whose model worker died while its API server, ``/metrics`` and ``/tokenize`` go on).
Everything else still passes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

import h11
import httpx

CHECK_S = 0.05  # how often the fault file is looked at
CHUNK = 65536


class TcpProxy:
    def __init__(self, upstream: tuple[str, int], fault: Path, *, hold: bool = False) -> None:
        self.upstream = upstream
        self.fault = fault
        self.hold = hold
        self.open: set[asyncio.StreamWriter] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.fault.exists() and not self.hold:
            writer.close()
            return
        await self.held()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self.open |= {writer, up_writer}
        try:
            await asyncio.gather(self.pipe(reader, up_writer), self.pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self.open.discard(end)
                end.close()

    async def held(self) -> None:
        """Return at once, or (``hold``) once the fault is over."""
        while self.hold and self.fault.exists():
            await asyncio.sleep(CHECK_S)

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(CHUNK):
                await self.held()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.write_eof()

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_S)
            if self.fault.exists() and not self.hold:
                for end in list(self.open):
                    end.transport.abort()
                self.open.clear()


COMPLETIONS = ("/v1/completions", "/v1/chat/completions")
# The body vLLM's API server sends when its engine is dead (EngineDeadError).
ENGINE_DEAD = (
    b'{"object":"error","message":"EngineCore encountered an issue. See stack trace for the '
    b'root cause.","type":"InternalServerError","param":null,"code":500}'
)


class HttpProxy:
    def __init__(self, upstream: str, fault: Path, kind: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.fault = fault
        self.kind = kind
        self.http = httpx.AsyncClient(timeout=None)

    def hangs(self, path: str) -> bool:
        return self.kind == "metrics" and path.startswith("/metrics") and self.fault.exists()

    def fails(self, path: str) -> bool:
        return self.kind == "errors" and path.startswith(COMPLETIONS) and self.fault.exists()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _read_request(connection, reader)
                if request is None:
                    return
                path = request.target.decode()
                while self.hangs(path):
                    await asyncio.sleep(CHECK_S)  # accepted, never answered while it lasts
                if self.fails(path):
                    json_type = [("content-type", "application/json")]
                    _answer(writer, connection, 500, json_type, ENGINE_DEAD)
                    await writer.drain()
                    connection.start_next_cycle()
                    continue
                headers = {
                    k.decode(): v.decode()
                    for k, v in request.headers
                    if k.lower() not in (b"host", b"content-length", b"connection")
                }
                answer = await self.http.request(
                    request.method.decode(), self.upstream + path, headers=headers, content=body
                )
                out = [
                    (k, v)
                    for k, v in answer.headers.items()
                    if k.lower()
                    not in ("content-length", "transfer-encoding", "connection", "content-encoding")
                ]
                _answer(writer, connection, answer.status_code, out, answer.content)
                await writer.drain()
                connection.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, httpx.HTTPError, OSError):
            return
        finally:
            writer.close()


def _answer(
    writer: asyncio.StreamWriter,
    connection: h11.Connection,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    headers = [*headers, ("content-length", str(len(body)))]
    writer.write(connection.send(h11.Response(status_code=status, headers=headers)))
    writer.write(connection.send(h11.Data(data=body)))
    writer.write(connection.send(h11.EndOfMessage()))


async def _read_request(
    connection: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request | None, bytes]:
    request, body = None, b""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(CHUNK)
            connection.receive_data(data)
            if not data and request is None:
                return None, b""
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return request, body
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("tcp", "hold", "metrics", "errors"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--fault", type=Path, required=True)
    args = parser.parse_args()
    watchers: list[asyncio.Future[None]] = []
    if args.kind in ("tcp", "hold"):
        host, port = args.upstream.rsplit(":", 1)
        tcp = TcpProxy((host, int(port)), args.fault, hold=args.kind == "hold")
        watchers.append(asyncio.ensure_future(tcp.watch()))
        server = await asyncio.start_server(tcp.serve, "127.0.0.1", args.port)
    else:
        http = HttpProxy(args.upstream, args.fault, args.kind)
        server = await asyncio.start_server(http.serve, "127.0.0.1", args.port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
