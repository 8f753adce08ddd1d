"""``python -m bench report``: the whole suite, then bench/REPORT.md and its plots.

Every shipped workload is swept (the oracle) and run under each adaptive policy from its
own start; W3 also from a start of 1 and of 1,024. The table gives each policy's
throughput as a ratio to the oracle's; each workload's note says whether its curve is flat
past the knee or keeps rising, read from the sweep itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # off-screen: the report is drawn on machines without a display
import matplotlib.pyplot as plt

from bench.virtual.outcome import RunOutcome
from bench.virtual.run import ADAPTIVE
from bench.virtual.suite import Job, Sweep, run_jobs, shipped_workloads, sweep_jobs

EXTRA_STARTS = {"w3_agentic": (1, 1024)}  # the W3 from a start of 1 and of 1,024
BENCH_DIR = Path(__file__).resolve().parent.parent
PLOTS_DIR = BENCH_DIR / "report"
SENSITIVITY_HEADING = "## Sensitivity of pacer's thresholds"
RESULTS = PLOTS_DIR / "results.json"  # every run's figures, as the last report left them


def stored_oracle(workload: str, name: str) -> float | None:
    """The oracle of the last report's sweep of this workload (file stem and name both
    match, so that another file reusing a shipped name is not read against its oracle), or
    None: one run can be read against the oracle without sweeping again."""
    if not RESULTS.exists():
        return None
    stem = Path(workload).stem
    fixed = [
        run["throughput"]
        for run in json.loads(RESULTS.read_text())
        if run["workload"] == name
        and run["policy"].startswith("fixed:")
        and run["job"].split()[0] == stem
    ]
    return max(fixed, default=None)


def suite_jobs(workloads: list[str]) -> list[Job]:
    jobs: list[Job] = []
    for workload in workloads:
        jobs += sweep_jobs(workload)
        jobs += [Job(workload, policy) for policy in ADAPTIVE]
        for start in EXTRA_STARTS.get(Path(workload).stem, ()):
            jobs += [Job(workload, policy, start=start) for policy in ADAPTIVE]
    return jobs


def build_report(workloads: list[str] | None = None) -> Path:
    chosen = workloads or shipped_workloads()
    started = time.perf_counter()
    jobs = suite_jobs(chosen)
    outcomes = run_jobs(jobs)
    wall = time.perf_counter() - started
    PLOTS_DIR.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps([o.figures() | {"job": j.label} for j, o in zip(jobs, outcomes, strict=True)])
    )
    sections, rows = [], []
    for workload in chosen:
        mine = [(j, o) for j, o in zip(jobs, outcomes, strict=True) if j.workload == workload]
        fixed = [(j, o) for j, o in mine if j.policy.startswith("fixed:")]
        curve = Sweep.of([j for j, _ in fixed], [o for _, o in fixed])
        adaptive = [(j, o) for j, o in mine if not j.policy.startswith("fixed:")]
        rows += _rows(curve, adaptive)
        sections.append(_section(workload, curve, adaptive))
        _plot(workload, curve, adaptive)
    text = _document(rows, sections, wall, len(jobs))
    path = BENCH_DIR / "REPORT.md"
    path.write_text(text)
    return path


def _rows(curve: Sweep, adaptive: list[tuple[Job, RunOutcome]]) -> list[str]:
    by = {(j.policy, j.start): o for j, o in adaptive}
    rows = []
    for start in sorted({j.start for j, _ in adaptive}, key=lambda s: -1 if s is None else s):
        figures = [by[(policy, start)].figures(curve.oracle) for policy in ADAPTIVE]
        cells = [f"{f['ratio_to_oracle']:.3f}" for f in figures]
        cells += [f"{f['steady_ratio']:.3f}" for f in figures]
        cells += [_ramp(f) for f in figures]
        pacer, reference = by[("pacer", start)], by[("reference", start)]
        name = curve.best.workload + ("" if start is None else f" (start {start})")
        rows.append(
            f"| {name} | {curve.oracle:,.0f} (cap {curve.best_cap}) | "
            + " | ".join(cells)
            + f" | {pacer.throughput / reference.throughput:.3f} |"
        )
    return rows


def _ramp(figures: dict[str, Any]) -> str:
    """Time to 90 % of the oracle as a cell: seconds, and turnovers in brackets."""
    if figures["time_to_90pct_s"] is None:
        return "never"
    return f"{figures['time_to_90pct_s']:.0f} s ({figures['time_to_90pct_turnovers']:.1f})"


def _section(workload: str, curve: Sweep, adaptive: list[tuple[Job, RunOutcome]]) -> str:
    stem = Path(workload).stem
    steady_cap, steady_ratio = curve.steady_best()
    best_half = curve.outcomes[curve.caps.index(steady_cap)]
    lines = [
        f"### {curve.best.workload}: {stem}",
        "",
        f"Curve: {curve.shape()}. Best second half: cap {steady_cap}, steady ratio "
        f"{steady_ratio:.3f} (by quarter {curve.quarters(best_half)}).",
        "",
        curve.table(),
        "",
        "| policy | start | ratio | steady ratio | by quarter | to 90 %, s (turnovers) | "
        "preemptions | wasted tokens | direction changes | settled cap | max KV |",
        "|---" * 11 + "|",
    ]
    for job, o in adaptive:
        f = o.figures(curve.oracle)
        lines.append(
            f"| {job.policy} | {job.start or 'own'} | {f['ratio_to_oracle']:.3f} | "
            f"{f['steady_ratio']:.3f} | {curve.quarters(o)} | {_ramp(f)} | {o.preemptions} | "
            f"{o.wasted_tokens:,} | {o.direction_changes} | {o.settled_cap:.0f} | "
            f"{o.max_kv:.2f} |"
        )
    lines += ["", f"![{stem} over time](report/{stem}_time.png)"]
    lines += [f"![{stem} sweep](report/{stem}_sweep.png)", ""]
    return "\n".join(lines)


def write_sensitivity(workload: str, table: str) -> Path:
    """Keep a sensitivity table where the report finds it, and put it in the report now."""
    PLOTS_DIR.mkdir(exist_ok=True)
    path = PLOTS_DIR / f"sensitivity_{workload}.md"
    path.write_text(f"### {workload}\n\n{table}\n")
    report = BENCH_DIR / "REPORT.md"
    if report.exists():
        text = report.read_text().split(SENSITIVITY_HEADING)[0].rstrip()
        report.write_text(f"{text}\n\n{_sensitivity_section()}")
    return path


def _sensitivity_section() -> str:
    tables = sorted(PLOTS_DIR.glob("sensitivity_*.md"))
    if not tables:
        return ""
    intro = (
        "Each PacerConfig threshold at 0.8x and 1.2x its default (`python -m bench "
        "sensitivity`); * marks a change of at least 0.01 of the oracle."
    )
    return "\n\n".join([SENSITIVITY_HEADING, intro, *(t.read_text() for t in tables)])


def _document(rows: list[str], sections: list[str], wall: float, runs: int) -> str:
    head = [
        "# Benchmarks: Pacer against the best fixed cap, the reference and Gradient2",
        "",
        "Generated by `python -m bench report` (virtual time, the runtime's own orchestrator,",
        "control loop, dispatcher and controller on the engine simulator). The objective is",
        "completed-episode tokens per second over the whole run, ramp included; the oracle is",
        "the best fixed cap of the sweep. Ratios are to the oracle; the last column is pacer",
        "over reference. Since a run's ramp weighs more in ten minutes than in hours, each",
        "policy's ramp and steady state are also shown apart: its steady ratio (the work of",
        "the second half per second over the oracle, work being completed-episode tokens",
        "plus those generated so far for episodes in flight, so that no half is paid for",
        "the backlog of the one before) and its time to 90 % (the first time a trailing",
        "minute delivered 90 % of the oracle's rate, in seconds and in turnovers: full",
        "replacements of the pool, as the controller counts them). A fixed cap has no ramp in",
        "its second half, so each sweep table gives every cap's steady ratio as the yardstick",
        "and its section's first line names the best of them. The sections also split each",
        "second half into its two quarters (third / last): where a fixed cap's quarters",
        "differ by more than a gap between steady ratios, ten minutes cannot tell that gap",
        "from the workload's own swing (an eval wave, a pool of long answers aging, a drift).",
        "",
        f"Suite: {runs} runs in {wall:.0f} s wall on 2 worker processes.",
        "",
        "| workload | oracle tok/s | reference | pacer | gradient2 | reference steady | "
        "pacer steady | gradient2 steady | reference to 90 % | pacer to 90 % | "
        "gradient2 to 90 % | pacer / reference |",
        "|---" * 12 + "|",
        *rows,
        "",
    ]
    return "\n".join(head + sections) + "\n" + _sensitivity_section()


def _plot(workload: str, curve: Sweep, adaptive: list[tuple[Job, RunOutcome]]) -> None:
    stem = Path(workload).stem
    figure, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    runs = [(f"{j.policy}" + (f" start {j.start}" if j.start else ""), o) for j, o in adaptive]
    runs.append((f"best fixed {curve.best_cap}", curve.best))
    for label, o in runs:
        at = [s.at for s in o.samples]
        axes[0].plot(at, [s.cap for s in o.samples], label=label)
        axes[1].plot(at, [s.inflight for s in o.samples], label=label)
        axes[2].plot(at, _trailing_rate(o), label=label)
    for ax, title in zip(axes, ("cap", "in flight", "completed tokens/s (60 s)"), strict=True):
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    axes[2].set_xlabel("virtual seconds")
    figure.suptitle(f"{curve.best.workload} ({stem})")
    figure.tight_layout()
    figure.savefig(PLOTS_DIR / f"{stem}_time.png", dpi=80)
    plt.close(figure)
    figure, ax = plt.subplots(figsize=(7, 4))
    ax.plot(curve.caps, [o.throughput for o in curve.outcomes], marker="o", label="fixed cap")
    for (job, o), color in zip(
        adaptive, plt.rcParams["axes.prop_cycle"].by_key()["color"][1:], strict=False
    ):
        if job.start is None:
            ax.axvline(o.settled_cap, color=color, linestyle="--", label=f"{job.policy} settled")
    ax.set_xscale("log")
    ax.set_xlabel("cap")
    ax.set_ylabel("completed tokens/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{curve.best.workload}: throughput versus cap")
    figure.tight_layout()
    figure.savefig(PLOTS_DIR / f"{stem}_sweep.png", dpi=80)
    plt.close(figure)


def _trailing_rate(o: RunOutcome) -> list[float]:
    return [done / span if span else 0.0 for _, span, done in o.trailing()]
