"""Proxies that break a connection on demand, run as their own processes by the fault tests.

    python -m tests.faults.proxies tcp --port P --upstream HOST:PORT --fault FILE
    python -m tests.faults.proxies hold --port P --upstream HOST:PORT --fault FILE
    python -m tests.faults.proxies metrics --port P --upstream URL --fault FILE

``tcp`` passes bytes both ways; while FILE exists it refuses new connections and drops the
ones it holds, which is how a database server that went away looks to its clients. ``hold``
passes bytes too, but while FILE exists it holds them, both ways, and closes nothing: new
connections are accepted and wait; this is a partition that resets nothing, where every
call of a client hangs (no error, no timeout but its own) until FILE is removed. ``metrics``
is an HTTP/1.1 proxy in front of an engine; while FILE exists, ``/metrics`` is accepted and
never answered (the hang of an overloaded API server), and everything else still passes.
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


class MetricsProxy:
    def __init__(self, upstream: str, fault: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self.fault = fault
        self.http = httpx.AsyncClient(timeout=None)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _read_request(connection, reader)
                if request is None:
                    return
                path = request.target.decode()
                while path.startswith("/metrics") and self.fault.exists():
                    await asyncio.sleep(CHECK_S)  # accepted, never answered while it lasts
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
                out.append(("content-length", str(len(answer.content))))
                writer.write(
                    connection.send(h11.Response(status_code=answer.status_code, headers=out))
                )
                writer.write(connection.send(h11.Data(data=answer.content)))
                writer.write(connection.send(h11.EndOfMessage()))
                await writer.drain()
                connection.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, httpx.HTTPError, OSError):
            return
        finally:
            writer.close()


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
    parser.add_argument("kind", choices=("tcp", "hold", "metrics"))
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
        metrics = MetricsProxy(args.upstream, args.fault)
        server = await asyncio.start_server(metrics.serve, "127.0.0.1", args.port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
