"""Which pages may open a run's websocket with a user's session, on the served stack: the
address the dashboard is served at (scheme, host and port), and the origins named in
PACER_ALLOWED_ORIGINS; not another port or scheme on the same host, nor another host."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import websockets

from tests.api.conftest import LiveServer, daphne_server, make_account, make_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

STRANGER = "http://localhost:9999"


def session_cookie(server: LiveServer) -> str:
    """Signed in through the server's own sign-in form, as a browser does."""
    make_account("olga", "operator")  # password "pw"
    with httpx.Client(base_url=server.url) as browser:
        browser.get("/signin/")
        form = {"username": "olga", "password": "pw", "next": "/"}
        signed_in = browser.post(
            "/signin/", data=form, headers={"X-CSRFToken": browser.cookies["csrftoken"]}
        )
        assert signed_in.status_code == 302, signed_in.text
        return f"sessionid={browser.cookies['sessionid']}"


async def opens(server: LiveServer, run_id: int, cookie: str, origin: str) -> bool:
    """Whether the run's socket opens, and stays open, for a page at ``origin``."""
    url = server.url.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
    try:
        async with websockets.connect(
            url, origin=origin, additional_headers={"Cookie": cookie}, open_timeout=10
        ) as socket:
            try:
                await asyncio.wait_for(socket.recv(), 0.5)
            except TimeoutError:
                return True  # open, waiting for events
            return False
    except websockets.InvalidStatus as refused:
        assert refused.response.status_code == 403
        return False
    except websockets.ConnectionClosed:
        return False


def test_only_the_served_address_opens_the_socket_with_a_session(
    live_server_api: LiveServer,
) -> None:
    cookie = session_cookie(live_server_api)
    run = make_run()
    served = live_server_api.url  # http://127.0.0.1:PORT
    port = served.rsplit(":", 1)[1]
    for origin, expected in [
        (served, True),
        (STRANGER, False),
        (f"http://127.0.0.1:{int(port) + 1}", False),  # same host, another port
        (served.replace("http://", "https://"), False),  # same host and port, another scheme
        ("null", False),  # a sandboxed frame or a file
    ]:
        assert asyncio.run(opens(live_server_api, run.pk, cookie, origin)) is expected, origin


def test_an_origin_named_in_pacer_allowed_origins_opens_it_too(
    tmp_path: Path, module_queue: str
) -> None:
    run = make_run()
    with daphne_server(
        tmp_path, module_queue, tmp_path / "runs", PACER_ALLOWED_ORIGINS=STRANGER
    ) as server:
        cookie = session_cookie(server)
        assert asyncio.run(opens(server, run.pk, cookie, STRANGER))
        assert not asyncio.run(opens(server, run.pk, cookie, "http://localhost:9998"))
