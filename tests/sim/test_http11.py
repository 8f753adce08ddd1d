"""The small HTTP/1.1 server: keep-alive, bodies, streaming, malformed input, disconnects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from inference.sim.http11 import Handler, HttpRequest, Response, StreamingResponse, start_server


async def serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_requests_share_a_kept_alive_connection_and_bodies_arrive_whole() -> None:
    peers: set[tuple[str, int]] = set()

    async def echo(request: HttpRequest) -> Response:
        return Response(200, request.method.encode() + b" " + request.path.encode() + request.body)

    server, url = await serve(echo)
    async with httpx.AsyncClient() as client:
        first = await client.post(f"{url}/a?x=1", content=b"-" * 100_000)
        second = await client.get(f"{url}/b")
        for response in (first, second):
            stream = response.extensions["network_stream"]
            peers.add(stream.get_extra_info("client_addr"))
    server.close()
    assert first.content == b"POST /a" + b"-" * 100_000
    assert second.content == b"GET /b"
    assert len(peers) == 1


async def test_a_stream_is_sent_chunk_by_chunk() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for index in range(3):
            yield f"data: {index}\n\n".encode()

    async def handler(request: HttpRequest) -> StreamingResponse:
        return StreamingResponse(chunks())

    server, url = await serve(handler)
    async with httpx.AsyncClient() as client, client.stream("GET", url) as response:
        lines = [line async for line in response.aiter_lines() if line]
    server.close()
    assert response.headers["content-type"] == "text/event-stream"
    assert lines == ["data: 0", "data: 1", "data: 2"]


async def test_malformed_requests_get_a_400_and_a_closed_connection() -> None:
    async def never(request: HttpRequest) -> Response:
        raise AssertionError("not reached")

    server, url = await serve(never)
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    reply = await reader.read()
    writer.close()
    server.close()
    assert reply.startswith(b"HTTP/1.1 400")


async def test_a_header_that_is_not_utf8_gets_a_400_and_the_server_serves_on() -> None:
    async def ok(request: HttpRequest) -> Response:
        return Response(200, b"ok")

    server, url = await serve(ok)
    port = int(url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nx-name: \xff\xfe\r\n\r\n")
    reply = await asyncio.wait_for(reader.read(), timeout=5.0)
    writer.close()
    async with httpx.AsyncClient() as client:
        after = await client.get(url)
    server.close()
    assert reply.startswith(b"HTTP/1.1 400") and reply.endswith(b"the request head is not UTF-8")
    assert after.content == b"ok"


async def test_the_handler_learns_when_its_client_goes_away() -> None:
    seen = asyncio.Event()

    async def wait_for_disconnect(request: HttpRequest) -> Response:
        await asyncio.wait_for(request.disconnected.wait(), timeout=5.0)
        seen.set()
        return Response(200)

    server, url = await serve(wait_for_disconnect)
    port = int(url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    await writer.drain()
    writer.close()
    await asyncio.wait_for(seen.wait(), timeout=5.0)
    server.close()
    assert seen.is_set()
