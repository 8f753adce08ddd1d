"""Single-turn episodes with heavy-tailed answer lengths: a load shape, as RL's long answers
are the ones that hold a batch back and fill the KV cache.

Each answer's length is drawn from ``completion_tokens`` (Pareto by default: mean 512, tail
index 1.5, at most 8,192) and generated to that length exactly (``ignore_eos``), as vLLM's own
benchmarks shape load. The reward is 1.0 for an answer that reached its planned length and
0.0 for one the engine cut short (context full): it says whether the shape was honoured.
"""

from __future__ import annotations

import random
from typing import ClassVar

from workers.core.config.fields import Table
from workers.core.environments.base import Episode, Session
from workers.core.environments.shapes import Distribution, filler, read_distribution

DEFAULT_LENGTHS = Distribution("pareto", 512.0, 1.5, 8192.0)


class LongTail:
    name: ClassVar[str] = "longtail"

    def __init__(
        self,
        *,
        prompt_tokens: Distribution | None = None,
        completion_tokens: Distribution | None = None,
    ) -> None:
        self.prompt_tokens = prompt_tokens or Distribution("fixed", 64.0)
        self.completion_tokens = completion_tokens or DEFAULT_LENGTHS

    @classmethod
    def from_args(cls, args: Table) -> LongTail:
        made = cls(
            prompt_tokens=read_distribution(args, "prompt_tokens", 64.0, low=1.0),
            completion_tokens=read_distribution(args, "completion_tokens", None, low=1.0),
        )
        args.finish()
        return made

    async def run(self, session: Session, task_seed: int) -> Episode:
        rng = random.Random(task_seed)
        length = self.prompt_tokens.tokens(rng)
        await session.prompt(f"Write at length: {filler(rng, length)}", max_tokens=length)
        planned = self.completion_tokens.tokens(random.Random(session.seed))
        answer = await session.generate(max_tokens=planned, ignore_eos=True)
        reached = len(answer.token_ids) >= planned
        return session.finish(reward=1.0 if reached else 0.0, planned=planned)
