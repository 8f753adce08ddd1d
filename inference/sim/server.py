"""The simulator in real time: vLLM's HTTP surface over the engine model.

``EngineLoop`` steps the engine and sleeps each step's modelled duration, so tokens come out
at the pace the cost model says. ``SimServer`` answers ``/v1/completions`` and
``/v1/chat/completions`` (whole or streamed as server-sent events, with vLLM's
``return_token_ids`` on completions), ``/tokenize``, ``/v1/models``, ``/metrics`` and
``/health``. A client that disconnects has its requests aborted at once,
which frees their KV blocks, as vLLM does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST

from inference.sim import openai_responses as render
from inference.sim.dev_routes import DevRoutes
from inference.sim.engine import Engine, PendingStep
from inference.sim.http11 import HttpRequest, Response, StreamingResponse
from inference.sim.metrics import exposition, make_registry
from inference.sim.openai_requests import (
    ApiError,
    GenerationRequest,
    parse_chat,
    parse_completion,
    parse_tokenize,
)
from inference.sim.request import Request
from inference.sim.sampling import RequestError

logger = logging.getLogger(__name__)

T = TypeVar("T")

IDLE_POLL_S = 0.01  # how often an engine holding only deferred requests looks again
CATCH_UP_S = 0.005  # a step this late keeps the model's timeline; later, real time wins


class EngineLoop:
    """Runs the engine against a real clock; handlers submit, abort and wait for steps.

    Steps follow the model's timeline: a step starts when the previous one ends in model
    time, even if the event loop woke a little late, so sleep granularity does not slow the
    engine down; only a process that falls behind by more than ``CATCH_UP_S`` lets real time
    win. Requests arriving during a step are stamped no later than that step's end.
    """

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.clock = clock
        self._work = asyncio.Event()
        self._pending: PendingStep | None = None
        self._stepped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._finished: dict[str, asyncio.Future[None]] = {}
        self._controls: deque[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = deque()

    def model_now(self) -> float:
        """The clock, but never past the end of the step in progress."""
        now = self.clock()
        return now if self._pending is None else min(now, self._pending.end)

    def submit(self, req_id: str, request: GenerationRequest, seed_offset: int) -> Request:
        params = request.params
        if params.seed is not None and seed_offset:
            params = dataclasses.replace(params, seed=params.seed + seed_offset)
        req = self.engine.add_request(req_id, request.prompt_token_ids, params, self.model_now())
        self._finished[req_id] = asyncio.get_running_loop().create_future()
        self._work.set()
        return req

    def abort(self, req_ids: list[str]) -> None:
        for req_id in req_ids:
            self._finished.pop(req_id, None)
        self.engine.abort(req_ids, self.model_now())

    async def wait_finished(self, reqs: list[Request], gone: asyncio.Future[bool]) -> bool:
        """Waits until every request has finished; False if the client went away first."""
        waiting = {self._finished[req.req_id] for req in reqs if not req.is_finished}
        while waiting and not gone.done():
            _done, waiting = await asyncio.wait(
                {*waiting, gone}, return_when=asyncio.FIRST_COMPLETED
            )
            waiting.discard(gone)
        return not gone.done()

    async def next_step(self, gone: asyncio.Future[bool]) -> bool:
        """Waits for the next step to end; False if the client went away first."""
        await asyncio.wait({self._stepped, gone}, return_when=asyncio.FIRST_COMPLETED)
        return not gone.done()

    async def control(self, op: Callable[[], Awaitable[T]]) -> T:
        """Runs ``op`` between two steps, as vLLM runs a utility call in its busy loop.

        No step runs while ``op`` does: a weight reload that sleeps holds the engine still.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._controls.append((op, future))
        self._work.set()
        result: T = await future
        return result

    def announce(self, finished: list[Request]) -> None:
        """Tells handlers that these requests ended and that the engine moved on."""
        for req in finished:
            future = self._finished.pop(req.req_id, None)
            if future is not None:
                future.set_result(None)
        stepped, self._stepped = self._stepped, asyncio.get_running_loop().create_future()
        stepped.set_result(None)

    async def run(self) -> None:
        """Steps forever; cancel the task to stop.

        The next step is scheduled as soon as one ends, before handlers are told, so that
        their work (JSON, sockets) overlaps the next step's modelled time.
        """
        while True:
            if self._pending is None:
                self._pending = await self._next_busy_step()
            pending = self._pending
            await asyncio.sleep(max(pending.end - self.clock(), 0.0))
            result = self.engine.end_step(pending)
            self._pending = None
            await self._run_controls()
            late = self.clock() - pending.end
            self._pending = self._begin_busy_step(pending.end if late < CATCH_UP_S else None)
            self.announce(result.finished)

    async def _run_controls(self) -> None:
        while self._controls:
            op, future = self._controls.popleft()
            try:
                future.set_result(await op())
            except Exception as exc:  # the caller answers it; the engine goes on
                future.set_exception(exc)

    def _begin_busy_step(self, start: float | None) -> PendingStep | None:
        """Begins a step at ``start`` (default: now) if it would run anything, else None."""
        if not self.engine.has_schedulable_requests():
            return None
        pending = self.engine.begin_step(self.clock() if start is None else start)
        if pending.scheduled.num_seqs == 0 and not pending.scheduled.preempted:
            self.engine.end_step(pending)
            return None
        return pending

    async def _next_busy_step(self) -> PendingStep:
        """Waits for work (or for a deferred request to become ready) and begins its step."""
        while True:
            await self._run_controls()
            pending = self._begin_busy_step(None)
            if pending is not None:
                return pending
            if self.engine.has_schedulable_requests():
                ready = self.engine.next_ready_time()
                wait = IDLE_POLL_S if ready is None else max(ready - self.clock(), 0.0)
                await asyncio.sleep(min(wait, IDLE_POLL_S))
            else:
                self._work.clear()
                await self._work.wait()


