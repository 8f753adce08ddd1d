"""One simulated engine: scheduler, KV cache, step-cost model and counters, with no clock.

Whoever owns time calls ``step(now)``; the engine schedules a batch, says how long it takes
and applies it as of ``now + duration``. The HTTP server calls it from a loop that sleeps that
long (real time); the virtual-time driver just adds the duration to its clock. Both therefore
run exactly the same model, which is what makes the benchmarks' numbers mean something for
the demo and the other way round.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from inference.sim import text
from inference.sim.config import EngineConfig
from inference.sim.cost import StepCost
from inference.sim.fast_forward import advance_decode_run, max_decode_run, run_times
from inference.sim.kv_manager import KVCacheManager
from inference.sim.output import SchedulerOutput, SchedulerStats, StepUpdate
from inference.sim.request import FinishReason, Request, RequestStatus
from inference.sim.sampling import LengthDistribution, RequestError, SamplingParams, plan_output
from inference.sim.scheduler import PauseState, Scheduler
from inference.sim.stats import EngineCounters

BASE_WEIGHT_VERSION = "default"  # the version vLLM 0.32's engine core reports until one is set


class PauseMode(enum.StrEnum):
    """What a pause does to requests in flight, as vLLM 0.32's ``/pause?mode=``."""

    ABORT = "abort"  # every request ends now, finish reason "abort"
    WAIT = "wait"  # the running batch finishes; queued requests stay queued
    KEEP = "keep"  # everything freezes where it is and goes on after resume


@dataclass(frozen=True, slots=True)
class PendingStep:
    """A step scheduled and running: its results apply at ``end``."""

    start: float
    end: float
    scheduled: SchedulerOutput


@dataclass(frozen=True, slots=True)
class StepResult:
    """One step as it ran (or a run of identical decode steps): timing and what it produced."""

    start: float  # start of the (last) step
    end: float
    num_steps: int  # 1, or the length of a decode run (virtual time)
    num_seqs: int  # requests scheduled in the (last) step
    num_preempted: int
    num_generated_tokens: int
    first_token: list[Request]
    finished: list[Request]

    @property
    def is_idle(self) -> bool:
        """Nothing was scheduled and nothing preempted: the clock may jump ahead."""
        return self.num_seqs == 0 and self.num_preempted == 0


