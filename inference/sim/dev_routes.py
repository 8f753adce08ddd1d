"""vLLM 0.32's development routes for weight updates, over the simulated engine.

Served only with ``VLLM_SERVER_DEV_MODE=1``, as vLLM serves them, so that a relay drives the
simulator exactly as it drives a real engine. Paths, methods, bodies and answers follow
vLLM 0.32 (``vllm/entrypoints/rl/online/api_router.py``, ``serve/dev/cache`` and
``serve/dev/rpc``):

``POST /pause?mode=abort|wait|keep&clear_cache=true``
    ``{"status": "paused"}`` once the pause is complete: ``abort`` ends every request
    (finish reason ``abort``), ``wait`` answers when the running batch has finished, ``keep``
    freezes everything. Requests sent while paused wait for ``/resume``. ``clear_cache``
    (default true, even for ``keep``: vLLM's code then preempts the frozen batch) empties the
    prefix cache once the pause is complete. A bad mode is a 400.
``POST /resume``
    ``{"status": "resumed"}``.
``GET /is_paused``
    ``{"is_paused": bool}``; true from the moment a pause starts, draining or not.
``POST /collective_rpc`` with ``{"method": "reload_weights", "kwargs": {"weights_path": DIR}}``
    ``{"results": [null]}`` (one worker) after the reload time, during which no step runs.
    A path that is not a model directory is vLLM's 500 for a failed worker call. The version
    label and the prefix cache are left as they were, as by vLLM's ``reload_weights``.
``POST /reset_prefix_cache?reset_running_requests=false``
    ``{"success": bool}``; false while a running request holds blocks, unless
    ``reset_running_requests`` preempts them.
``POST /update_weight_version`` with ``{"new_version": "12"}``
    ``{"success": true, "new_version": "12"}``; the version is a string, as in vLLM.
``GET /weight_info``
    ``{"weight_version": "12"}``; ``"default"`` until a version is set.

vLLM's other development routes (sleep, weight transfer engines, ``/abort_requests``...) are
not simulated: Pacer's relay does not use them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from inference.safetensors_check import safetensors_problem
from inference.sim.engine import Engine, PauseMode
from inference.sim.http11 import HttpRequest
from inference.sim.openai_requests import ApiError

if TYPE_CHECKING:
    from inference.sim.server import EngineLoop

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"  # vLLM's switch for these routes, read the same way
# Files vLLM's default loader (load_format "auto") takes weights from, in its order.
WEIGHT_FILE_PATTERNS = ("*.safetensors", "*.bin", "*.pt")
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})  # what FastAPI reads as a true query bool
FALSE_WORDS = frozenset({"false", "0", "no", "off"})

Answer = tuple[int, dict[str, Any]]


def dev_mode_from_env(environ: Mapping[str, str]) -> bool:
    """Whether the routes are served; raises ValueError on a value vLLM would refuse too."""
    value = environ.get(DEV_MODE_ENV, "0")
    try:
        return bool(int(value))
    except ValueError:
        raise ValueError(f"{DEV_MODE_ENV} must be an integer, got {value!r}") from None


def weights_problem(weights_path: str) -> str | None:
    """Why vLLM could not load weights from this directory, or None if it could."""
    path = Path(weights_path)
    if not path.is_dir():
        return f"no model directory at {weights_path}"
    if not any(next(path.glob(pattern), None) for pattern in WEIGHT_FILE_PATTERNS):
        return f"Cannot find any model weights with `{weights_path}`"
    # vLLM's loader fails on a file cut short (a save not finished); so does the simulator.
    for file in sorted(path.glob("*.safetensors")):
        problem = safetensors_problem(file)
        if problem is not None:
            return f"Error while deserializing header: {problem}"
    return None


class DevRoutes:
    """The weight-update routes of one simulated server."""

    def __init__(self, loop: EngineLoop) -> None:
        self.loop = loop
        self.engine: Engine = loop.engine
        self.routes: dict[tuple[str, str], Callable[[HttpRequest], Awaitable[Answer]]] = {
            ("POST", "/pause"): self.pause,
            ("POST", "/resume"): self.resume,
            ("GET", "/is_paused"): self.is_paused,
            ("POST", "/collective_rpc"): self.collective_rpc,
            ("POST", "/reset_prefix_cache"): self.reset_prefix_cache,
            ("POST", "/update_weight_version"): self.update_weight_version,
            ("GET", "/weight_info"): self.weight_info,
        }

    async def pause(self, request: HttpRequest) -> Answer:
        query = parse_qs(request.query)
        word = _last(query, "mode", PauseMode.ABORT.value)
        try:
            mode = PauseMode(word)
        except ValueError:
            message = f"mode: Input should be 'abort', 'wait' or 'keep', got {word!r}"
            raise ApiError(400, message) from None
        clear_cache = _query_bool(query, "clear_cache", True)
        engine = self.engine

        async def begin() -> None:
            self.loop.announce(engine.pause(mode, self.loop.model_now()))

        await self.loop.control(begin)
        gone = asyncio.ensure_future(request.disconnected.wait())
        try:
            while not engine.is_drained():
                if not await self.loop.next_step(gone):
                    return 499, {"error": "client closed the request before the pause completed"}
        finally:
            gone.cancel()
        if clear_cache:

            async def clear() -> None:
                engine.reset_prefix_cache(reset_running_requests=True)

            await self.loop.control(clear)
        return 200, {"status": "paused"}

    async def resume(self, request: HttpRequest) -> Answer:
        async def go() -> None:
            self.engine.resume()

        await self.loop.control(go)
        return 200, {"status": "resumed"}

    async def is_paused(self, request: HttpRequest) -> Answer:
        return 200, {"is_paused": self.engine.is_paused}

    async def collective_rpc(self, request: HttpRequest) -> Answer:
        body = _json_object(request)
        method = body.get("method")
        if method is None:
            raise ApiError(400, "Missing 'method' in request body", "Bad Request")
        kwargs = body.get("kwargs", {})
        if method != "reload_weights":
            _worker_failed(f"'Worker' object has no attribute {method!r}")
        if not isinstance(kwargs, dict):
            _worker_failed("reload_weights() argument after ** must be a mapping")
        unknown = set(kwargs) - {"weights_path", "is_checkpoint_format"}
        if unknown:
            _worker_failed(f"reload_weights() got an unexpected keyword argument {min(unknown)!r}")
        weights_path = kwargs.get("weights_path")
        if weights_path is not None:
            problem = weights_problem(str(weights_path))
            if problem is not None:
                _worker_failed(problem)

        async def reload() -> None:
            await asyncio.sleep(self.engine.load_weights(weights_path))

        await self.loop.control(reload)
        return 200, {"results": [None]}

    async def reset_prefix_cache(self, request: HttpRequest) -> Answer:
        running = _query_bool(parse_qs(request.query), "reset_running_requests", False)

        async def reset() -> bool:
            return self.engine.reset_prefix_cache(reset_running_requests=running)

        return 200, {"success": await self.loop.control(reset)}

    async def update_weight_version(self, request: HttpRequest) -> Answer:
        version = _json_object(request).get("new_version")
        if not isinstance(version, str):
            raise ApiError(400, "new_version: Input should be a valid string")

        async def label() -> None:
            self.engine.weight_version = version

        await self.loop.control(label)
        return 200, {"success": True, "new_version": version}

    async def weight_info(self, request: HttpRequest) -> Answer:
        return 200, {"weight_version": self.engine.weight_version}


def _json_object(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"JSON decode error: {exc}", "Bad Request") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object", "Bad Request")
    return body


def _worker_failed(reason: str) -> None:
    """Raises the 500 vLLM answers when the worker's side of a collective_rpc fails."""
    raise ApiError(
        500,
        f"Call to collective_rpc method failed: Worker failed with error '{reason}', "
        "please check the stack trace above for the root cause",
        "InternalServerError",
    )


def _last(query: dict[str, list[str]], name: str, default: str) -> str:
    values = query.get(name)
    return values[-1] if values else default


def _query_bool(query: dict[str, list[str]], name: str, default: bool) -> bool:
    word = _last(query, name, str(default)).lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ApiError(400, f"{name}: Input should be a valid boolean, got {word!r}")
