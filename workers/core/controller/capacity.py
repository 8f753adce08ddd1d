"""The KV capacity the cap is sized for, as engines are lost, come back, join and leave.

The cap is a number of episodes for a pool of engines; when one of three engines dies for
good, the same cap on two engines is half as much again per engine, and the policy would
have to find that out by overloading them. So an engine down for ``lost_s`` no longer counts:
the cap is rescaled by the pool's KV capacity without it, and again when it is back up. A
short outage (a restart, a network blip) is not a loss: the breaker and the routing already
keep new groups off it, and a rescale for every blip would throw the policy's level about.

The pool itself can change too: an operator adds an engine to a running run, or takes one
out, and the control loop declares the new pool (``declare``) the moment the engine takes
new groups, or stops taking them. An engine that joined counts from the first poll that
reports its KV capacity; one that left no longer counts from the next poll. Each is rescaled
like a loss or a return. Until a pool is declared, the pool is the engines the polls show.

Per engine id (``<endpoint>/<rank>``), from each poll's samples: the last KV capacity an
engine reported, and since when it has been down. A stale engine is neither: its server
answers, only its numbers lag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workers.core.decisions import Cause
from workers.core.samples import EngineHealth, LoadSample, endpoint_of


@dataclass(frozen=True, slots=True)
class CapacityChange:
    before: int  # KV tokens of the engines counted before this poll
    after: int
    lost: tuple[str, ...]  # engines no longer counted, down this long at least
    back: tuple[str, ...]  # engines counted again
    down_s: float  # how long the lost engines had been down (the longest)
    # The cap's level when the first of the lost engines went down (by the time an engine
    # counts as lost the policy may have cut for it already: the loss is scaled from here),
    # or, for engines back, the level the pool had before they were lost (the most a return
    # gives back: the whole pool again, not more than it held).
    level_then: float | None = None
    joined: tuple[str, ...] = ()  # engines (endpoints) added to the run's pool
    left: tuple[str, ...] = ()  # engines (endpoints) taken out of it

    @property
    def factor(self) -> float:
        return self.after / self.before

    @property
    def cause(self) -> Cause:
        """The one cause a decision names; a poll that changes several things names the
        operator's (joined, left) before the engines' own (lost, back)."""
        if self.joined or self.left:
            return Cause.ENGINE_JOINED if self.after > self.before else Cause.ENGINE_LEFT
        return Cause.ENGINE_LOST if self.after < self.before else Cause.ENGINE_BACK

    def scaled(self, level: float) -> float:
        """The cap's level after this change, from ``level`` now. A loss scales the level the
        pool had when the engine went down (the policy may have cut for it already, and is
        not cut for it twice); a return scales the level now, to no more than the whole pool
        held before the loss. An engine joining or leaving scales the level now."""
        then = self.level_then
        if self.after < self.before:
            return min(level, (level if then is None else then) * self.factor)
        grown = level * self.factor
        return grown if then is None else max(level, min(grown, then))

    @property
    def detail(self) -> str:
        """What changed, for the decision's reason."""
        parts = []
        if self.joined:
            parts.append(f"{', '.join(self.joined)} joined")
        if self.left:
            parts.append(f"{', '.join(self.left)} left")
        if self.lost:
            parts.append(f"{', '.join(self.lost)} lost (down {self.down_s:.0f} s)")
        if self.back:
            parts.append(f"{', '.join(self.back)} back")
        return f"{', '.join(parts)}: KV {_tokens(self.before)} -> {_tokens(self.after)} tokens"


