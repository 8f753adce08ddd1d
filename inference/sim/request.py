"""A request as the simulated scheduler sees it, with vLLM's status and counter names.

The output a request will produce is decided when it arrives (its length from ``max_tokens``,
the stop strings and the engine's length distribution; its token ids from a seed), so the
scheduler only has to count tokens. While a request runs, its counters live in the running
batch's arrays (that is what lets a step update hundreds of requests in a few numpy calls);
the properties below read them from wherever they currently are.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from inference.sim import text

if TYPE_CHECKING:
    from inference.sim.batch import RunningBatch


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, never run or not yet admitted
    WAITING_FOR_FSM = "waiting_for_fsm"  # structured output: grammar still compiling (deferred)
    RUNNING = "running"  # in the running batch, holding KV blocks
    PREEMPTED = "preempted"  # evicted from the batch, requeued at the head, KV dropped
    FINISHED_STOPPED = "finished_stopped"  # hit its end of sequence or a stop string
    FINISHED_LENGTH = "finished_length"  # reached max_tokens or the model length
    FINISHED_ABORTED = "finished_aborted"  # cancelled, e.g. its client went away

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset(
    {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED}
)


class FinishReason(enum.StrEnum):
    """Why a request ended, with the values vLLM puts in ``finish_reason`` and metric labels."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"

    @property
    def status(self) -> RequestStatus:
        return {
            FinishReason.STOP: RequestStatus.FINISHED_STOPPED,
            FinishReason.LENGTH: RequestStatus.FINISHED_LENGTH,
            FinishReason.ABORT: RequestStatus.FINISHED_ABORTED,
        }[self]


@dataclass(eq=False, slots=True)
class Request:
    """One generation request; identity is the object, ``req_id`` names it to clients."""

    req_id: str
    prompt_token_ids: np.ndarray  # int64 token ids of the prompt
    max_output_tokens: int  # output length at which it finishes, decided at arrival
    final_reason: FinishReason  # the reason it will finish with on reaching that length
    output_seed: int  # seeds its output token ids (see inference.sim.text)
    arrival_time: float  # clock seconds when it reached the engine
    max_tokens: int  # max_tokens as asked or defaulted, clamped to the room left (as vLLM)
    ignore_eos: bool = False  # asked to run to max_tokens: the length is the caller's plan
    ready_time: float = 0.0  # may not be scheduled before this (grammar compile): deferred
    status: RequestStatus = RequestStatus.WAITING
    num_preemptions: int = 0
    scheduled_time: float | None = None  # first time it entered the running batch
    first_token_time: float | None = None
    finish_time: float | None = None
    finish_reason: FinishReason | None = None  # set when it finishes
    num_cached_prompt_tokens: int = 0  # prefix-cache hit of its first admission
    _num_computed_tokens: int = 0
    _num_output_tokens: int = 0
    batch: RunningBatch | None = field(default=None, repr=False)
    batch_pos: int = -1  # index in the running batch while it runs

    def __post_init__(self) -> None:
        if len(self.prompt_token_ids) == 0:
            raise ValueError(f"request {self.req_id}: the prompt must hold at least one token")
        if self.max_output_tokens < 1:
            raise ValueError(f"request {self.req_id}: it must generate at least one token")

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_computed_tokens(self) -> int:
        """Tokens whose KV is computed (vLLM's name); 0 again after a preemption."""
        if self.batch is None:
            return self._num_computed_tokens
        return int(self.batch.num_computed[self.batch_pos])

    @property
    def num_output_tokens(self) -> int:
        """Tokens sampled so far; they survive a preemption and are re-prefilled."""
        if self.batch is None:
            return self._num_output_tokens
        return int(self.batch.num_tokens[self.batch_pos]) - self.num_prompt_tokens

    @property
    def num_tokens(self) -> int:
        """Prompt plus output so far: what must be in KV before the next token is sampled."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    def token_ids(self, start: int, stop: int) -> np.ndarray:
        """Token ids at positions ``start..stop-1`` of prompt followed by output."""
        num_prompt = self.num_prompt_tokens
        if stop <= num_prompt:
            return self.prompt_token_ids[start:stop]
        outputs = text.output_token_ids(
            self.output_seed, max(start - num_prompt, 0), stop - num_prompt
        )
        if start >= num_prompt:
            return outputs
        return np.concatenate([self.prompt_token_ids[start:], outputs])

    def set_counters(self, num_computed_tokens: int, num_output_tokens: int) -> None:
        """Stores the counters of a request outside the running batch."""
        if self.batch is not None:
            raise ValueError(f"request {self.req_id} is in the running batch")
        self._num_computed_tokens = num_computed_tokens
        self._num_output_tokens = num_output_tokens
