"""Many runs at once: the oracle's sweep and the whole suite, in a pool of processes.

Each run is independent and deterministic, so they spread over ``WORKERS`` processes (the
machine's two cores) and come back in any order; a progress line on stderr says how far
the batch is, since a suite takes minutes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.virtual.outcome import RunOutcome
from bench.virtual.run import run_workload
from bench.virtual.workload import load_workload

WORKERS = 2  # the benchmark machine's cores
# Fixed caps the oracle tries: a x1.5 ladder from a pool far below any shipped workload's
# knee to one far past it (their KV caches hold ~30-250 episodes, and with cheap recompute
# the curve can still rise at 300, so the ladder runs to 1,000).
SWEEP_CAPS = (8, 12, 18, 27, 40, 60, 90, 135, 200, 300, 450, 675, 1000)
WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "workloads"


@dataclass(frozen=True, slots=True)
class Job:
    workload: str  # path of the workload file
    policy: str
    start: int | None = None
    pacer: tuple[tuple[str, float], ...] = ()  # PacerConfig overrides (sensitivity)
    seconds: float | None = None
    every_engine: bool = False  # every engine in from the start (Workload.with_every_engine)

    @property
    def label(self) -> str:
        extra = f" start {self.start}" if self.start is not None else ""
        extra += " every engine" if self.every_engine else ""
        tweak = " ".join(f"{k}={v:g}" for k, v in self.pacer)
        return f"{Path(self.workload).stem} {self.policy}{extra} {tweak}".rstrip()


def run_job(job: Job) -> dict[str, Any]:
    workload = load_workload(job.workload)
    if job.every_engine:
        workload = workload.with_every_engine()
    outcome = run_workload(
        workload, job.policy, seconds=job.seconds, start=job.start, pacer=dict(job.pacer) or None
    )
    return outcome.to_json()


def run_jobs(jobs: list[Job], *, workers: int = WORKERS) -> list[RunOutcome]:
    """Every job's outcome, in the jobs' order, with a progress line per finished run."""
    started = time.perf_counter()
    results: dict[int, RunOutcome] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_job, job): index for index, job in enumerate(jobs)}
        for done, future in enumerate(as_completed(futures), 1):
            index = futures[future]
            results[index] = RunOutcome.from_json(future.result())
            elapsed = time.perf_counter() - started
            print(
                f"[{done}/{len(jobs)}] {jobs[index].label}: "
                f"{results[index].throughput:,.0f} tok/s ({elapsed:.0f} s elapsed)",
                file=sys.stderr,
                flush=True,
            )
    return [results[i] for i in range(len(jobs))]


def sweep_jobs(
    workload: str, caps: Iterable[int] = SWEEP_CAPS, *, every_engine: bool = False
) -> list[Job]:
    return [Job(workload, f"fixed:{cap}", every_engine=every_engine) for cap in caps]


@dataclass(frozen=True, slots=True)
class Sweep:
    """The throughput-versus-cap curve of one workload, and its best fixed cap."""

    caps: tuple[int, ...]
    outcomes: tuple[RunOutcome, ...]

    @classmethod
    def of(cls, jobs: Sequence[Job], outcomes: Sequence[RunOutcome]) -> Sweep:
        """The curve of fixed-cap jobs (``fixed:N``) and their outcomes, in the same order."""
        caps = tuple(int(job.policy.removeprefix("fixed:")) for job in jobs)
        return cls(caps, tuple(outcomes))

    @property
    def best(self) -> RunOutcome:
        return max(self.outcomes, key=lambda o: o.throughput)

    @property
    def oracle(self) -> float:
        return self.best.throughput

    @property
    def best_cap(self) -> int:
        return self.caps[self.outcomes.index(self.best)]

    def steady_best(self) -> tuple[int, float]:
        """The cap whose second half did the most work, and that rate over the oracle: what
        a policy's steady ratio can reach with a cap held from the start."""
        best = max(self.outcomes, key=lambda o: o.steady_throughput)
        return self.caps[self.outcomes.index(best)], best.steady_throughput / self.oracle

    def quarters(self, outcome: RunOutcome) -> str:
        """A run's second half quarter by quarter, as ratios to the oracle: the swing a steady
        ratio averages over."""
        third, last = outcome.steady_quarters
        return f"{third / self.oracle:.2f} / {last / self.oracle:.2f}"

    def shape(self) -> str:
        """Whether the curve is flat past its knee, keeps rising, or falls off a cliff."""
        best = self.caps.index(self.best_cap)
        beyond = self.outcomes[best + 1 :]
        if not beyond:
            return "still rising at the largest cap tried"
        ratio = beyond[-1].throughput / self.oracle
        first = beyond[0]
        note = f"{first.preemptions} preemptions at cap {self.caps[best + 1]}"
        if ratio >= 0.97:
            return f"flat past the knee (largest cap at {ratio:.2f} of the best; {note})"
        return f"falls past the knee (largest cap at {ratio:.2f} of the best; {note})"

    def table(self) -> str:
        """The curve as a table; its steady column shows what a fixed cap's own second half
        scores against the whole-run oracle, the yardstick for a policy's steady ratio."""
        lines = [
            "| cap | tokens/s | ratio | steady ratio | by quarter | preemptions | wasted "
            "| max KV |",
            "|---" * 8 + "|",
        ]
        for cap, o in zip(self.caps, self.outcomes, strict=True):
            lines.append(
                f"| {cap} | {o.throughput:,.0f} | {o.throughput / self.oracle:.3f} | "
                f"{o.steady_throughput / self.oracle:.3f} | {self.quarters(o)} | "
                f"{o.preemptions} | {o.wasted_tokens:,} | {o.max_kv:.2f} |"
            )
        return "\n".join(lines)


def sweep(workload: str, *, workers: int = WORKERS) -> Sweep:
    jobs = sweep_jobs(workload)
    outcomes = run_jobs(jobs, workers=workers)
    return Sweep.of(jobs, outcomes)


def shipped_workloads() -> list[str]:
    """The single-run workloads, W1 before W10 (by their number, not their file name)."""
    paths = WORKLOADS_DIR.glob("w*.toml")
    return [str(p) for p in sorted(paths, key=lambda p: int(p.stem[1:].split("_")[0]))]
