"""Following a run's decisions live: the stored ones first, then the new ones as the run's
websocket announces them, with no gap and no repeat.

What is printed always comes from the API, read after the last decision printed (by id); a
websocket event only says "read now". Live events are delivered at most once (Channels drops
them for a client that falls behind, and a connection can drop), so a follower that printed
events themselves could miss one; this one misses none, and reads every ``RECHECK_S`` too, in
case an event (the run's end, say) was lost. The websocket is opened before the first read,
so nothing made in between goes unannounced; a dropped one is opened again.
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
RECHECK_S = 5.0  # read the stored decisions and the run's state this often without events
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
                state = await asyncio.to_thread(self._catch_up)
                while state is None:
                    try:
                        async with asyncio.timeout(RECHECK_S):
                            events = [await queued.get()]
                    except TimeoutError:
                        events = [{"type": "recheck"}]
                    while not queued.empty():  # one read for a burst of events
                        events.append(queued.get_nowait())
                    closed = None in events
                    kinds = {e.get("type") for e in events if e is not None}
                    if closed or kinds & {"decision", "state", "recheck"}:
                        state = await asyncio.to_thread(self._catch_up)
                    if closed and state is None:
                        reader.result()  # raises why the connection ended
                        return None
                return state
            finally:
                reader.cancel()

    def _catch_up(self) -> str | None:
        """Print what was stored since the last decision printed; the run's state if it ended.
        The state is read first: decisions stored before it ended are then all listed."""
        run = self.api.get(f"/api/runs/{self.run_id}/")
        self._stored()
        if run["state"] in ENDED:
            self.ended(run["state"], run.get("error", ""))
            return str(run["state"])
        return None

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

    def _decision(self, decision: dict[str, Any]) -> None:
        number = decision.get("id")
        if not isinstance(number, int) or number in self.seen:
            return
        self.seen.add(number)
        self.last_id = number if self.last_id is None else max(self.last_id, number)
        if self.kinds is None or decision.get("kind") in self.kinds:
            self.show(decision)
