"""What an environment is, and the session through which an episode talks to its engine.

An environment turns a task seed into one episode: it writes the prompt, asks the engine for
answers, appends observations between turns, waits for its tools, and scores the result. It
never sees HTTP, the clock or token bookkeeping: the ``Session`` keeps the conversation as
token ids growing in place (prompt, each answer as sampled, each observation), with a loss
mask over the sampled tokens and their logprobs, which is exactly what a trainer needs and
what keeps a multi-turn context's prefix cached on the engine.

    class Echo:
        name = "echo"

        @classmethod
        def from_args(cls, args: Table) -> Echo:
            return cls()

        async def run(self, session: Session, task_seed: int) -> Episode:
            await session.prompt(f"Say {task_seed}.")
            answer = await session.generate()
            return session.finish(reward=float(str(task_seed) in answer.text))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from workers.core.clock import Clock
from workers.core.config.fields import Table
from workers.core.turns import Turn, TurnResult
from workers.core.validation import check_range

_SEED_MODULUS = (1 << 63) - 1  # request seeds must fit vLLM's int64
_TURN_STRIDE = 1_000_003  # a prime: turns of one episode draw well-separated seeds


class EngineClient(Protocol):
    """What an episode needs of its engine; ``inference.rollout_client.RolloutClient`` fits,
    and so does the benchmarks' virtual engine."""

    async def complete(self, turn: Turn) -> TurnResult: ...

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]: ...


@dataclass(frozen=True, slots=True)
class Sampling:
    """How answers are sampled; the same for every turn of an environment's episodes."""

    temperature: float = 1.0  # RL samples from the policy as it is
    top_p: float = 1.0
    max_tokens: int = 256  # per turn
    logprobs: bool = True  # the sampled tokens' logprobs, which the trainer's ratio needs

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, 0.0, 100.0)
        check_range("top_p", self.top_p, 0.001, 1.0)
        check_range("max_tokens", self.max_tokens, 1, 1 << 20)


class EpisodeError(Exception):
    """The episode cannot go on (a turn failed, the context is full); it ends as failed, which
    the controller reads as a failure, never as an idle engine."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One sampled turn."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class Episode:
    """One finished episode: the whole conversation as token ids, which of them were sampled
    (the loss mask), their logprobs (0.0 elsewhere), the reward and what the environment
    wants to keep about it."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[bool, ...]
    logprobs: tuple[float, ...]
    reward: float
    turns: int
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # The policy version each turn was sampled under, as its engine served it (empty when the
    # session was given no way to know): a multi-turn episode can straddle a weight update.
    turn_versions: tuple[int, ...] = ()
    # What its requests held of the engines' KV cache over its life, in token-seconds: each
    # turn's context with half its answer (the answer grows through the turn) times the turn's
    # time. Over the episode's time in flight it is its KV footprint, which a pool of shared
    # engines splits by (``workers.core.sharing``).
    kv_token_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not len(self.token_ids) == len(self.loss_mask) == len(self.logprobs):
            raise ValueError(
                f"token_ids, loss_mask and logprobs must align: {len(self.token_ids)}, "
                f"{len(self.loss_mask)}, {len(self.logprobs)}"
            )

    @property
    def tokens(self) -> int:
        """Tokens the engine generated for this episode (the controller's growth reads it)."""
        return sum(self.loss_mask)

    @property
    def ok(self) -> bool:
        return True