class Engine:
    """The engine model; deterministic for a config seed and a sequence of calls."""

    def __init__(
        self,
        config: EngineConfig,
        cost: StepCost,
        default_length: LengthDistribution | None = None,
        grammar_compile_s: float = 0.0,
        reload_s: float = 0.0,
    ) -> None:
        if grammar_compile_s < 0.0:
            raise ValueError(f"grammar_compile_s must be >= 0, got {grammar_compile_s}")
        if reload_s < 0.0:
            raise ValueError(f"reload_s must be >= 0, got {reload_s}")
        self.config = config
        self.cost = cost
        self.default_length = default_length
        self.grammar_compile_s = grammar_compile_s
        self.reload_s = reload_s  # how long a weight reload keeps the engine from stepping
        self.weight_version = BASE_WEIGHT_VERSION  # a label only: set by whoever reloads
        self.weights_path: str | None = None  # the checkpoint loaded last; None: the base model
        self.kv = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            config.enable_prefix_caching,
        )
        self.scheduler = Scheduler(config, self.kv)
        self.counters = EngineCounters()
        self._rng = np.random.default_rng(config.seed)
        self._pending: PendingStep | None = None
        self._aborts_after_step: list[str] = []

    def add_request(
        self, req_id: str, prompt_token_ids: np.ndarray, params: SamplingParams, now: float
    ) -> Request:
        """Queues a request arriving ``now``; raises RequestError (nothing queued) if invalid."""
        req = self.prepare_request(req_id, prompt_token_ids, params, now)
        self.queue_request(req)
        return req

    def prepare_request(
        self, req_id: str, prompt_token_ids: np.ndarray, params: SamplingParams, arrival: float
    ) -> Request:
        """A request arriving at ``arrival``, checked and planned but not queued.

        Raises RequestError if it is invalid. Split from queueing for a caller that accepts
        requests before they arrive (the virtual clock): it can refuse a bad one at once and
        still keep a good one out of the scheduler until its time.
        """
        prompt = np.array(prompt_token_ids, dtype=np.int64)  # a copy: the caller may reuse its own
        if prompt.ndim != 1 or len(prompt) == 0:
            raise RequestError("the prompt must be a non-empty sequence of token ids")
        if prompt.min() < 0 or prompt.max() >= text.VOCAB_SIZE:
            bad = prompt[(prompt < 0) | (prompt >= text.VOCAB_SIZE)]
            raise RequestError(f"token id {int(bad[0])} is out of vocabulary")
        if params.seed is None:
            rng = self._rng
            output_seed = int(rng.integers(1 << 63))
        else:
            rng = np.random.default_rng(params.seed)
            output_seed = params.seed
        plan = plan_output(
            params, len(prompt), self.config.max_model_len, self.default_length, rng, output_seed
        )
        req = Request(
            req_id=req_id,
            prompt_token_ids=prompt,
            max_output_tokens=plan.num_tokens,
            final_reason=plan.reason,
            output_seed=output_seed,
            arrival_time=arrival,
            max_tokens=plan.max_tokens,
            ignore_eos=params.ignore_eos,
            ready_time=arrival + self.grammar_compile_s if params.structured else arrival,
        )
        return req

    def queue_request(self, req: Request) -> None:
        """Hands a prepared request to the scheduler: the next step may admit it."""
        self.scheduler.add_request(req)

    def has_request(self, req_id: str) -> bool:
        """Whether a request of that id is in the engine and unfinished."""
        return req_id in self.scheduler.requests

    def abort(self, req_ids: Iterable[str], now: float) -> list[Request]:
        """Cancels requests (client gone); their blocks are freed at once.

        During a step (between ``begin_step`` and ``end_step``) the aborts wait for its end,
        as the batch it runs cannot change under it; an empty list is returned then.
        """
        if self._pending is not None:
            self._aborts_after_step.extend(req_ids)
            return []
        aborted = self.scheduler.finish_requests(req_ids, now)
        self.counters.request_success[FinishReason.ABORT] += len(aborted)
        return aborted

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def has_schedulable_requests(self) -> bool:
        """Whether a step would run anything; False when idle or when a pause holds it all."""
        return self.scheduler.has_schedulable_requests()

    @property
    def is_paused(self) -> bool:
        return self.scheduler.pause_state is not PauseState.UNPAUSED

    def pause(self, mode: PauseMode, now: float) -> list[Request]:
        """Stops admitting requests; returns those a pause in ``abort`` mode ended.

        Requests that arrive while paused are queued and wait for ``resume``, as in vLLM. The
        pause is complete (``is_drained``) at once for ``abort`` and ``keep``, and for ``wait``
        once the running batch has finished.
        """
        self._require_between_steps("pause")
        aborted = self.abort(list(self.scheduler.requests), now) if mode is PauseMode.ABORT else []
        frozen = mode is PauseMode.KEEP
        self.scheduler.pause_state = PauseState.PAUSED_ALL if frozen else PauseState.PAUSED_NEW
        return aborted

    def is_drained(self) -> bool:
        """A pause is complete: no step would run anything until ``resume``."""
        return self.is_paused and not self.has_schedulable_requests()

    def resume(self) -> None:
        """Lets queued and frozen requests run again; a no-op when not paused."""
        self.scheduler.pause_state = PauseState.UNPAUSED

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """Forgets every cached prefix; False (nothing changed) while a request holds blocks.

        With ``reset_running_requests`` the running batch is preempted first (recomputed when
        it runs again), so the reset always succeeds: what vLLM's pause does when it clears
        the cache, even in ``keep`` mode.
        """
        self._require_between_steps("reset_prefix_cache")
        if reset_running_requests:
            self.scheduler.preempt_running()
        return self.kv.reset_prefix_cache()

    def load_weights(self, weights_path: str | None) -> float:
        """Takes new weights (None: the base model again); returns how long that takes.

        As vLLM's ``reload_weights``, this neither changes the version label nor the prefix
        cache: the caller sets the one and clears the other (a pause does by default).
        """
        self._require_between_steps("load_weights")
        self.weights_path = weights_path
        return self.reload_s

    def _require_between_steps(self, what: str) -> None:
        # vLLM runs these utility calls between two steps of its busy loop; so must we.
        if self._pending is not None:
            raise RuntimeError(f"{what} during a step: call it between end_step and begin_step")

    def next_ready_time(self) -> float | None:
        """Earliest time a deferred request becomes schedulable, if any is deferred."""
        if self.scheduler.num_deferred == 0:
            return None
        return min(
            req.ready_time
            for req in self.scheduler.waiting
            if req.status is RequestStatus.WAITING_FOR_FSM
        )

    def make_stats(self) -> SchedulerStats:
        return self.scheduler.make_stats()

    def step(self, now: float) -> StepResult:
        """Runs one whole step starting at ``now``; an idle step takes no time."""
        return self.end_step(self.begin_step(now))

    def begin_step(self, now: float) -> PendingStep:
        """Schedules a step starting at ``now``; its results apply at ``end_step``."""
        if self._pending is not None:
            raise RuntimeError("a step is already running: call end_step first")
        scheduled = self.scheduler.schedule(now)
        end = now + self.cost.step_time(
            scheduled.num_batched_tokens,
            scheduled.num_seqs,
            scheduled.num_context_tokens,
            scheduled.num_attention_pairs,
        )
        if scheduled.num_seqs == 0:
            end = now  # nothing ran (at most a preemption): no time passes
        self._pending = PendingStep(now, end, scheduled)
        return self._pending

    def end_step(self, pending: PendingStep) -> StepResult:
        """Applies a step begun with ``begin_step``, then any aborts that arrived meanwhile."""
        if pending is not self._pending:
            raise RuntimeError("end_step must be given the step in progress")
        update = self.scheduler.update_from_output(pending.scheduled, pending.end)
        self._pending = None
        num_preempted = len(pending.scheduled.preempted)
        self._record(num_preempted, update)
        if self._aborts_after_step:
            req_ids, self._aborts_after_step = self._aborts_after_step, []
            self.abort(req_ids, pending.end)
        return StepResult(
            start=pending.start,
            end=pending.end,
            num_steps=1,
            num_seqs=pending.scheduled.num_seqs,
            num_preempted=num_preempted,
            num_generated_tokens=update.num_generated_tokens,
            first_token=update.first_token,
            finished=update.finished,
        )

    def step_until(self, now: float, until: float) -> StepResult:
        """A step, or a run of identical decode steps that all start before ``until``.

        For virtual time: the run gives the same result as stepping one step at a time.
        """
        steps = max_decode_run(self.scheduler)
        if steps > 1:
            batch = self.scheduler.running
            n = len(batch)
            durations = run_times(self.cost, n, int(batch.num_computed[:n].sum()), steps)
            # Sequential sums, as stepping adds one duration at a time: same floats.
            times = np.cumsum(np.concatenate(([now], durations)))
            steps = int(np.count_nonzero(times[:steps] < until))
            if steps > 1:
                update = advance_decode_run(self.scheduler, steps, float(times[steps]))
                self._record(0, update)
                return StepResult(
                    start=float(times[steps - 1]),
                    end=float(times[steps]),
                    num_steps=steps,
                    num_seqs=n,
                    num_preempted=0,
                    num_generated_tokens=update.num_generated_tokens,
                    first_token=[],
                    finished=update.finished,
                )
        return self.step(now)

    def _record(self, num_preempted: int, update: StepUpdate) -> None:
        counters = self.counters
        counters.num_preemptions += num_preempted
        counters.generation_tokens += update.num_generated_tokens
        prefix = self.kv.make_prefix_cache_stats()
        counters.prefix_cache_queries += prefix.queries
        counters.prefix_cache_hits += prefix.hits
        for req in update.first_token:
            assert req.first_token_time is not None
            counters.prompt_tokens += req.num_prompt_tokens
            counters.time_to_first_token.observe(req.first_token_time - req.arrival_time)
        for req in update.finished:
            assert req.finish_time is not None and req.scheduled_time is not None
            counters.request_success[req.final_reason] += 1
            counters.e2e_request_latency.observe(req.finish_time - req.arrival_time)
            counters.request_queue_time.observe(req.scheduled_time - req.arrival_time)