class SimServer:
    """Routes HTTP requests to the engine loop; one served model.

    ``dev_mode`` adds vLLM's weight-update routes (``inference.sim.dev_routes``), as
    ``VLLM_SERVER_DEV_MODE=1`` does for vLLM, and the served version to ``/metrics``.
    """

    def __init__(self, loop: EngineLoop, dev_mode: bool = False) -> None:
        self.loop = loop
        self.engine = loop.engine
        self.model = loop.engine.config.model_name
        self.created = int(time.time())
        self.registry = make_registry(loop.engine, time.time(), dev_mode)
        self.dev_routes = DevRoutes(loop).routes if dev_mode else {}

    async def handle(self, request: HttpRequest) -> Response | StreamingResponse:
        # As Starlette's routes (vLLM's server): a GET route answers HEAD too; the HTTP layer
        # sends the response's head without its body.
        method = "GET" if request.method == "HEAD" else request.method
        route = (method, request.path)
        try:
            if route == ("GET", "/health"):
                return Response(200, b"", "text/plain")
            if route == ("GET", "/metrics"):
                return Response(200, exposition(self.registry), CONTENT_TYPE_LATEST)
            if route == ("GET", "/v1/models"):
                body = render.models_body(
                    self.model, self.engine.config.max_model_len, self.created
                )
                return _json(200, body)
            if route == ("POST", "/v1/completions"):
                return await self._generate(request, parse_completion(_body(request), self.model))
            if route == ("POST", "/v1/chat/completions"):
                return await self._generate(request, parse_chat(_body(request), self.model))
            if route == ("POST", "/tokenize"):
                ids = parse_tokenize(_body(request), self.model).tolist()
                return _json(200, render.tokenize_body(ids, self.engine.config.max_model_len))
            dev_route = self.dev_routes.get(route)
            if dev_route is not None:
                status, body = await dev_route(request)
                return _json(status, body)
            if request.path in {path for _method, path in self.dev_routes} or request.path in (
                "/health",
                "/metrics",
                "/v1/models",
                "/v1/completions",
                "/v1/chat/completions",
                "/tokenize",
            ):
                raise ApiError(
                    405, f"{request.method} is not allowed on {request.path}", "MethodNotAllowed"
                )
            raise ApiError(404, f"no route for {request.path}", "NotFoundError")
        except ApiError as exc:
            return _json(exc.status, render.error_body(exc.status, exc.message, exc.error_type))
        except Exception:
            # A bug must not drop the connection without a word: the client gets a 500 it can
            # report, the log gets the traceback, and the server keeps serving.
            logger.exception("engine simulator: %s %s failed", request.method, request.path)
            body = render.error_body(
                500, "internal error in the engine simulator", "InternalServerError"
            )
            return _json(500, body)

    async def _generate(
        self, http: HttpRequest, request: GenerationRequest
    ) -> Response | StreamingResponse:
        resp_id = f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex}"
        reqs: list[Request] = []
        try:
            for index in range(request.n):
                reqs.append(self.loop.submit(f"{resp_id}-{index}", request, index))
        except RequestError as exc:
            self.loop.abort([req.req_id for req in reqs])
            raise ApiError(400, str(exc)) from None
        params = request.params
        choices = [render.ChoiceText(req, params.stop, params.min_tokens) for req in reqs]
        if request.stream:
            return StreamingResponse(self._stream(http, request, resp_id, choices))
        gone = asyncio.ensure_future(http.disconnected.wait())
        try:
            if not await self.loop.wait_finished(reqs, gone):
                self.loop.abort([req.req_id for req in reqs])
                return Response(499, b"", "text/plain")
        finally:
            gone.cancel()
        if request.chat:
            body = render.envelope(
                "chat.completion",
                resp_id,
                int(time.time()),
                self.model,
                [render.chat_choice(i, c, request.logprobs) for i, c in enumerate(choices)],
            )
        else:
            body = render.envelope(
                "text_completion",
                resp_id,
                int(time.time()),
                self.model,
                [
                    render.completion_choice(
                        i,
                        c,
                        0,
                        c.req.num_output_tokens,
                        request.logprobs,
                        True,
                        request.return_token_ids,
                    )
                    for i, c in enumerate(choices)
                ],
            )
        body["usage"] = _usage(reqs)
        return _json(200, body)

    async def _stream(
        self,
        http: HttpRequest,
        request: GenerationRequest,
        resp_id: str,
        choices: list[render.ChoiceText],
    ) -> AsyncIterator[bytes]:
        kind = "chat.completion.chunk" if request.chat else "text_completion"
        created = int(time.time())
        sent = [0] * len(choices)
        closed = [False] * len(choices)
        gone = asyncio.ensure_future(http.disconnected.wait())
        try:
            if request.chat:
                roles = [
                    render.chat_delta(i, c, 0, 0, None, False, True) for i, c in enumerate(choices)
                ]
                yield _sse(render.envelope(kind, resp_id, created, self.model, roles))
            while True:
                for index, choice in enumerate(choices):
                    produced = choice.req.num_output_tokens
                    finished = choice.req.is_finished
                    if closed[index] or (produced == sent[index] and not finished):
                        continue
                    part = self._delta(request, index, choice, sent[index], produced, finished)
                    yield _sse(render.envelope(kind, resp_id, created, self.model, [part]))
                    sent[index], closed[index] = produced, finished
                if all(closed):
                    break
                if not await self.loop.next_step(gone):
                    return
            if request.include_usage:
                final = render.envelope(kind, resp_id, created, self.model, [])
                final["usage"] = _usage([choice.req for choice in choices])
                yield _sse(final)
            yield b"data: [DONE]\n\n"
        finally:
            gone.cancel()
            unfinished = [c.req.req_id for c in choices if not c.req.is_finished]
            if unfinished:
                self.loop.abort(unfinished)

    @staticmethod
    def _delta(
        request: GenerationRequest,
        index: int,
        choice: render.ChoiceText,
        start: int,
        stop: int,
        finished: bool,
    ) -> dict[str, Any]:
        if request.chat:
            return render.chat_delta(index, choice, start, stop, request.logprobs, finished, False)
        return render.completion_choice(
            index, choice, start, stop, request.logprobs, finished, request.return_token_ids
        )


def _body(request: HttpRequest) -> Any:
    try:
        return json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        # The decoder recurses per nesting level; no OpenAI body comes anywhere near the limit.
        raise ApiError(400, "the request body is nested too deeply") from None


def _usage(reqs: list[Request]) -> dict[str, int]:
    return render.usage(reqs[0].num_prompt_tokens, sum(req.num_output_tokens for req in reqs))


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(status, json.dumps(body, separators=(",", ":")).encode())


def _sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"
