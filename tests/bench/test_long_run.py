"""Pacer past its memory: a run longer than the benchmark's ten minutes keeps its pool.

Real runs last hours, and pacer forgets a knee after ``knee_memory_turnovers``. A frontier
that held the pool past the KV target used to be forgotten with it, so its next preemption
cut the pool, escalated, and it ran slower from then on. W5 reaches that point at 2,400
virtual seconds (twenty turnovers after its frontier); the run costs 15 to 20 wall seconds.
"""

from __future__ import annotations

from pathlib import Path

from bench.virtual.run import run_workload
from bench.virtual.workload import load_workload

W5 = Path(__file__).resolve().parents[2] / "bench" / "workloads" / "w5_drift.toml"


def test_an_aged_frontier_is_rechecked_not_cut_away() -> None:
    outcome = run_workload(load_workload(W5), "pacer", seconds=2700)
    settled = [s.cap for s in outcome.samples if s.at >= 600]
    assert settled, "the run produced no samples after its ramp"
    # A recheck steps one frontier growth under it (1 / 1.15 = 0.87) and no further; the
    # forgotten frontier's cut escalated 226 -> 71 (0.31).
    assert min(settled) >= 0.85 * settled[0], (settled[0], min(settled))
    assert outcome.samples[-1].at >= 2600
