"""Load shapes for environments: length and latency distributions read from config, and
filler text of a given length.

A distribution is a number (always that value) or a table naming its kind:

    observation_tokens = 64
    latency_s = { kind = "lognormal", mean = 2.0, sigma = 0.5 }
    completion_tokens = { kind = "pareto", mean = 400, alpha = 1.5, max = 8000 }
    prompt_tokens = { kind = "uniform", low = 32, high = 256 }

Heavy tails are Pareto's (tail index ``alpha``, the mean given): RL answer lengths have a few
episodes many times the median, and those are what hold a batch back.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from workers.core.config.fields import Table

KINDS = ("fixed", "uniform", "lognormal", "pareto")


@dataclass(frozen=True, slots=True)
class Distribution:
    kind: str
    mean: float  # fixed: the value; uniform: (low + high) / 2
    spread: float = 0.0  # uniform: half-width; lognormal: sigma; pareto: alpha
    cap: float | None = None  # samples above are clamped here (``max`` in config)

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            value = self.mean
        elif self.kind == "uniform":
            value = rng.uniform(self.mean - self.spread, self.mean + self.spread)
        elif self.kind == "lognormal":
            mu = math.log(self.mean) - self.spread**2 / 2  # so the mean is ``mean``
            value = rng.lognormvariate(mu, self.spread)
        else:
            alpha = self.spread
            scale = self.mean * (alpha - 1) / alpha  # Pareto's minimum for that mean
            value = scale / (1.0 - rng.random()) ** (1.0 / alpha)
        return value if self.cap is None else min(value, self.cap)

    def scaled(self, factor: float) -> Distribution:
        """The same shape, every value ``factor`` times larger (a policy whose answers grow)."""
        cap = None if self.cap is None else self.cap * factor
        spread = self.spread * factor if self.kind == "uniform" else self.spread
        return Distribution(self.kind, self.mean * factor, spread, cap)

    def tokens(self, rng: random.Random) -> int:
        """A sample as a token count, at least 1."""
        return max(1, round(self.sample(rng)))


def read_distribution(
    table: Table, key: str, default: float | None, *, low: float = 0.0
) -> Distribution | None:
    """A distribution at ``key``: a number, or a table with ``kind``; None when absent and
    ``default`` is None. Values below ``low`` are refused."""
    if not table.has(key):
        return None if default is None else Distribution("fixed", default)
    value = table.raw(key)
    if not isinstance(value, dict):
        number = table.number(key, low=low)
        return None if number is None else Distribution("fixed", number)
    shape = table.table(key)
    kind = shape.string("kind", choices=KINDS)
    made: Distribution | None = None
    if kind == "fixed":
        value = shape.number("value", low=low)
        made = None if value is None else Distribution("fixed", value)
    elif kind == "uniform":
        lo, hi = shape.number("low", low=low), shape.number("high", low=low)
        if lo is not None and hi is not None:
            if hi < lo:
                table.errors.add(f"{shape.path}.high", f"must be >= low ({lo:g}), got {hi:g}")
            else:
                made = Distribution("uniform", (lo + hi) / 2, (hi - lo) / 2)
    elif kind in ("lognormal", "pareto"):
        mean = shape.number("mean", low=max(low, 1e-9))
        spread_key = "sigma" if kind == "lognormal" else "alpha"
        spread = (
            shape.number(spread_key, 0.5, low=0.0, high=5.0)
            if kind == "lognormal"
            else shape.number(spread_key, 1.5, low=1.01, high=100.0)
        )
        cap = shape.number("max", None, low=low)
        if mean is not None and spread is not None:
            made = Distribution(kind, mean, spread, cap)
    shape.finish()
    return made


# Short common words: one token each in the simulator, one or a few in a BPE vocabulary; the
# session truncates the ids to the length asked for, so any tokenizer gives exact lengths.
_WORD_TEXT = (
    "the of and to in is it for on as at by be or an we he if do so up no go me my us "
    "all any can had her him his how its may new now old one our out say see she two "
    "way who boy did get has let put too use data file code line test time step node tool "
    "read list find open path next last done fail pass sort scan load save sync"
)
_WORDS = tuple(_WORD_TEXT.split())


def filler(rng: random.Random, words: int) -> str:
    """``words`` words of made-up text, seeded."""
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, words)))