class Session:
    """One episode's conversation with its engine."""

    def __init__(
        self,
        engine: EngineClient,
        sampling: Sampling,
        *,
        seed: int,
        clock: Clock,
        max_model_len: int | None = None,
        version: Callable[[], int] | None = None,
        group_size: int = 1,
    ) -> None:
        """``version`` says which policy version the engine serves now (the relay's record
        of it); each turn is tagged with the older of its readings before and after the
        turn, since a turn paused by a weight update is sampled partly under each.
        ``group_size`` episodes share the prompt (rollouts of one task, sent to one engine),
        whose KV the engine's prefix cache holds once for all: each counts its part of it in
        ``Episode.kv_token_seconds``."""
        self._engine = engine
        self._sampling = sampling
        self._seed = seed
        self._clock = clock
        self._max_model_len = max_model_len
        self._ids: list[int] = []
        self._mask: list[bool] = []
        self._logprobs: list[float] = []
        self._version = version
        self._versions: list[int] = []
        self._kv_token_seconds = 0.0
        self._prompt_shared = 0.0  # the prompt's tokens other episodes of the group hold
        self._group_size = group_size
        self.turns = 0

    @property
    def seed(self) -> int:
        """This episode's own seed: rollouts of one task differ by it, as samples do."""
        return self._seed

    @property
    def context(self) -> int:
        """Tokens in the conversation so far."""
        return len(self._ids)

    @property
    def room(self) -> int | None:
        """Tokens the engine can still take in this context; None when its length is unknown."""
        return None if self._max_model_len is None else self._max_model_len - len(self._ids)

    async def prompt(self, text: str, *, max_tokens: int | None = None) -> None:
        """Start the conversation; special tokens (BOS) are added, as for any prompt's start.
        ``max_tokens`` truncates the prompt's ids, for exact load shapes."""
        if self._ids:
            raise RuntimeError("the prompt starts the conversation; use observe afterwards")
        self._append(await self._tokenize(text, True, max_tokens), sampled=None)
        self._prompt_shared = len(self._ids) * (1 - 1 / self._group_size)

    async def observe(self, text: str, *, max_tokens: int | None = None) -> None:
        """Append what the environment says back (a tool's output, a user turn)."""
        if not self._ids:
            raise RuntimeError("observe follows a prompt")
        self._append(await self._tokenize(text, False, max_tokens), sampled=None)

    async def generate(self, *, max_tokens: int | None = None, ignore_eos: bool = False) -> Answer:
        """Sample the next answer from the whole conversation; the answer joins it."""
        room = self.room
        wanted = max_tokens or self._sampling.max_tokens
        if room is not None and room < 1:
            raise EpisodeError(f"the context of {self.context} tokens fills max_model_len")
        sampling = self._sampling
        turn = Turn(
            prompt=tuple(self._ids),
            max_tokens=wanted if room is None else min(wanted, room),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            logprobs=0 if sampling.logprobs else None,
            ignore_eos=ignore_eos,
            seed=(self._seed * _TURN_STRIDE + self.turns) % _SEED_MODULUS,
            return_token_ids=True,
        )
        before = None if self._version is None else self._version()
        started = self._clock.now()
        result = await self._engine.complete(turn)
        answered = 0 if result.token_ids is None else len(result.token_ids)
        held = len(turn.prompt) - self._prompt_shared + answered / 2
        self._kv_token_seconds += held * max(0.0, self._clock.now() - started)
        if not result.ok:
            raise EpisodeError(f"turn {self.turns + 1} failed: {result.error}")
        if result.token_ids is None:
            raise EpisodeError("the engine answered without token ids")
        logprobs = result.token_logprobs
        if logprobs is not None and len(logprobs) != len(result.token_ids):
            raise EpisodeError(
                f"the engine answered {len(result.token_ids)} token ids but "
                f"{len(logprobs)} logprobs"
            )
        self._append(result.token_ids, sampled=logprobs or (0.0,) * len(result.token_ids))
        if self._version is not None and before is not None:
            self._versions.append(min(before, self._version()))
        self.turns += 1
        return Answer(result.text, result.token_ids, result.finish_reason)

    async def wait(self, seconds: float) -> None:
        """The environment's own latency between turns (a tool call, a sandbox): the episode
        holds its permit meanwhile, as in agentic RL."""
        if seconds > 0:
            await self._clock.sleep(seconds)

    def finish(self, reward: float, **metadata: Any) -> Episode:
        """The episode as it stands, scored."""
        return Episode(
            token_ids=tuple(self._ids),
            loss_mask=tuple(self._mask),
            logprobs=tuple(self._logprobs),
            reward=float(reward),
            turns=self.turns,
            metadata=metadata,
            turn_versions=tuple(self._versions),
            kv_token_seconds=self._kv_token_seconds,
        )

    async def _tokenize(self, text: str, special: bool, limit: int | None) -> tuple[int, ...]:
        try:
            ids = await self._engine.tokenize(text, add_special_tokens=special)
        except Exception as failed:  # the client's own error type: it names the engine
            raise EpisodeError(f"tokenizing failed: {failed}") from failed
        return ids if limit is None else ids[:limit]

    def _append(self, ids: tuple[int, ...], sampled: tuple[float | None, ...] | None) -> None:
        self._ids.extend(ids)
        if sampled is None:
            self._mask.extend([False] * len(ids))
            self._logprobs.extend([0.0] * len(ids))
        else:
            self._mask.extend([True] * len(ids))
            self._logprobs.extend(0.0 if value is None else value for value in sampled)


class Environment(Protocol):
    """One kind of episode. Built from its args (validated there, errors at their paths),
    then asked to run episodes, many at once: ``run`` must keep no per-episode state on
    ``self``. Cancelling ``run`` must let the cancellation through, which aborts the turn in
    flight on the engine."""

    name: ClassVar[str]

    @classmethod
    def from_args(cls, args: Table) -> Environment: ...

    async def run(self, session: Session, task_seed: int) -> Episode: ...
