"""A run's websocket for token holders (the CLI): by header or ?token=; a bad token is never
taken for the session, and refusals close with a code a real client receives."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from controlplane.asgi import application
from controlplane.runs.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, run_group_name
from tests.api.conftest import make_account, make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]
# As a browser on the served page sends them: the address it was sent to, and the page's.
HOST, ORIGIN = (b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")


async def _refused_with(communicator: WebsocketCommunicator) -> int:
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    closed = await communicator.receive_output(timeout=5)
    assert closed["type"] == "websocket.close"
    return closed["code"]


@pytest.mark.parametrize("how", ["header", "query"])
async def test_a_token_opens_the_run_websocket_and_events_arrive(how: str) -> None:
    account = await database_sync_to_async(make_account)("cli", "viewer")
    run = await database_sync_to_async(make_run)()
    path, headers = f"/ws/runs/{run.pk}/", [HOST, ORIGIN]
    if how == "header":
        headers.append((b"authorization", f"Token {account.token}".encode()))
    else:
        path += f"?token={account.token}"
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    event = {"id": 7, "kind": "pin", "reason": "Pinned"}
    await get_channel_layer().group_send(
        run_group_name(run.pk), {"type": "run.decision", "data": event}
    )
    assert await communicator.receive_json_from(timeout=5) == {"type": "decision", "data": event}
    await communicator.disconnect()


async def test_a_bad_token_is_refused_with_4401() -> None:
    run = await database_sync_to_async(make_run)()
    for path in (f"/ws/runs/{run.pk}/?token=nope", f"/ws/runs/{run.pk}/?token={'f' * 40}"):
        communicator = WebsocketCommunicator(application, path, headers=[HOST, ORIGIN])
        assert await _refused_with(communicator) == CLOSE_UNAUTHENTICATED


async def test_a_run_that_does_not_exist_is_refused_with_4404() -> None:
    account = await database_sync_to_async(make_account)("cli", "viewer")
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/999999/?token={account.token}", headers=[HOST, ORIGIN]
    )
    assert await _refused_with(communicator) == CLOSE_NOT_FOUND
