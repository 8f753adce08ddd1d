"""Single-turn arithmetic with a verifiable reward: the answer's first integer is checked
against the true result, nothing is mocked."""

from __future__ import annotations

import random
import re
from typing import ClassVar

from workers.core.config.fields import Table
from workers.core.environments.base import Episode, Session

_INTEGER = re.compile(r"-?\d+")
_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


class Arithmetic:
    """``digits``-digit operands joined by one of ``operations``; reward 1.0 for the right
    number, 0.0 otherwise."""

    name: ClassVar[str] = "arithmetic"

    def __init__(self, digits: int = 2, operations: str = "+-*") -> None:
        self.digits = digits
        self.operations = operations

    @classmethod
    def from_args(cls, args: Table) -> Arithmetic:
        digits = args.integer("digits", 2, low=1, high=9)
        operations = args.string("operations", "+-*")
        if operations is not None and not set(operations) <= set(_APPLY):
            args.errors.add(f"{args.path}.operations", f"must use only + - *, got {operations!r}")
            operations = "+-*"
        args.finish()
        return cls(digits or 2, operations or "+-*")

    def task(self, task_seed: int) -> tuple[str, int]:
        """The question of a task seed and its answer."""
        rng = random.Random(task_seed)
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        op = rng.choice(self.operations)
        return f"{a} {op} {b}", _APPLY[op](a, b)

    async def run(self, session: Session, task_seed: int) -> Episode:
        question, expected = self.task(task_seed)
        await session.prompt(f"Compute {question}. Reply with the number only.\nAnswer:")
        answer = await session.generate()
        got = parse_answer(answer.text)
        return session.finish(
            reward=1.0 if got == expected else 0.0,
            question=question,
            expected=expected,
            answer=got,
        )


def parse_answer(text: str) -> int | None:
    """The first integer in a reply, if there is one."""
    found = _INTEGER.search(text)
    return None if found is None else int(found.group())