class PoolCapacity:
    def __init__(self, lost_s: float) -> None:
        self.lost_s = lost_s  # 0: engines are never counted out
        self._tokens: dict[str, int] = {}
        self._down_since: dict[str, float] = {}
        self._lost: set[str] = set()
        self._level_at_down: dict[str, float] = {}
        self._seen: set[str] = set()  # every endpoint a poll showed
        self._members: set[str] | None = None  # the declared pool's endpoints, once declared
        self._joining: set[str] = set()  # declared, not counted until they report their KV
        self._leaving: set[str] = set()  # declared out, counted until the next poll

    def declare(self, endpoints: Iterable[str]) -> None:
        """The run's pool is ``endpoints`` from now (an engine added or taken out); the next
        poll rescales for the difference."""
        new = set(endpoints)
        old = (self._seen if self._members is None else self._members) | self._leaving
        old -= self._joining
        self._joining = (self._joining | (new - old)) & new
        self._leaving = old - new
        self._members = new

    def observe(
        self, samples: Iterable[LoadSample], now: float, level: float
    ) -> CapacityChange | None:
        """This poll's change to the counted capacity: only engines lost, back, joined or
        left change it (an engine that reports another capacity while up is the start cap's
        business)."""
        was_lost = set(self._lost)
        back: list[str] = []
        for sample in samples:
            engine = sample.engine_id
            self._seen.add(sample.endpoint)
            if sample.kv_capacity_tokens:
                self._tokens[engine] = sample.kv_capacity_tokens
            if sample.health is EngineHealth.DOWN and not sample.updating:
                self._down_since.setdefault(engine, now)
                self._level_at_down.setdefault(engine, level)
            elif sample.health is EngineHealth.UP:
                self._down_since.pop(engine, None)
                if engine not in self._lost:
                    self._level_at_down.pop(engine, None)
                else:
                    self._lost.discard(engine)
                    back.append(engine)
        counted = self._counted_endpoints()
        before = self._counted(counted, was_lost)
        joined = sorted(e for e in self._joining if self._reported(e))
        left = sorted(self._leaving)
        self._joining -= set(joined)
        self._leaving.clear()
        self._forget(left)
        lost = []
        if self.lost_s > 0:
            lost = [
                engine
                for engine, since in self._down_since.items()
                if engine not in self._lost and now - since >= self.lost_s
            ]
        self._lost.update(lost)
        if not (lost or back or joined or left):
            return None
        after = self._counted(self._counted_endpoints(), self._lost)
        if after == before or not before or not after:
            return None  # nothing to scale from or to (every engine lost: the run's end)
        down_s = max((now - self._down_since[e] for e in lost), default=0.0)
        then = max((self._level_at_down[e] for e in lost or back), default=None)
        for engine in back:
            self._level_at_down.pop(engine, None)
        return CapacityChange(
            before,
            after,
            tuple(sorted(lost)),
            tuple(sorted(back)),
            down_s,
            then,
            tuple(joined),
            tuple(left),
        )

    def _counted_endpoints(self) -> set[str]:
        """The endpoints whose KV counts now: the declared pool (those still to report their
        KV aside) and the ones declared out until this poll has rescaled for them."""
        pool = self._seen if self._members is None else self._members
        return (pool - self._joining) | self._leaving

    def _reported(self, endpoint: str) -> bool:
        return any(endpoint_of(engine) == endpoint for engine in self._tokens)

    def _forget(self, endpoints: Iterable[str]) -> None:
        """Drop what is known of engines that left: one added again later joins afresh."""
        gone = set(endpoints)
        for table in (self._tokens, self._down_since, self._level_at_down):
            for engine in [e for e in table if endpoint_of(e) in gone]:
                del table[engine]
        self._lost = {e for e in self._lost if endpoint_of(e) not in gone}

    def _counted(self, endpoints: set[str], lost: set[str]) -> int:
        return sum(
            tokens
            for engine, tokens in self._tokens.items()
            if endpoint_of(engine) in endpoints and engine not in lost
        )


def _tokens(count: int) -> str:
    """KV tokens as people say them: 131k, 1.2M."""
    return f"{count / 1e6:.1f}M" if count >= 1_000_000 else f"{count / 1000:.0f}k"
