"""``python -m bench join``: how fast a run takes up an engine that joins it.

The figure is the time from the join until the pool delivers 90 % of its new best, read as
the ramp is (``RunOutcome.reached``: a trailing ``RATE_WINDOW_S`` of completed-episode
tokens per second). The new best is measured, not assumed: the workload is swept again with
every engine in the run from the start (``Workload.with_every_engine``), and the new best is
the highest second-half rate any fixed cap of that sweep sustains, the rate the larger pool
holds once no ramp is left in it. Pacer and the reference are timed on the workload itself,
and so, for scale, is the fixed cap that gave the new best: it has no ramp of its own, so its
time is the pool's (the joining engine filling, its episodes finishing) and the window's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.virtual.outcome import NEAR_ORACLE, RATE_WINDOW_S, RunOutcome
from bench.virtual.suite import Job, run_jobs, sweep_jobs
from bench.virtual.workload import load_workload
from workers.core.decisions import Cause, DecisionKind

POLICIES = ("pacer", "reference")
DEFAULT_WORKLOAD = str(Path(__file__).resolve().parent.parent / "workloads" / "w9_engine_join.toml")


@dataclass(frozen=True, slots=True)
class NewBest:
    """The larger pool's best: the fixed cap whose second half delivered the most on it."""

    cap: int
    rate: float  # tokens/s, second half of the run with every engine from the start
    caps: int  # how many caps the sweep tried


def join_benchmark(workload: str = DEFAULT_WORKLOAD) -> str:
    """Sweep the larger pool, time each policy's ramp after the join; the printed text."""
    loaded = load_workload(workload)
    joins = [e for e in loaded.events if e.kind == "engine_join"]
    if len(joins) != 1:
        raise ValueError(f"{workload}: the join benchmark needs one engine_join event")
    join_at, joining = joins[0].at, loaded.engines[joins[0].engines[0]].name
    sweep = sweep_jobs(workload, every_engine=True)
    adaptive = [Job(workload, policy) for policy in POLICIES]
    outcomes = run_jobs(sweep + adaptive)
    swept = outcomes[: len(sweep)]
    best = max(swept, key=lambda o: o.steady_throughput)
    new = NewBest(int(best.policy.removeprefix("fixed:")), best.steady_throughput, len(swept))
    (fixed,) = run_jobs([Job(workload, best.policy)])
    runs = [*outcomes[len(sweep) :], fixed]
    target = NEAR_ORACLE * new.rate
    lines = [
        f"{loaded.name} ({workload}): {joining} joins at {join_at:g} s of {loaded.seconds:g}",
        f"new best: {new.rate:,.0f} tokens/s, the highest second-half rate of {new.caps} fixed "
        f"caps on the workload with every engine from the start (cap {new.cap}); 90 % of it "
        f"is {target:,.0f} tokens/s, read over a trailing {RATE_WINDOW_S:g} s as the ramp is",
        "",
        "| policy | tokens/s in the minute before the join | join to 90 % of the new best, "
        "s (turnovers) | second half tokens/s | whole run tokens/s |",
        "|---" * 5 + "|",
    ]
    lines += [_row(run, join_at, target) for run in runs]
    lines.append("")
    for run in runs:
        lines.append(f"{run.policy} rescale: {_rescale(run, join_at)}")
    return "\n".join(lines)


def _row(run: RunOutcome, join_at: float, target: float) -> str:
    before = [(span, done) for s, span, done in run.trailing() if s.at <= join_at]
    span, done = before[-1] if before else (0.0, 0)
    at_join = next((s for s in run.samples if s.at >= join_at), None)
    reach = run.reached(target, since=join_at)
    if reach is None or at_join is None:
        ramp = "never"
    else:
        ramp = f"{reach.at - join_at:.0f} s ({reach.turnover - at_join.turnover:.1f})"
    rate = done / span if span else 0.0
    return (
        f"| {run.policy} | {rate:,.0f} | {ramp} | {run.steady_throughput:,.0f} | "
        f"{run.throughput:,.0f} |"
    )


def _rescale(run: RunOutcome, join_at: float) -> str:
    """The reason of the run's rescale for the join, as its decision records it."""
    for decision in run.pool_decisions:
        joined = decision.kind == DecisionKind.RESCALE and decision.cause == Cause.ENGINE_JOINED
        if joined and decision.at >= join_at:
            return f"at {decision.at:g} s: {decision.reason}"
    return "none recorded"
