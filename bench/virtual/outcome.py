"""What a benchmark run measured, and the figures read from it.

The objective is completed-episode tokens per second over the whole run, ramp included:
tokens of episodes cancelled, failed or still in flight at the end count for nothing, as
for a trainer they are nothing. A ten-minute run spends a large share of its window on the
ramp while real runs last hours, so the ramp and the steady state are also read apart: the
steady ratio (the second half's rate over the oracle's) and the time to 90 % of the oracle's
rate, in seconds and in turnovers of the pool (the controller's own count), which says how
fast a policy ramps whatever the workload's episode length. The other figures explain
them: preemptions, wasted tokens, how often the cap turned around, and how full the KV cache
got.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

RATE_WINDOW_S = 60.0  # "time to 90 %" reads delivered throughput over a trailing minute:
# one poll's completions swing with the phase of long episodes
NEAR_ORACLE = 0.9  # the "time to reach 90 % of the oracle's throughput"


@dataclass(frozen=True, slots=True)
class Sample:
    """The run at one poll."""

    at: float
    cap: int
    inflight: int
    completed_tokens: int  # cumulative, up to this poll
    progress: int  # completed tokens and those generated so far for episodes in flight
    kv: float  # highest KV usage of a serving engine
    running: int
    waiting: int  # waiting for capacity, serving engines
    turnover: float  # the controller's full replacements of the pool since the start


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """A decision about the run's engines (one joined, drained or left, the cap rescaled for
    the pool, a ceiling from the runs sharing them), as the run recorded it: what the join
    and share benchmarks quote."""

    at: float
    kind: str
    cause: str
    reason: str


@dataclass(frozen=True, slots=True)
class EngineEpisodes:
    """The episodes that ended on one engine (completed, failed or cancelled): how many, and
    when the first and the last of them started, which says when routing reached the engine
    and when it stopped."""

    engine: str
    episodes: int
    first_start: float
    last_start: float


@dataclass(frozen=True, slots=True)
class RunOutcome:
    workload: str
    policy: str
    seconds: float
    completed_tokens: int
    progress_tokens: int  # at the horizon: completed, and generated for episodes in flight
    completed_episodes: int
    failed_episodes: int
    wasted_tokens: int
    preemptions: int
    max_kv: float
    samples: tuple[Sample, ...]
    engine_runs: int
    wall_s: float = 0.0
    start: int | None = None  # the start cap asked for; None: the policy's own
    pool_decisions: tuple[PoolDecision, ...] = ()
    by_engine: tuple[EngineEpisodes, ...] = ()

    @property
    def throughput(self) -> float:
        """Completed-episode tokens per second over the whole run."""
        return self.completed_tokens / self.seconds

    @property
    def steady_throughput(self) -> float:
        """The run's work per second over its second half: the rate once the ramp is over,
        which is what an hours-long run mostly delivers. Work is completed-episode tokens plus
        the tokens generated so far for episodes in flight (less those of episodes cancelled or
        failed meanwhile): read from completions alone, a window would be paid for the
        backlog a large pool built before it, and the second half of a fixed cap of 1,000
        on W3 would score half as much again as its whole run."""
        return self.work_rate(self.seconds / 2, self.seconds)

    @property
    def steady_quarters(self) -> tuple[float, float]:
        """The second half's work per second, quarter by quarter. Where a fixed cap's two
        quarters differ by more than the gap a policy's steady ratio shows (an eval wave, a
        pool of long answers aging, a drift), the run is too short to tell that gap from the
        workload's own swing."""
        third, last = self.seconds / 2, self.seconds * 3 / 4
        return self.work_rate(third, last), self.work_rate(last, self.seconds)

    def work_rate(self, since: float, until: float) -> float:
        """Work per second over the polls that span ``since`` to ``until``: from the last poll
        at or before the one (the run's start if none) to the first at or after the other (the
        horizon if none), so a window shorter than the poll interval still spans one."""
        start, before = 0.0, 0
        for sample in self.samples:
            if sample.at > since:
                break
            start, before = sample.at, sample.progress
        end, after = self.seconds, self.progress_tokens
        if until < self.seconds:
            first = next((s for s in self.samples if s.at >= until), None)
            if first is not None:
                end, after = first.at, first.progress
        return (after - before) / (end - start)

    @property
    def direction_changes(self) -> int:
        """How often the cap turned from rising to falling or back."""
        changes, last = 0, 0
        caps = [s.cap for s in self.samples]
        for before, after in itertools.pairwise(caps):
            sign = (after > before) - (after < before)
            if sign and last and sign != last:
                changes += 1
            last = sign or last
        return changes

    @property
    def settled_cap(self) -> float:
        """The mean cap over the last quarter of the run: where the policy settled."""
        tail = self.samples[len(self.samples) * 3 // 4 :] or self.samples
        return sum(s.cap for s in tail) / max(1, len(tail))

    def trailing(self) -> Iterator[tuple[Sample, float, int]]:
        """Each poll with the span and completed tokens of the trailing ``RATE_WINDOW_S``
        (shorter at the start of the run)."""
        samples = self.samples
        j = 0
        for sample in samples:
            while samples[j].at < sample.at - RATE_WINDOW_S:
                j += 1
            yield (
                sample,
                sample.at - samples[j].at,
                sample.completed_tokens - samples[j].completed_tokens,
            )

    def reached(self, rate: float, since: float = 0.0) -> Sample | None:
        """The first poll from ``since`` on whose trailing minute delivered at least ``rate``
        tokens/s: when, and after how many turnovers, the ramp got there (from the start, or
        from a change of the pool)."""
        for sample, span, done in self.trailing():
            if sample.at >= since and span >= RATE_WINDOW_S * 0.99 and done / span >= rate:
                return sample
        return None

    def figures(self, oracle: float | None = None) -> dict[str, Any]:
        """The run's figures as the report and ``--json`` show them; those read against the
        oracle are None without it."""
        reach = None if oracle is None else self.reached(NEAR_ORACLE * oracle)
        return {
            "workload": self.workload,
            "policy": self.policy,
            "start": self.start,
            "seconds": self.seconds,
            "throughput": round(self.throughput, 1),
            "ratio_to_oracle": None if not oracle else round(self.throughput / oracle, 3),
            "steady_throughput": round(self.steady_throughput, 1),
            "steady_ratio": None if not oracle else round(self.steady_throughput / oracle, 3),
            "steady_quarter_ratios": None
            if not oracle
            else [round(rate / oracle, 3) for rate in self.steady_quarters],
            "completed_episodes": self.completed_episodes,
            "failed_episodes": self.failed_episodes,
            "preemptions": self.preemptions,
            "wasted_tokens": self.wasted_tokens,
            "time_to_90pct_s": None if reach is None else reach.at,
            "time_to_90pct_turnovers": None if reach is None else round(reach.turnover, 1),
            "direction_changes": self.direction_changes,
            "settled_cap": round(self.settled_cap, 1),
            "max_kv": round(self.max_kv, 3),
            "wall_s": round(self.wall_s, 2),
        }

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("samples", "pool_decisions", "by_engine"):
            data[key] = [dataclasses.astuple(row) for row in getattr(self, key)]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunOutcome:
        samples = tuple(Sample(*row) for row in data["samples"])
        decisions = tuple(PoolDecision(*row) for row in data["pool_decisions"])
        by_engine = tuple(EngineEpisodes(*row) for row in data["by_engine"])
        return cls(
            **{**data, "samples": samples, "pool_decisions": decisions, "by_engine": by_engine}
        )
