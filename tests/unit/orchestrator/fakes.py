"""An engine with no model behind it, for the core's tests: a word is a token, and answers
are made of words. The real engines (simulator, vLLM) are tested over HTTP elsewhere."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Sequence

from workers.core.samples import EngineHealth, EngineRole, LoadSample
from workers.core.turns import Turn, TurnResult

BOS = 1


def word_id(word: str) -> int:
    return 2 + zlib.crc32(word.encode()) % 30_000


class WordEngine:
    def __init__(
        self,
        *,
        answer: Callable[[Turn], str] | None = None,
        words: int = 5,
        fail: Callable[[Turn], bool] | None = None,
    ) -> None:
        self.answer = answer
        self.words = words  # an answer's length when not told to ignore EOS
        self.fail = fail
        self.turns: list[Turn] = []

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        ids = tuple(word_id(w) for w in text.split())
        return (BOS, *ids) if add_special_tokens else ids

    async def complete(self, turn: Turn) -> TurnResult:
        self.turns.append(turn)
        await asyncio.sleep(0)
        if self.fail is not None and self.fail(turn):
            return TurnResult(tokens=0, error="HTTP 500 Internal Server Error: boom")
        if self.answer is not None:
            words = self.answer(turn).split()
        else:
            count = turn.max_tokens if turn.ignore_eos else min(turn.max_tokens, self.words)
            words = [f"w{i}" for i in range(count)]
        ids = tuple(word_id(w) for w in words)
        return TurnResult(
            tokens=len(ids),
            text=" " + " ".join(words),
            finish_reason="length",
            token_logprobs=tuple(-0.5 for _ in ids),
            token_ids=ids,
        )


def healthy(engines: Sequence[str]) -> Callable[[], asyncio.Future[list[LoadSample]]]:
    """A poll that finds every engine up and clear."""

    async def poll() -> list[LoadSample]:
        return [
            LoadSample(
                engine_id=name,
                role=EngineRole.UNIFIED,
                scraped_at=0.0,
                health=EngineHealth.UP,
                kv_capacity_tokens=100_000,
                max_model_len=4096,
                kv_usage=0.1,
                num_running=1,
                num_waiting=0,
                num_waiting_capacity=0,
                num_preemptions=0,
                prefix_cache_hits=0,
                prefix_cache_queries=0,
                generation_tokens=100,
            )
            for name in engines
        ]

    return poll  # type: ignore[return-value]
