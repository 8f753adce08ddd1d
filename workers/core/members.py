"""The run's engines as an operator changes them: which take new groups, which drain.

An engine added to a running run takes new groups at once. One taken out drains: it gets no
new group, the episodes on it may finish, and at its deadline the rest are cancelled; then it
has left. While it drains, the controller no longer sees it (its KV and its queues say
nothing about room for new work, which goes elsewhere now), so the cap is rescaled for the
smaller pool the moment the engine stops taking groups, not when the last episode ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from workers.core.samples import LoadSample
from workers.core.validation import finite

# An operator who says nothing gives the episodes on a leaving engine this long: about a few
# long multi-turn episodes (tool calls included) on a loaded engine.
DEFAULT_DRAIN_S = 120.0
MAX_DRAIN_S = 24 * 3600.0  # a day: an engine kept longer is still in the run


@dataclass(frozen=True, slots=True)
class Leaving:
    """An engine taken out of the run, draining until ``deadline``."""

    engine: str
    since: float
    deadline: float


@dataclass(frozen=True, slots=True)
class Left:
    """An engine whose drain ended: drained (nothing was left on it) or past its deadline."""

    engine: str
    drained_s: float  # from the drain's start to its end
    past_deadline: bool


class PoolMembers:
    def __init__(self, engines: Iterable[str]) -> None:
        self._engines = list(dict.fromkeys(engines))
        self._leaving: dict[str, Leaving] = {}

    @property
    def engines(self) -> tuple[str, ...]:
        """Every engine in the run, draining ones included (they still hold episodes)."""
        return tuple(self._engines)

    @property
    def leaving(self) -> tuple[Leaving, ...]:
        return tuple(self._leaving.values())

    def routable(self, down: Iterable[str]) -> tuple[str, ...]:
        """The engines new groups may go to: neither draining nor down."""
        out = set(down) | set(self._leaving)
        return tuple(engine for engine in self._engines if engine not in out)

    def shown(self, samples: Sequence[LoadSample]) -> tuple[LoadSample, ...]:
        """The samples the controller sizes the cap from: not those of draining engines."""
        return tuple(s for s in samples if s.endpoint not in self._leaving)

    def add(self, engine: str) -> None:
        """ValueError when ``engine`` is in the run already (draining or not)."""
        if engine in self._engines:
            state = "draining out of it" if engine in self._leaving else "in it"
            raise ValueError(f"engine {engine} is {state} already")
        self._engines.append(engine)

    def drain(self, engine: str, now: float, drain_s: float) -> Leaving:
        """ValueError for an engine not in the run, one draining already, a bad deadline, or
        the last engine that would take new groups (a run with none could not go on)."""
        if engine not in self._engines:
            raise ValueError(f"engine {engine} is not in the run ({', '.join(self._engines)})")
        if engine in self._leaving:
            raise ValueError(f"engine {engine} is draining out of the run already")
        seconds = finite(drain_s)
        if seconds is None or not 0 <= seconds <= MAX_DRAIN_S:
            raise ValueError(
                f"drain_s must be a number of seconds in [0, {MAX_DRAIN_S:g}] (0: cancel what "
                f"is on it now), got {drain_s!r}"
            )
        if not [e for e in self._engines if e != engine and e not in self._leaving]:
            raise ValueError(f"engine {engine} is the run's last: a run needs one engine")
        leaving = self._leaving[engine] = Leaving(engine, now, now + seconds)
        return leaving

    def ended(self, now: float, inflight: Mapping[str, int]) -> list[Left]:
        """The drains that end now: the engine holds no episode, or its deadline passed (the
        caller cancels what is left on it). Each is out of the run once returned."""
        done: list[Left] = []
        for engine, leaving in list(self._leaving.items()):
            late = now >= leaving.deadline
            if inflight.get(engine, 0) and not late:
                continue
            done.append(Left(engine, now - leaving.since, late and bool(inflight.get(engine))))
            del self._leaving[engine]
            self._engines.remove(engine)
        return done
