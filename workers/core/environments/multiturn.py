"""Multi-turn, tool-use-like episodes whose context grows in place, as agentic RL's do.

Each episode opens with a prompt, then for ``turns`` turns: the model answers, the
environment waits ``latency_s`` (its tool running) and appends an observation of
``observation_tokens`` tokens, and the next answer is sampled from the whole conversation.
So the engine sees the same context grow turn after turn (prefix-cache hits) and the episode
holds its permit while idle between turns (the pool counts episodes, not running requests).

The reward is verifiable on any model: the prompt asks for answers of about ``words`` words,
and each answer scores 1 - |its words - words| / words (at least 0); the episode's reward is
the mean over its turns. A random model scores something, with a spread across a group, so
advantages are not all zero.
"""

from __future__ import annotations

import random
from typing import ClassVar

from workers.core.config.fields import Table
from workers.core.environments.base import Episode, Session
from workers.core.environments.shapes import Distribution, filler, read_distribution


class MultiTurn:
    name: ClassVar[str] = "multiturn"

    def __init__(
        self,
        *,
        turns: int = 4,
        words: int = 24,
        prompt_tokens: Distribution | None = None,
        observation_tokens: Distribution | None = None,
        completion_tokens: Distribution | None = None,
        latency_s: Distribution | None = None,
    ) -> None:
        self.turns = turns
        self.words = words
        self.prompt_tokens = prompt_tokens or Distribution("fixed", 128.0)
        self.observation_tokens = observation_tokens or Distribution("fixed", 64.0)
        self.completion_tokens = completion_tokens  # None: the model decides (max_tokens)
        self.latency_s = latency_s or Distribution("fixed", 0.0)

    @classmethod
    def from_args(cls, args: Table) -> MultiTurn:
        made = cls(
            turns=args.integer("turns", 4, low=1, high=1000) or 4,
            words=args.integer("words", 24, low=1, high=10_000) or 24,
            prompt_tokens=read_distribution(args, "prompt_tokens", 128.0, low=1.0),
            observation_tokens=read_distribution(args, "observation_tokens", 64.0, low=1.0),
            completion_tokens=read_distribution(args, "completion_tokens", None, low=1.0),
            latency_s=read_distribution(args, "latency_s", 0.0),
        )
        args.finish()
        return made

    async def run(self, session: Session, task_seed: int) -> Episode:
        task = random.Random(task_seed)  # the prompt: one per group, shared by its rollouts
        rng = random.Random(session.seed)  # what follows differs per rollout, as actions do
        length = self.prompt_tokens.tokens(task)
        await session.prompt(
            f"You are an agent using a tool. Reply to each tool result in about {self.words} "
            f"words.\nTask: {filler(task, length)}",
            max_tokens=length,
        )
        scores: list[float] = []
        for turn in range(self.turns):
            if turn:
                size = self.observation_tokens.tokens(rng)
                if session.room is not None and session.room < size + 1:
                    break  # no room for the observation and an answer: the episode ends here
                await session.wait(self.latency_s.sample(rng))
                await session.observe(f"\nTool result: {filler(rng, size)}\n", max_tokens=size)
            shaped = self.completion_tokens
            if shaped is None:
                answer = await session.generate()
            else:
                answer = await session.generate(max_tokens=shaped.tokens(rng), ignore_eos=True)
            scores.append(length_score(answer.text, self.words))
        return session.finish(
            reward=sum(scores) / len(scores) if scores else 0.0, context=session.context
        )


def length_score(text: str, words: int) -> float:
    """1.0 for an answer of exactly ``words`` words, falling linearly to 0 at 0 or 2x words."""
    return max(0.0, 1.0 - abs(len(text.split()) - words) / words)
