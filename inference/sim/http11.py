"""A small HTTP/1.1 server over asyncio streams, with h11 doing the protocol.

The simulator needs little from HTTP: keep-alive connections (the OpenAI client pools them),
request bodies, whole responses, streamed responses (server-sent events) and, above all, to
know at once when a client goes away, because vLLM aborts a request whose client disconnected
and frees its KV. While a handler runs, a watcher task keeps reading the socket; end of file
sets the request's ``disconnected`` event. Everything else (routing, JSON) is the caller's.

Where clients can tell, it behaves as uvicorn (vLLM's server) does: a connection idle for
``KEEP_ALIVE_TIMEOUT_S`` between requests is closed, the listen backlog is uvicorn's, a client
that sent ``Expect: 100-continue`` is told to send its body once the server wants it, and a
``HEAD`` request gets the head of the ``GET`` response without its body, on a connection that
stays usable for the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import h11

READ_SIZE = 65_536  # bytes per socket read
MAX_BODY_BYTES = 64 * 1024 * 1024  # refuse larger bodies (413) rather than buffer them
KEEP_ALIVE_TIMEOUT_S = 5.0  # vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, its uvicorn's keep-alive
LISTEN_BACKLOG = 2048  # uvicorn's default backlog, which vLLM's API server keeps
CONTINUE = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str  # target without the query string
    query: str  # what follows the "?" of the target, "" if none
    headers: dict[str, str]  # lower-cased names
    body: bytes
    disconnected: asyncio.Event  # set when the client closes its side


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class StreamingResponse:
    """A response sent chunk by chunk; the iterator is closed if the client goes away."""

    chunks: AsyncIterator[bytes]
    status: int = 200
    content_type: str = "text/event-stream"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[HttpRequest], Awaitable[Response | StreamingResponse]]


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handler: Handler,
    keep_alive_s: float = KEEP_ALIVE_TIMEOUT_S,
) -> None:
    """Serves requests on one connection until either side closes it or it idles too long."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_BODY_BYTES)
    try:
        while True:
            request = await _read_request(conn, reader, writer, keep_alive_s)
            if request is None:
                return
            if isinstance(request, Response):
                await _send_whole(conn, writer, request)
                return
            await _respond(conn, reader, writer, handler, request)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (ConnectionError, h11.ProtocolError):
        return
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _read_request(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    keep_alive_s: float,
) -> HttpRequest | Response | None:
    """The next request, a 4xx to send and close with, or None if the client left or idled.

    The connection is idle while no byte of a request has come: as uvicorn's keep-alive
    timer, waiting longer than ``keep_alive_s`` for one closes it (from the connection's start,
    too: a client that connects and sends nothing holds no socket forever).
    """
    head: h11.Request | None = None
    body = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            return _refusal(head, exc.error_status_hint, f"bad request: {exc}")
        if event is h11.NEED_DATA:
            if head is None and not conn.trailing_data[0]:
                try:
                    data = await asyncio.wait_for(reader.read(READ_SIZE), keep_alive_s)
                except TimeoutError:
                    return None
            else:
                if conn.they_are_waiting_for_100_continue:
                    # As uvicorn when the application first reads the body: go ahead.
                    writer.write(conn.send(CONTINUE))
                    await writer.drain()
                data = await reader.read(READ_SIZE)
            conn.receive_data(data)
            if not data and head is None:
                return None
            continue
        if isinstance(event, h11.Request):
            head = event
            declared = dict(event.headers).get(b"content-length")
            if declared is not None and int(declared) > MAX_BODY_BYTES:
                # Refused before the body is sent, which is what Expect: 100-continue is for.
                return _refusal(head, 413, "request body too large")
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                return _refusal(head, 413, "request body too large")
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            try:
                return _http_request(head, bytes(body))
            except UnicodeDecodeError:
                return _refusal(head, 400, "bad request: the request head is not UTF-8")
        elif isinstance(event, h11.ConnectionClosed):
            return None


def _refusal(head: h11.Request | None, status: int, message: str) -> Response:
    """A plain-text error; without its text when the request was a HEAD (it has no body)."""
    body = b"" if head is not None and head.method == b"HEAD" else message.encode()
    return Response(status, body, "text/plain")


def _http_request(head: h11.Request, body: bytes) -> HttpRequest:
    """The request with its head decoded; raises UnicodeDecodeError on a non-UTF-8 head.

    h11 lets header values carry any byte above 0x7F (obsolete HTTP text); such a request is
    refused (400) rather than half-decoded.
    """
    return HttpRequest(
        method=head.method.decode(),
        path=head.target.decode().partition("?")[0],
        query=head.target.decode().partition("?")[2],
        headers={name.decode().lower(): value.decode() for name, value in head.headers},
        body=body,
        disconnected=asyncio.Event(),
    )


async def _respond(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handler: Handler,
    request: HttpRequest,
) -> None:
    watcher = asyncio.create_task(_watch_disconnect(conn, reader, request.disconnected))
    head_only = request.method == "HEAD"
    try:
        response = await handler(request)
        if isinstance(response, Response):
            await _send_whole(conn, writer, response, head_only)
        else:
            await _send_stream(conn, writer, response, request.disconnected, head_only)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _watch_disconnect(
    conn: h11.Connection, reader: asyncio.StreamReader, disconnected: asyncio.Event
) -> None:
    """Reads on while the handler runs: end of file means the client is gone."""
    try:
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                disconnected.set()
                return
            conn.receive_data(data)  # a pipelined next request: h11 keeps it for later
    except ConnectionError:
        disconnected.set()


async def _send_whole(
    conn: h11.Connection, writer: asyncio.StreamWriter, response: Response, head_only: bool = False
) -> None:
    """Sends a response; ``head_only`` (a HEAD request) sends its head, length included, alone."""
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
    ]
    writer.write(conn.send(h11.Response(status_code=response.status, headers=headers)))
    if response.body and not head_only:
        writer.write(conn.send(h11.Data(data=response.body)))
    writer.write(conn.send(h11.EndOfMessage()))
    await writer.drain()


async def _send_stream(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    response: StreamingResponse,
    disconnected: asyncio.Event,
    head_only: bool = False,
) -> None:
    headers = [("content-type", response.content_type), *response.headers]
    writer.write(conn.send(h11.Response(status_code=response.status, headers=headers)))
    chunks = response.chunks
    try:
        if not head_only:
            async for chunk in chunks:
                if disconnected.is_set():
                    return
                writer.write(conn.send(h11.Data(data=chunk)))
                await writer.drain()
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


async def start_server(
    handler: Handler,
    host: str,
    port: int,
    keep_alive_s: float = KEEP_ALIVE_TIMEOUT_S,
    backlog: int = LISTEN_BACKLOG,
) -> asyncio.Server:
    """Listens on host:port (port 0 picks a free one) and serves every connection.

    ``keep_alive_s`` closes connections idle that long; ``backlog`` is the kernel's queue of
    connections not yet accepted (capped by net.core.somaxconn), which a burst of connects
    overflows into one-second SYN retries.
    """
    if keep_alive_s <= 0:
        raise ValueError(f"keep_alive_s must be > 0, got {keep_alive_s}")

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Shutdown cancels open connections; that ends them, it is not an error to report.
        with contextlib.suppress(asyncio.CancelledError):
            await serve_connection(reader, writer, handler, keep_alive_s)

    return await asyncio.start_server(on_connect, host, port, backlog=backlog)
