"""One engine's weight-update routes over HTTP, as the relay (``workers.core.orchestrator.relay``)
drives them.

vLLM 0.32 serves these only when started with ``VLLM_SERVER_DEV_MODE=1``, at the server's
root (not under ``/v1``): ``POST /pause?mode=keep`` (requests frozen where they are, the
prefix cache cleared; resumed by ``POST /resume``), ``POST /collective_rpc`` with
``{"method": "reload_weights", "kwargs": {"weights_path": DIR}}`` (every worker reloads in
place from a Hugging Face directory; a failure is a 500), ``POST /update_weight_version``
with ``{"new_version": "V"}``, ``GET /weight_info`` (``{"weight_version": "V"}``,
``"default"`` before any update) and ``GET /is_paused`` (``{"is_paused": bool}``). The routes
change what an engine serves: whoever reaches them can swap its weights, so they must be
reachable from the control plane's workers only (see the README on binding them). The
simulator (``inference.sim``) serves the same routes under the same switch.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpx

# A reload reads the whole checkpoint and copies it into the model: seconds for a small model
# on a local disk, minutes for a large one from a shared volume.
RELOAD_TIMEOUT_S = 600.0
ROUTE_TIMEOUT_S = 30.0  # pause, resume, version: no work beyond a flag (a pause in keep mode)
BASE_VERSION = "default"  # what vLLM's /weight_info says before any version was set


class WeightsError(Exception):
    """The engine refused or failed a weight route; the message says which and why."""


class EngineWeightsClient:
    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        """``base_url``: the engine's address, with or without the OpenAI ``/v1`` suffix."""
        parts = urlsplit(base_url)
        path = parts.path.rstrip("/")
        path = path.removesuffix("/v1")
        self._root = urlunsplit(parts._replace(path=path, query="", fragment=""))
        self._http = http

    async def pause(self) -> None:
        await self._post("/pause", params={"mode": "keep"})

    async def resume(self) -> None:
        await self._post("/resume")

    async def reload(self, checkpoint: str) -> None:
        body = {"method": "reload_weights", "kwargs": {"weights_path": checkpoint}}
        await self._post("/collective_rpc", json=body, timeout=RELOAD_TIMEOUT_S)

    async def set_version(self, version: int) -> None:
        await self._post("/update_weight_version", json={"new_version": str(version)})

    async def is_paused(self) -> bool:
        answer = await self._send("GET", "/is_paused", timeout=ROUTE_TIMEOUT_S)
        try:
            value = answer.json()["is_paused"]
        except (ValueError, KeyError, TypeError) as unreadable:
            raise WeightsError(f"GET /is_paused: unreadable answer ({unreadable})") from None
        if not isinstance(value, bool):
            raise WeightsError(f"GET /is_paused: unreadable answer ({value!r})")
        return value

    async def served_version(self) -> int | None:
        """The version the engine says it serves; None before any update (its base weights,
        which vLLM calls "default")."""
        answer = await self._send("GET", "/weight_info", timeout=ROUTE_TIMEOUT_S)
        try:
            value = answer.json()["weight_version"]
            return None if value in (None, BASE_VERSION) else int(value)
        except (ValueError, KeyError, TypeError) as unreadable:
            raise WeightsError(f"GET /weight_info: unreadable answer ({unreadable})") from None

    async def _post(
        self,
        route: str,
        *,
        params: dict[str, str] | None = None,
        json: object = None,
        timeout: float = ROUTE_TIMEOUT_S,
    ) -> None:
        await self._send("POST", route, params=params, json=json, timeout=timeout)

    async def _send(
        self,
        method: str,
        route: str,
        *,
        params: dict[str, str] | None = None,
        json: object = None,
        timeout: float,
    ) -> httpx.Response:
        try:
            answer = await self._http.request(
                method, self._root + route, params=params, json=json, timeout=timeout
            )
        except httpx.HTTPError as failed:
            raise WeightsError(f"{method} {route}: {type(failed).__name__}: {failed}") from None
        if answer.status_code == 404:
            raise WeightsError(
                f"{method} {route}: 404 (is the engine started with VLLM_SERVER_DEV_MODE=1?)"
            )
        if answer.status_code >= 400:
            raise WeightsError(f"{method} {route}: {answer.status_code} {answer.text[:200]}")
        return answer
