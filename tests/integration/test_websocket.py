"""A browser-side websocket receives an event another process sent through Redis."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

import pytest
import redis
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from controlplane.asgi import application
from controlplane.runs import consumers
from controlplane.runs.consumers import CLOSE_UNAUTHENTICATED, run_group_name
from controlplane.runs.models import Run
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

SEND_FROM_ANOTHER_PROCESS = textwrap.dedent(
    """
    import sys, django
    django.setup()
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer
    async_to_sync(get_channel_layer().group_send)(
        sys.argv[1], {"type": "run.decision", "data": {"kind": "grow", "cap_after": 12}}
    )
    """
)


def session_cookie_for(username: str) -> bytes:
    user = get_user_model().objects.create_user(username=username, password="pw")
    client = Client()
    client.force_login(user)
    session_key = client.cookies[settings.SESSION_COOKIE_NAME].value
    return f"{settings.SESSION_COOKIE_NAME}={session_key}".encode()


async def watching_a_new_run(username: str, run_name: str) -> tuple[Run, WebsocketCommunicator]:
    """A new run, and a websocket on it connected as a signed-in user (by session cookie)."""
    cookie = await database_sync_to_async(session_cookie_for)(username)
    run = await database_sync_to_async(Run.objects.create)(name=run_name, config={})
    communicator = WebsocketCommunicator(
        application,
        f"/ws/runs/{run.pk}/",
        headers=[(b"cookie", cookie), (b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return run, communicator


async def test_event_sent_from_another_process_reaches_the_websocket() -> None:
    run, communicator = await watching_a_new_run("watcher", "watched")

    # The sender runs beside the consumer's loop, as a worker's process does: a blocking
    # subprocess.run would freeze that loop, and its pending read from Redis, meanwhile.
    sender = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SEND_FROM_ANOTHER_PROCESS,
        run_group_name(run.pk),
        cwd=REPO_ROOT,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings"},
    )
    _, stderr = await asyncio.wait_for(sender.communicate(), timeout=60)
    assert sender.returncode == 0, stderr.decode()

    message = await communicator.receive_json_from(timeout=10)
    assert message == {"type": "decision", "data": {"kind": "grow", "cap_after": 12}}
    await communicator.disconnect()


async def test_a_websocket_left_quiet_gets_the_next_event() -> None:
    """A run page with nothing happening stays connected: with redis-py's default read
    timeout, the Channels layer's own wait for an event (answered empty after
    ``brpop_timeout``) failed the connection on the first quiet stretch that long."""
    run, communicator = await watching_a_new_run("patient", "quiet")
    layer = get_channel_layer()
    await asyncio.sleep(layer.brpop_timeout + 2)

    event = {"kind": "hold", "cap_after": 7}
    await layer.group_send(run_group_name(run.pk), {"type": "run.decision", "data": event})
    assert await communicator.receive_json_from(timeout=5) == {"type": "decision", "data": event}
    await communicator.disconnect()


async def test_anonymous_websocket_is_refused() -> None:
    communicator = WebsocketCommunicator(
        application,
        "/ws/runs/41/",
        headers=[(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected  # accepted only to be closed with a code a real client receives
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}


async def test_a_connection_joins_its_group_again_after_redis_forgot_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Redis restart empties every group; a page kept open must get its events back."""
    monkeypatch.setattr(consumers, "REJOIN_S", 0.2)
    run, communicator = await watching_a_new_run("forgotten", "forgotten")
    layer = get_channel_layer()
    group = run_group_name(run.pk)
    forget = redis.Redis.from_url(settings.REDIS_URL)
    forget.delete(layer._group_key(group))  # what a restarted Redis holds: no such group
    forget.close()
    await asyncio.sleep(0.6)  # a rejoin or two
    await layer.group_send(group, {"type": "run.decision", "data": {"kind": "trim"}})
    message = await communicator.receive_json_from(timeout=5)
    assert message == {"type": "decision", "data": {"kind": "trim"}}
    await communicator.disconnect()
