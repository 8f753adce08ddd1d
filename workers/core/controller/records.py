"""The controller's configuration, its per-episode input, and its gauges."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workers.core.decisions import Cause, Signal
from workers.core.validation import check_range

MAX_CAP = 1_000_000  # sanity bound on any cap: far above what any engine pool holds


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Rules every policy shares."""

    min_inflight: int = 1  # prime-rl default; min = max fixes the cap
    max_inflight: int = 1024  # prime-rl default
    initial_inflight: int | None = None  # start cap; None derives it once from KV capacity
    episode_token_budget: int | None = None  # caps tokens per episode in the derived start
    poll_ttl: float = 15.0  # prime-rl: no growth once the last complete poll is older (s)
    binding_fraction: float = 0.9  # prime-rl: grow only when in-flight >= this x cap
    start_wait: float = 60.0  # s a derived start waits for every engine: 12 polls of 5 s
    over_permit_polls: int = 6  # polls of requests over permits before an alert: as queue_polls
    # Pacer: hard polls with the pool already at the cap that end a drain, so a cut too shallow
    # for the engines can be followed by another (the reference's latch then holds forever,
    # seen on real vLLM); 0 keeps the reference's latch exactly.
    drain_stuck_polls: int = 3
    # Pacer: one poll's evidence licenses at most this many turnovers of growth, so the cap
    # cannot outrun the metrics when episodes are short against the poll period (reference
    # caps doubled between two 1 s polls on real vLLM, then cut); 0 keeps the reference's
    # unbounded growth between polls. At 5 s polls and minute-long episodes it never binds.
    turnovers_per_poll: float = 1.0
    # An engine down this long is lost: the cap is rescaled to the KV capacity left, and back
    # when it returns. A vLLM restart with a small model takes about 30 s, which is no loss;
    # 0 never counts an engine out (the reference's behaviour).
    engine_lost_s: float = 60.0

    def __post_init__(self) -> None:
        check_range("min_inflight", self.min_inflight, 1, MAX_CAP)
        check_range("max_inflight", self.max_inflight, self.min_inflight, MAX_CAP)
        if self.initial_inflight is not None:
            check_range("initial_inflight", self.initial_inflight, 1, MAX_CAP)
        if self.episode_token_budget is not None:
            check_range("episode_token_budget", self.episode_token_budget, 1, 1 << 40)
        if not math.isfinite(self.poll_ttl):
            raise ValueError(f"poll_ttl must be finite, got {self.poll_ttl}")
        check_range("poll_ttl", self.poll_ttl, 0.001, 86_400.0)
        check_range("binding_fraction", self.binding_fraction, 0.01, 1.0)
        check_range("start_wait", self.start_wait, 0.0, 3600.0)
        check_range("over_permit_polls", self.over_permit_polls, 1, 1000)
        check_range("drain_stuck_polls", self.drain_stuck_polls, 0, 1000)
        check_range("turnovers_per_poll", self.turnovers_per_poll, 0.0, 1000.0)
        check_range("engine_lost_s", self.engine_lost_s, 0.0, 86_400.0)


@dataclass(frozen=True, slots=True)
class EpisodeCompletion:
    """One finished episode, as the controller needs it."""

    tokens: int  # tokens the episode generated
    ok: bool  # False when the episode failed (engine error, timeout)
    pool: int  # in-flight count INCLUDING this episode, taken before its permit was released
    demand: int = 0  # the pool with the queued episodes the cap has room for (0: the pool)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")
        if self.pool < 1:
            raise ValueError(f"pool counts the finished episode itself, so >= 1; got {self.pool}")
        if self.demand < 0:
            raise ValueError(f"demand must be >= 0, got {self.demand}")


@dataclass(frozen=True, slots=True)
class ControllerStats:
    """Gauges of the controller, made once per poll for the reporter."""

    at: float
    policy: str
    cap: int  # the cap in force
    policy_cap: int  # the policy's own cap (differs while pinned)
    pinned_for: float | None  # seconds left on a pin; None when not pinned
    inflight: int
    turnover: float  # full replacements of the pool since the start
    signal: Signal
    cause: Cause
    growth: float  # multiplier per turnover the last poll allows
    kv_capacity_tokens: int | None
    draining: bool
    frozen: bool  # growth frozen on stale metrics
    engine_requests: int  # running + waiting on the fresh engines
    engine_waiting: int  # of which waiting: what the engines hold beyond what they run
    engine_requests_over_permits: int  # engine requests beyond the permits: nobody owns them
    cuts: int
    trims: int
    suppressed_cuts: int  # hard polls ignored during a drain


def check_inflight(inflight: int) -> None:
    if isinstance(inflight, bool) or not isinstance(inflight, int) or inflight < 0:
        raise ValueError(f"inflight must be an integer >= 0, got {inflight!r}")
