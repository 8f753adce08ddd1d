"""Live events of one run pushed to the browser (session) or the ``pacer`` CLI (token, see
``controlplane.ws_auth``). Any signed-in user may follow any run, as any may read it through
the API; a run that does not exist is refused with its own code."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

# Close codes in the application range, so a client can tell why it was refused: the HTTP
# status it would have had, plus 4000.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
# Redis keeps no groups across a restart, and forgets a member after a day: a connection
# joins its run's group again this often, so its events come back within that after either.
REJOIN_S = 30.0

logger = logging.getLogger(__name__)


def run_group_name(run_id: int | str) -> str:
    return f"run.{run_id}"


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Joins the run's group and forwards each event as JSON; it holds no logic of its own."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        if not await _run_exists(run_id):
            await self._refuse(CLOSE_NOT_FOUND)
            return
        self.group_name = run_group_name(run_id)
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()
        self._rejoin = asyncio.ensure_future(self._rejoin_forever())

    async def _rejoin_forever(self) -> None:
        while True:
            await asyncio.sleep(REJOIN_S)
            try:
                await self.channel_layer.group_add(self.group_name, self.channel_name)
            except Exception:  # Redis away: the next try, or the page's reconnect, brings it
                logger.warning("websocket: could not join %s again", self.group_name)

    async def _refuse(self, code: int) -> None:
        """Accept, then close with ``code``: a close before the handshake completes reaches a
        real client as a bare HTTP 403 (daphne), and the reason would be lost."""
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        rejoin = getattr(self, "_rejoin", None)
        if rejoin is not None:
            rejoin.cancel()
        if hasattr(self, "group_name"):
            with contextlib.suppress(Exception):  # Redis away: the group forgets us anyway
                await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def run_decision(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "decision", "data": event["data"]})

    async def engine_health(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "engine_health", "data": event["data"]})

    async def run_step(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "step", "data": event["data"]})

    async def run_state(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "state", "data": event["data"]})


@database_sync_to_async
def _run_exists(run_id: int) -> bool:
    from controlplane.runs.models import Run  # the models import this module

    return Run.objects.filter(pk=run_id).exists()
