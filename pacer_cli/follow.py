"""Following a run's decisions live: the stored ones first, then each new one as the run's
websocket pushes it, with no gap and no repeat.

The websocket is opened before the stored decisions are read, so a decision made in between
arrives on it; every decision carries its database id, and one already printed is skipped.
A dropped connection is opened again and the stored decisions after the last one printed
are read again, so nothing is lost while it was down. It ends when the run ends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import websockets
from websockets.asyncio.client import connect

from pacer_cli.client import Api

ENDED = ("completed", "failed", "cancelled")
RECONNECT_S = 1.0  # pause before opening a dropped connection again
# Close codes the server uses (controlplane.runs.consumers): the HTTP status plus 4000.
CLOSE_REASONS = {
    4401: "the token was refused",
    4403: "you may not see this run",
    4404: "no such run",
}


class Refused(Exception):
    """The server closed the websocket with one of its own codes."""


def websocket_url(base_url: str, run_id: int) -> str:
    parts = urlsplit(base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    path = parts.path.rstrip("/") + f"/ws/runs/{run_id}/"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def origin_of(base_url: str) -> str:
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


class Follower:
    def __init__(
        self,
        api: Api,
        run_id: int,
        show: Callable[[dict[str, Any]], None],
        *,
        kinds: str | None = None,
        since: str | None = None,
        ended: Callable[[str, str], None] | None = None,
    ) -> None:
        self.api = api
        self.run_id = run_id
        self.show = show
        self.kinds = set(kinds.split(",")) if kinds else None
        self.since = since
        self.ended = ended or (lambda state, error: None)
        self.seen: set[int] = set()
        self.last_id: int | None = None

    async def run(self) -> str:
        """Follow until the run ends; its final state."""
        while True:
            try:
                state = await self._connected()
            except (OSError, websockets.ConnectionClosedError, websockets.InvalidHandshake):
                await asyncio.sleep(RECONNECT_S)  # the server restarting: try again
                continue
            if state is not None:
                return state

    async def _connected(self) -> str | None:
        headers = {"Authorization": f"Token {self.api.token}"}
        url = websocket_url(self.api.base_url, self.run_id)
        async with connect(
            url, additional_headers=headers, origin=origin_of(self.api.base_url)
        ) as socket:
            queued: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
            reader = asyncio.ensure_future(self._read(socket, queued))
            try:
                await asyncio.to_thread(self._stored)
                run = await asyncio.to_thread(self.api.get, f"/api/runs/{self.run_id}/")
                if run["state"] in ENDED:
                    await asyncio.to_thread(self._stored)  # decisions of its last flush
                    self.ended(run["state"], run.get("error", ""))
                    return run["state"]
                while True:
                    event = await queued.get()
                    if event is None:
                        reader.result()  # raises why the connection ended
                        return None
                    state = self._event(event)
                    if state is not None:
                        return state
            finally:
                reader.cancel()

    async def _read(self, socket: Any, queued: asyncio.Queue[dict[str, Any] | None]) -> None:
        try:
            async for message in socket:
                queued.put_nowait(json.loads(message))
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            if code in CLOSE_REASONS:
                raise Refused(f"websocket closed ({code}): {CLOSE_REASONS[code]}") from None
            raise
        finally:
            queued.put_nowait(None)

    def _stored(self) -> None:
        since = str(self.last_id) if self.last_id is not None else self.since
        kinds = ",".join(sorted(self.kinds)) if self.kinds else None
        for decision in self.api.pages(
            f"/api/runs/{self.run_id}/decisions/", since=since, kind=kinds, page_size=1000
        ):
            self._decision(decision)

    def _event(self, event: dict[str, Any]) -> str | None:
        kind, data = event.get("type"), event.get("data") or {}
        if kind == "decision":
            self._decision(data)
        elif kind == "state" and data.get("state") in ENDED:
            self._stored()  # anything flushed with the end
            self.ended(data["state"], data.get("error", ""))
            return str(data["state"])
        return None

    def _decision(self, decision: dict[str, Any]) -> None:
        number = decision.get("id")
        if not isinstance(number, int) or number in self.seen:
            return
        self.seen.add(number)
        self.last_id = number if self.last_id is None else max(self.last_id, number)
        if self.kinds is None or decision.get("kind") in self.kinds:
            self.show(decision)
