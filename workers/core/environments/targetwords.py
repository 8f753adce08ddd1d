"""A reward a tiny model can learn on a CPU: the share of the answer's words that are target
words.

It exists to close the RL loop on real parts without a GPU: a random model (the tiny Llama of
``inference.tinymodel``, whose vocabulary is made-up syllable words) says a target word by
chance only, so its reward starts near 0, and a few policy-gradient steps that favour the
tokens of the rewarded answers raise it, visibly, within tens of steps. The default targets
are two-letter syllables, which that model's tokenizer keeps as pieces of their own. Nothing
about the reward is mocked: it is computed from the text the engine sampled.
"""

from __future__ import annotations

import random
import re
from typing import ClassVar

from workers.core.config.fields import Table
from workers.core.environments.base import Episode, Session

# Syllables of the tiny model's made-up words (onset + vowel): single tokenizer pieces.
DEFAULT_TARGETS = "ba ko mi"
_WORD = re.compile(r"[a-z]+")
_PROMPTS = ("Say a few words.", "Speak.", "Tell me something.", "Go on.")


class TargetWords:
    """One answer per episode; reward = target words / words in it (0.0 for no words)."""

    name: ClassVar[str] = "targetwords"

    def __init__(self, targets: frozenset[str]) -> None:
        self.targets = targets

    @classmethod
    def from_args(cls, args: Table) -> TargetWords:
        text = args.string("targets", DEFAULT_TARGETS)
        words = set(_WORD.findall(text.lower())) if isinstance(text, str) else set()
        if isinstance(text, str) and (not words or " ".join(sorted(words)) != _normal(text)):
            args.errors.add(
                f"{args.path}.targets",
                f"must be lower-case words (a-z) separated by spaces, got {text!r}",
            )
        args.finish()
        return cls(frozenset(words or set(DEFAULT_TARGETS.split())))

    def score(self, text: str) -> float:
        """The share of ``text``'s words that are targets."""
        words = _WORD.findall(text.lower())
        return sum(word in self.targets for word in words) / len(words) if words else 0.0

    async def run(self, session: Session, task_seed: int) -> Episode:
        await session.prompt(random.Random(task_seed).choice(_PROMPTS))
        answer = await session.generate()
        return session.finish(reward=self.score(answer.text), answer=answer.text[:200])


def _normal(text: str) -> str:
    return " ".join(sorted(set(text.split())))
