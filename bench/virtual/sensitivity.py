"""``python -m bench sensitivity``: does each pacer threshold move the result?

Every numeric ``PacerConfig`` field is run at 0.8x and 1.2x its default (counts rounded,
values clamped into the field's own valid range by skipping those it refuses), and the ratio
to the oracle is reported next to the default's. A threshold that moves nothing on any
workload has not earned its place.
"""

from __future__ import annotations

import dataclasses

from bench.virtual.suite import Job, Sweep, run_jobs, sweep_jobs
from workers.core.controller.policies.pacer import PacerConfig

FACTORS = (0.8, 1.2)  # the issue's: each threshold at 0.8x and 1.2x its default
MOVES = 0.01  # a ratio that changes by less than 1 % of the oracle moved nothing


def variants() -> list[tuple[str, float]]:
    """(field, value) pairs PacerConfig accepts, two per field where both are valid."""
    found = []
    defaults = PacerConfig()
    for field in dataclasses.fields(PacerConfig):
        base = getattr(defaults, field.name)
        for factor in FACTORS:
            value = round(base * factor) if isinstance(base, int) else base * factor
            if value == base:
                continue
            try:
                PacerConfig(**{field.name: value})
            except ValueError:
                continue
            found.append((field.name, value))
    return found


def sensitivity(workload: str) -> str:
    """The markdown table for one workload."""
    tweaks = variants()
    jobs = [*sweep_jobs(workload), Job(workload, "pacer")]
    jobs += [Job(workload, "pacer", pacer=((name, value),)) for name, value in tweaks]
    outcomes = run_jobs(jobs)
    fixed = len(jobs) - len(tweaks) - 1
    curve = Sweep.of(jobs[:fixed], outcomes[:fixed])
    base = outcomes[fixed].throughput / curve.oracle
    lines = [
        f"Default pacer: {base:.3f} of the oracle ({curve.oracle:,.0f} tok/s, cap "
        f"{curve.best_cap}).",
        "",
        "| threshold | value | ratio | change |",
        "|---|---|---|---|",
    ]
    for (name, value), outcome in zip(tweaks, outcomes[fixed + 1 :], strict=True):
        ratio = outcome.throughput / curve.oracle
        mark = "" if abs(ratio - base) < MOVES else " *"
        lines.append(f"| {name} | {value:g} | {ratio:.3f} | {ratio - base:+.3f}{mark} |")
    return "\n".join(lines)
