"""Simulated engines as the control core sees them: load samples for the poll, and an
``EngineClient`` whose turns are requests on the engine simulator, answered in virtual time.

Each engine is the simulator's own ``Engine`` on a ``VirtualEngine`` clock, so the
scheduler, KV cache, prefix cache, preemption and step-cost model are exactly the demo's.
An engine can die (every request it holds fails, its polls read down) and join again
(a fresh engine, perhaps with a different KV cache: vLLM cannot resize a live cache, so
"KV halved" is a restart with half of it, as an operator would do it).

Disaggregated serving: a decode engine's client first sends the prompt to the least loaded
prefill engine for one token (the prefill compute and its queue live there), then runs the
turn on the decode engine, whose step cost should then charge little per batched token
(the KV arrives by transfer, not by compute).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from inference.sim import text
from inference.sim.config import EngineConfig
from inference.sim.cost import StepCost
from inference.sim.engine import Engine
from inference.sim.request import FinishReason, Request
from inference.sim.sampling import LengthDistribution, RequestError, SamplingParams
from inference.sim.virtual import VirtualEngine
from workers.core.samples import EngineHealth, EngineRole, LoadSample
from workers.core.turns import Turn, TurnResult


@dataclass(frozen=True, slots=True)
class EngineShape:
    """One engine of a workload: its cost model and its vLLM shape."""

    name: str
    role: EngineRole
    cost: StepCost
    kv_tokens: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    answer_length: LengthDistribution | None  # the engine's own end-of-sequence lengths
    reload_s: float = 0.0  # a weight reload's hold on the engine (workloads with a [trainer])


@dataclass(slots=True, eq=False)
class EpisodeTokens:
    """Tokens generated so far for one episode, however it will end: those of its finished
    turns, and the request it is decoding now, if any."""

    tokens: int = 0
    decoding: Request | None = None

    @property
    def so_far(self) -> int:
        return self.tokens + (0 if self.decoding is None else self.decoding.num_output_tokens)


@dataclass(slots=True)
class InFlight:
    """One run's episodes in flight: the tokens generated for them so far are work done but
    not yet delivered, which a window's rate must count, or a window would be credited with
    the completions of work done before it."""

    episodes: set[EpisodeTokens] = field(default_factory=set)

    def tokens(self) -> int:
        return sum(episode.so_far for episode in self.episodes)


# The episode the running task belongs to: set by ``Tallied`` environments, read by clients.
current_episode: ContextVar[EpisodeTokens | None] = ContextVar("current_episode", default=None)


@dataclass(slots=True)
class Waste:
    """Tokens generated for episodes that never completed (cancelled or failed)."""

    tokens: int = 0
    aborted_requests: int = 0


class SimEngine:
    """One simulated engine, its health, and the counters its last poll read."""

    def __init__(self, shape: EngineShape, seed: int) -> None:
        self.shape = shape
        self.seed = seed
        self.up = True
        self.kv_tokens = shape.kv_tokens
        self.waiters: dict[str, tuple[asyncio.Future[Request], Request]] = {}
        self.generated_total = 0  # over every incarnation of the engine before this one
        self.max_kv_usage = 0.0
        self.preemptions_total = 0  # likewise
        self._incarnation = 0
        self._scraped: dict[str, int] = {}  # per reader: the incarnation it last scraped
        self.virtual = self._build(0.0)

    def _build(self, start: float) -> VirtualEngine:
        shape = self.shape
        config = EngineConfig.from_kv_tokens(
            self.kv_tokens,
            shape.block_size,
            max_num_seqs=shape.max_num_seqs,
            max_num_batched_tokens=shape.max_num_batched_tokens,
            max_model_len=min(shape.max_model_len, self.kv_tokens),
            seed=self.seed,
        )
        # Per reader (a run's monitor: runs sharing the engine each scrape it and take their
        # own deltas), the counters at its last scrape of this incarnation: preemptions,
        # prefix hits, prefix queries, generated tokens.
        self._seen: dict[str, tuple[int, int, int, int]] = {}
        engine = Engine(config, shape.cost, shape.answer_length, reload_s=shape.reload_s)
        return VirtualEngine(engine, start=start)

    @property
    def name(self) -> str:
        return self.shape.name

    @property
    def busy(self) -> bool:
        """Whether the engine has work: only busy engines bound how far time may run."""
        return self.virtual.engine.has_unfinished_requests() or len(self.virtual.arrivals) > 0

    def sample(self, now: float, reader: str = "") -> LoadSample:
        """The engine's ``/metrics`` as ``reader``'s monitor would turn them into one poll's
        sample."""
        engine = self.virtual.engine
        if not self.up:
            return LoadSample(
                self.name, self.shape.role, now, EngineHealth.DOWN, None, None,
                0.0, 0, 0, 0, 0, 0, 0, 0,
            )  # fmt: skip
        stats, counters = engine.make_stats(), engine.counters
        seen = (
            counters.num_preemptions,
            counters.prefix_cache_hits,
            counters.prefix_cache_queries,
            counters.generation_tokens,
        )
        before = self._seen.get(reader, (0, 0, 0, 0))
        delta = [now_ - then for now_, then in zip(seen, before, strict=True)]
        self._seen[reader] = seen
        restarted = self._scraped.get(reader, self._incarnation) != self._incarnation
        self._scraped[reader] = self._incarnation
        self.max_kv_usage = max(self.max_kv_usage, stats.kv_cache_usage)
        return LoadSample(
            engine_id=self.name,
            role=self.shape.role,
            scraped_at=now,
            health=EngineHealth.UP,
            kv_capacity_tokens=engine.config.kv_capacity_tokens,
            max_model_len=engine.config.max_model_len,
            kv_usage=stats.kv_cache_usage,
            num_running=stats.num_running_reqs,
            num_waiting=stats.num_waiting_reqs + stats.num_deferred_reqs,
            num_waiting_capacity=stats.num_waiting_reqs,
            num_preemptions=delta[0],
            prefix_cache_hits=delta[1],
            prefix_cache_queries=delta[2],
            generation_tokens=delta[3],
            restarted=restarted,
        )

    def preemptions_so_far(self) -> int:
        """Preemptions over the whole run, including those since the last poll."""
        return self.preemptions_total + self.virtual.engine.counters.num_preemptions

    def die(self) -> None:
        """The engine goes away: every request it holds fails at once."""
        if not self.up:
            return
        self.up = False
        self._fail_all("engine died")

    def join(self, now: float, kv_tokens: int | None = None) -> None:
        """A fresh engine (empty caches, counters from zero) takes the name's place."""
        self._fail_all("engine restarted")
        if kv_tokens is not None:
            self.kv_tokens = kv_tokens
        counters = self.virtual.engine.counters
        self.preemptions_total += counters.num_preemptions
        self.generated_total += counters.generation_tokens
        self.virtual = self._build(now)
        self.up = True
        self._incarnation += 1

    def lengthen_unstarted(self, factor: float) -> None:
        """A policy that drifts to longer answers writes every answer not yet started, those
        queued here before the drift among them: on a real engine the weights that generate an
        answer decide its length, not the ones in place when it was sent. (The simulator plans
        a length on arrival; left so, a pool with hundreds queued would go on answering at the
        old length long after the drift.) Where the caller planned the length (``ignore_eos``,
        an environment's ``completion_tokens``), the plan stands for the policy's and grows;
        where the engine's end of sequence ended it, that does; a ``max_tokens`` that bounded
        it does not move. The benchmark sends no stop strings."""
        max_model_len = self.virtual.engine.config.max_model_len
        for _, req in self.waiters.values():
            if req.scheduled_time is not None:
                continue  # started: its answer is under way
            planned = max(1, round(req.max_output_tokens * factor))
            if req.ignore_eos:
                room = max_model_len - req.num_prompt_tokens
                req.max_tokens = req.max_output_tokens = min(planned, room)
            elif req.final_reason is FinishReason.STOP:
                if planned >= req.max_tokens:
                    req.max_output_tokens, req.final_reason = req.max_tokens, FinishReason.LENGTH
                else:
                    req.max_output_tokens = planned

    def _fail_all(self, why: str) -> None:
        waiters, self.waiters = self.waiters, {}
        self.virtual.abort(list(waiters))
        for future, _ in waiters.values():
            if not future.done():
                future.set_exception(EngineGone(why))

    def deliver(self, finished: list[Request]) -> None:
        """Answer the turns whose requests finished in the step just run."""
        for req in finished:
            waiter = self.waiters.pop(req.req_id, None)
            if waiter is not None and not waiter[0].done():
                waiter[0].set_result(req)


