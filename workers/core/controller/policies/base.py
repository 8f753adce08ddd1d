"""The contract between the controller and a policy.

The controller owns everything every policy shares: bounds, the start cap, the drain latch after
a cut, the stale-metrics freeze, operator commands and decision records. A policy owns only how
to read a poll (its signal and the growth it allows) and when to trim or cut. So a policy never
sees a pin or a stale engine, and is asked to act only when acting is allowed. It is told
whether a drain holds, because evidence that builds over polls (a queue streak) must not build
from a pool that is still draining the overload of before the cut.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from workers.core.controller.polls import PollSummary
from workers.core.decisions import Cause, DecisionKind, Signal


@dataclass(frozen=True, slots=True)
class Reading:
    """A policy's reading of one poll."""

    signal: Signal
    cause: Cause
    growth: float  # cap multiplier one full turnover of the pool may earn; 1.0 forbids growth
    figures: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    ceiling: float | None = None  # growth stops at this level; None: only the bounds hold it

    def __post_init__(self) -> None:
        if self.growth < 1.0:
            raise ValueError(f"growth multiplier must be >= 1.0, got {self.growth}")
        if self.signal is not Signal.CLEAR and self.growth != 1.0:
            raise ValueError(f"only a clear reading may allow growth, got {self.signal}")
        if self.ceiling is not None and not self.ceiling >= 0:
            raise ValueError(f"a growth ceiling must be >= 0, got {self.ceiling}")
        if not isinstance(self.figures, MappingProxyType):
            object.__setattr__(self, "figures", MappingProxyType(dict(self.figures)))

    @property
    def hard(self) -> bool:
        return self.signal is Signal.HARD


def whole_episodes(level: float) -> int:
    """The episodes a level admits: its whole part. Levels accumulate by multiplication, so a
    level meant to be whole may land a rounding error under it; that error is forgiven."""
    return math.floor(level + 1e-9)


@dataclass(frozen=True, slots=True)
class PoolView:
    """What the controller tells a policy about the pool when it asks for a proposal."""

    level: float  # the policy's cap, unrounded; growth accumulates here
    inflight: int  # episodes holding a permit (pool units, idle multi-turn episodes included)
    polls_since_release: int | None  # polls since the last drain release; None if never
    turnover: float  # completions / pool size, summed: how many times the pool was replaced
    draining: bool = False  # the drain latch of a cut holds: no streak may build on this poll
    counted: bool = True  # ``inflight`` is known: no run sharing the engines is overdue (a
    # dead host's claim states episodes its engines aborted until the claim goes stale)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A reduction the policy asks for; the controller never lets it raise the cap."""

    kind: DecisionKind  # TRIM or CUT
    level: float  # the new cap, unrounded
    shed: bool  # cancel the in-flight episodes above the new cap
    cause: Cause
    detail: str  # how the level was computed, for the reason text

    def __post_init__(self) -> None:
        if self.kind not in (DecisionKind.TRIM, DecisionKind.CUT):
            raise ValueError(f"a policy proposes trim or cut, not {self.kind}")
        if self.level < 0:
            raise ValueError(f"a proposed level must be >= 0, got {self.level}")


class Policy(Protocol):
    """One way of sizing the cap. Stateful, deterministic, free of I/O."""

    name: ClassVar[str]
    # Whether the controller rescales the cap when an engine is lost or back: a policy whose
    # reading already scales with the pool (per-request latency) would be cut twice.
    rescaled: ClassVar[bool]

    def read(self, poll: PollSummary, pool: PoolView) -> Reading:
        """Read one usable poll (never a blind one); called on every such poll, draining or not."""
        ...

    def propose(self, reading: Reading, pool: PoolView) -> Proposal | None:
        """A trim or a cut for this poll, asked only when the controller may act on one."""
        ...

    def pool_changed(self, factor: float) -> None:
        """An engine was lost, came back, joined or left, and the cap was rescaled by ``factor``
        (the pool's KV capacity after over before): what the policy learnt of the old pool's
        limits (a knee, a throughput epoch) no longer holds as it was."""
        ...

    def paused(self) -> None:
        """Every engine that gave no numbers on this poll is paused for a weight update: the
        poll is not read, and whatever the policy measures over time (a throughput epoch)
        must not span the pause, whose tokens no poll will report."""
        ...

    def to_json(self) -> dict[str, Any]:
        """The state worth keeping across a worker restart."""
        ...

    def load_json(self, data: Mapping[str, Any]) -> None:
        """Take back what ``to_json`` gave; malformed data raises ValueError."""
        ...
