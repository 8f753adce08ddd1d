"""The small HTTP/1.1 server: keep-alive, bodies, streaming, malformed input, disconnects."""

from __future__ import annotations

import asyncio
import errno
import re
import select
import socket
import time
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


async def read_response(reader: asyncio.StreamReader, has_body: bool = True) -> tuple[bytes, bytes]:
    """One response off a raw connection: its head, and the body its Content-Length gives."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5.0)
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    if not has_body or length is None:
        return head, b""
    return head, await asyncio.wait_for(reader.readexactly(int(length[1])), timeout=5.0)


async def echo(request: HttpRequest) -> Response:
    return Response(200, request.method.encode() + b" " + request.path.encode() + request.body)


async def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout() -> None:
    server = await start_server(echo, "127.0.0.1", 0, keep_alive_s=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    loop = asyncio.get_running_loop()
    replies = []
    for _ in range(3):  # requests closer together than the timeout keep the connection open
        writer.write(b"GET /again HTTP/1.1\r\nhost: x\r\n\r\n")
        replies.append(await read_response(reader))
        last_reply = loop.time()
        await asyncio.sleep(0.05)
    at_end = await asyncio.wait_for(reader.read(), timeout=5.0)
    idle = loop.time() - last_reply
    writer.close()
    server.close()
    assert [body for _, body in replies] == [b"GET /again"] * 3
    assert at_end == b""  # closed by the server, with nothing more sent
    assert 0.45 <= idle < 3.0  # the timeout, less the time the last reply took to read


async def test_a_client_that_connects_and_sends_nothing_is_closed_after_the_timeout() -> None:
    server = await start_server(echo, "127.0.0.1", 0, keep_alive_s=0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    at_end = await asyncio.wait_for(reader.read(), timeout=5.0)
    writer.close()
    server.close()
    assert at_end == b""


async def test_a_request_in_progress_is_not_idle_however_slowly_it_comes() -> None:
    server = await start_server(echo, "127.0.0.1", 0, keep_alive_s=0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    writer.write(b"POST /slow HTTP/1.1\r\nhost: x\r\n")
    await asyncio.sleep(0.4)
    writer.write(b"content-length: 2\r\n\r\nok")
    head, body = await read_response(reader)
    writer.close()
    server.close()
    assert head.startswith(b"HTTP/1.1 200") and body == b"POST /slowok"


async def test_a_burst_of_connects_fits_in_the_listen_backlog() -> None:
    # The event loop does not run while the burst connects, so nothing is accepted: each
    # connect needs room in the kernel's accept queue, else its SYN is dropped and retried a
    # second later. 600 is far past the old backlog of 100 and within 1,024 descriptors
    # (the kernel caps the backlog at net.core.somaxconn, 4,096 since Linux 5.4).
    server = await start_server(echo, "127.0.0.1", 0)
    address = ("127.0.0.1", server.sockets[0].getsockname()[1])
    burst = [socket.socket() for _ in range(600)]
    poller = select.poll()
    for sock in burst:
        sock.setblocking(False)
        assert sock.connect_ex(address) in (0, errno.EINPROGRESS)
        poller.register(sock, select.POLLOUT)
    pending = {sock.fileno(): sock for sock in burst}
    connected = 0
    deadline = time.monotonic() + 0.5  # well before the first SYN retry, at 1 s
    while pending and (left := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            if pending.pop(fd).getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                connected += 1
    for sock in burst:
        sock.close()
    server.close()
    assert connected == len(burst)


async def test_expect_100_continue_is_answered_before_the_body_is_sent() -> None:
    server = await start_server(echo, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    writer.write(
        b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n"
    )
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=2.0)
    writer.write(b"hello")
    head, body = await read_response(reader)
    # A body too large is refused at once, before the client sends it.
    writer.write(
        b"POST /big HTTP/1.1\r\nhost: x\r\ncontent-length: 999999999999\r\n"
        b"expect: 100-continue\r\n\r\n"
    )
    refused, message = await read_response(reader)
    writer.close()
    server.close()
    assert interim.startswith(b"HTTP/1.1 100 ")
    assert head.startswith(b"HTTP/1.1 200") and body == b"POST /uploadhello"
    assert refused.startswith(b"HTTP/1.1 413") and message == b"request body too large"


async def test_a_head_request_gets_the_get_head_without_a_body_and_the_next_request_is_served() -> (
    None
):
    server = await start_server(echo, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    # Pipelined: the GET must not be lost behind the HEAD.
    writer.write(b"HEAD /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\n\r\n")
    head, _ = await read_response(reader, has_body=False)
    after_head, after_body = await read_response(reader)
    writer.close()
    server.close()
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: 7\r\n" in head  # "HEAD /a"
    assert after_head.startswith(b"HTTP/1.1 200") and after_body == b"GET /b"