class EngineGone(Exception):
    """The engine holding a request died or restarted under it."""


class VirtualClient:
    """An ``EngineClient`` on a simulated engine, for the orchestrator's sessions."""

    _ids = itertools.count()

    def __init__(
        self,
        engine: SimEngine,
        now: Callable[[], float],
        waste: Waste,
        prefill: Callable[[], SimEngine | None] | None = None,
        owner: str = "",
    ) -> None:
        self._engine = engine
        self._owner = owner  # its requests' ids start with it: runs sharing an engine
        self._now = now
        self._waste = waste
        self._prefill = prefill

    async def tokenize(self, text_: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        return tuple(text.encode(text_).tolist())

    async def complete(self, turn: Turn) -> TurnResult:
        prompt = (
            np.fromiter(turn.prompt, dtype=np.int64)
            if isinstance(turn.prompt, tuple)
            else (text.encode(turn.prompt))
        )
        if self._prefill is not None:
            stage = self._prefill()
            if stage is None:
                return TurnResult(0, error="no prefill engine is up")
            failed = await self._request(stage, prompt, SamplingParams(max_tokens=1), False)
            if isinstance(failed, str):
                return TurnResult(0, error=failed)
        params = SamplingParams(
            max_tokens=turn.max_tokens, ignore_eos=turn.ignore_eos, seed=turn.seed
        )
        req = await self._request(self._engine, prompt, params, True)
        if isinstance(req, str):
            return TurnResult(0, error=req)
        tokens = req.num_output_tokens
        episode = current_episode.get()
        if episode is not None:
            episode.tokens += tokens
        ids = text.output_token_ids(req.output_seed, 0, tokens)
        reason = "length" if req.finish_reason is FinishReason.LENGTH else "stop"
        return TurnResult(tokens, finish_reason=reason, token_ids=tuple(ids.tolist()))

    async def _request(
        self, engine: SimEngine, prompt: np.ndarray, params: SamplingParams, counted: bool
    ) -> Request | str:
        """One request on ``engine``, its finished record, or why it failed."""
        if not engine.up:
            return f"engine {engine.name} is down"
        req_id = f"{self._owner}r{next(self._ids)}"
        try:
            # An engine that ran ahead of the clock takes it at its next step boundary.
            at = max(self._now(), engine.virtual.now)
            req = engine.virtual.submit(req_id, prompt, params, at)
        except RequestError as refused:
            return str(refused)
        future: asyncio.Future[Request] = asyncio.get_running_loop().create_future()
        engine.waiters[req_id] = (future, req)
        episode = current_episode.get() if counted else None
        if episode is not None:
            episode.decoding = req
        try:
            return await future
        except EngineGone as gone:
            self._waste_partial(req, counted)
            return f"engine {engine.name}: {gone}"
        except asyncio.CancelledError:
            if engine.waiters.pop(req_id, None) is not None:
                engine.virtual.abort([req_id])
                self._waste_partial(req, counted)
            raise
        finally:
            if episode is not None:
                episode.decoding = None

    def _waste_partial(self, req: Request, counted: bool) -> None:
        self._waste.aborted_requests += 1
        episode = current_episode.get()
        if counted and episode is not None:
            episode.tokens += req.num_output_tokens


@dataclass(slots=True)
class PrefillPool:
    """Picks the prefill engine with the fewest requests in flight for each turn."""

    engines: list[SimEngine] = field(default_factory=list)

    def pick(self) -> SimEngine | None:
        up = [engine for engine in self.engines if engine.up]
        return min(up, key=lambda engine: len(engine.waiters)) if up else None
