"""``python -m bench share``: runs sharing engines, arbitrated by the pool rule
(``workers.core.sharing``) at every poll period, in virtual time.

Each multi-run workload is run with every run on the same engines, then each run alone on
them (from 0 s to the horizon) for the pool's tokens/s to be read against. The figures, as
the output defines them:

- share over time: each live run's part of what the live runs hold, in KV tokens (the
  simulator's block tables: distinct blocks its requests hold on the serving engines) and
  in episodes in flight (the unit ceilings are given in);
- convergence: from the later start of the first two equal-weight, equal-priority runs until
  their KV shares, averaged over a trailing ``SMOOTH_S``, are within 10 % of equal and stay
  so for ``HOLD_S`` (or until one ends); in seconds and in the later run's turnovers;
- Jain's fairness index, (sum x)^2 / (n sum x^2) of the runs' mean KV shares over weight,
  over the window from convergence until the first of them ends;
- a run of higher priority than those running when it starts: from its start until the
  runs it displaced hold no more than their new ceilings (the room made for it), and until
  its own episodes in flight reach 90 % of its ceiling (its controller's growth into that
  room), with the engines' preemptions meanwhile against those in as long a window before
  its start;
- a run that ends early: from its end until the others hold 90 % of the episodes the pool
  held in the minute before it (the ceilings are handed back at the others' next
  arbitration; taking the share up is their controllers' growth); a run whose host dies
  hands its ceiling back only when its claim goes stale (``CLAIM_TTL_S``);
- pool tokens/s: completed-episode tokens per second of every run over the window in which
  all of them run, against the better single run on the same engines over that window, and
  against the runs' own rates alone averaged by share (what a fair split of unlike runs can
  deliver: half the KV cache given to a run that makes fewer tokens of it costs tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.virtual.pool_workload import PoolRun, PoolWorkload, load_pool_workload
from bench.virtual.shared import PoolOutcome, PoolPoint, run_pool

WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "workloads"
SMOOTH_S = 30.0  # one look's KV is one instant of episodes at every stage of their lives
HOLD_S = 60.0
EQUAL_WITHIN = 0.10  # the "within 10 % of equal share"
REACHED = 0.9
TABLE_EVERY_S = 60.0


def shipped_pools() -> list[str]:
    """The multi-run workloads: ``s*.toml`` (the suite's ``bench report`` reads ``w*``)."""
    return sorted(str(path) for path in WORKLOADS_DIR.glob("s*.toml"))


@dataclass(frozen=True, slots=True)
class Converged:
    at: float
    seconds: float
    turnovers: float


def share_benchmark(paths: Sequence[str], policy: str, seconds: float | None = None) -> str:
    """Every workload of ``paths`` under ``policy``: the printed text."""
    return "\n\n".join(_workload_text(load_pool_workload(p), policy, seconds) for p in paths)


def _workload_text(pool: PoolWorkload, policy: str, seconds: float | None) -> str:
    shared = run_pool(pool, policy, seconds)
    alone = [run_pool(pool.alone(run), policy, seconds) for run in pool.runs]
    runs = ", ".join(
        f"{r.run_id} {r.name} ({r.start_s:g}-{r.end_s:g} s, x{r.share:g} p{r.priority}, "
        f"{_shape(r)})"
        for r in pool.runs
    )
    lines = [
        f"{pool.name} ({pool.path}): {pool.description}; policy {policy}, "
        f"{shared.seconds:g} s, {len(pool.engines)} engines, {shared.kv_tokens:,} KV tokens",
        f"runs: {runs}",
        "",
        *_share_table(shared),
        "",
        *_figures(pool, shared, alone),
        f"wall: {shared.wall_s + sum(o.wall_s for o in alone):.1f} s",
    ]
    return "\n".join(lines)


def _shape(run: PoolRun) -> str:
    envs = run.workload.document.get("env") or []
    return "+".join(str(env.get("name", "?")) for env in envs if isinstance(env, dict))


def _share_table(shared: PoolOutcome) -> list[str]:
    """Each run's KV share, in-flight share and ceiling, every ``TABLE_EVERY_S``."""
    ids = sorted(shared.completed_tokens)
    head = " | ".join(f"run {i}: KV % / in flight (%) / ceiling" for i in ids)
    lines = [f"| t s | {head} | preemptions |", "|---" * (len(ids) + 2) + "|"]
    step = max(1, round(TABLE_EVERY_S / _period(shared)))
    for point in shared.points[::step]:
        kv = sum(r.kv_tokens for r in point.runs) or 1
        held = sum(r.inflight for r in point.runs) or 1
        cells = []
        for run_id in ids:
            r = point.of(run_id)
            cells.append(
                "-"
                if r is None
                else f"{100 * r.kv_tokens / kv:.0f} / {r.inflight} ({100 * r.inflight / held:.0f})"
                f" / {'none' if r.ceiling is None else r.ceiling}"
            )
        lines.append(f"| {point.at:g} | {' | '.join(cells)} | {point.preemptions} |")
    return lines


def _period(shared: PoolOutcome) -> float:
    points = shared.points
    return points[1].at - points[0].at if len(points) > 1 else 1.0


def _figures(pool: PoolWorkload, shared: PoolOutcome, alone: list[PoolOutcome]) -> list[str]:
    lines: list[str] = []
    pair = _equal_pair(pool.runs)
    if pair is not None:
        lines += _fairness(pair, shared)
    for run in pool.runs:
        running = [r for r in pool.runs if r.start_s <= run.start_s < r.end_s and r is not run]
        if run.start_s > 0 and running and run.priority > max(r.priority for r in running):
            lines.append(_priority_join(run, shared))
    for run in pool.runs:
        after = [r for r in pool.runs if r.start_s <= run.end_s < r.end_s]
        if run.end_s < shared.seconds and after:
            lines.append(_handback(run, shared))
    lines.append(_throughput(pool, shared, alone))
    return lines


def _equal_pair(runs: Sequence[PoolRun]) -> tuple[PoolRun, PoolRun] | None:
    """The first two runs of equal weight and priority whose lives overlap."""
    for i, first in enumerate(runs):
        for second in runs[i + 1 :]:
            same = (first.share, first.priority) == (second.share, second.priority)
            if same and max(first.start_s, second.start_s) < min(first.end_s, second.end_s):
                return first, second
    return None


def _kv_shares(pair: tuple[PoolRun, PoolRun], shared: PoolOutcome) -> list[tuple[PoolPoint, float]]:
    """The first run's part of the pair's KV at each look both are live, smoothed over a
    trailing ``SMOOTH_S``."""
    both = [
        (p, a.kv_tokens, b.kv_tokens)
        for p in shared.points
        if (a := p.of(pair[0].run_id)) is not None and (b := p.of(pair[1].run_id)) is not None
    ]
    smoothed = []
    for point, _, _ in both:
        window = [(a, b) for p, a, b in both if point.at - SMOOTH_S < p.at <= point.at]
        total = sum(a + b for a, b in window)
        smoothed.append((point, sum(a for a, _ in window) / total if total else 0.5))
    return smoothed


def _fairness(pair: tuple[PoolRun, PoolRun], shared: PoolOutcome) -> list[str]:
    later = max(pair, key=lambda r: r.start_s)
    shares = _kv_shares(pair, shared)
    converged = _converged(later, shares)
    names = f"runs {pair[0].run_id} and {pair[1].run_id}"
    if converged is None:
        return [
            f"convergence of {names} to within 10 % of equal KV share: never, in "
            f"{min(pair[0].end_s, pair[1].end_s) - later.start_s:g} s together",
            *_jain_line(names, shares, later.start_s, "(no convergence: from the later start)"),
        ]
    return [
        f"convergence of {names} to within 10 % of equal KV share: {converged.seconds:g} s "
        f"({converged.turnovers:.1f} turnovers of run {later.run_id}) after run "
        f"{later.run_id} starts",
        *_jain_line(names, shares, converged.at, f"from {converged.at:g} s"),
    ]


def _converged(later: PoolRun, shares: list[tuple[PoolPoint, float]]) -> Converged | None:
    low, high = 0.5 * (1 - EQUAL_WITHIN), 0.5 * (1 + EQUAL_WITHIN)
    for i, (point, _) in enumerate(shares):
        if point.at < later.start_s + SMOOTH_S:
            continue
        held = [x for p, x in shares[i:] if p.at <= point.at + HOLD_S]
        if all(low <= x <= high for x in held):
            run = point.of(later.run_id)
            turnovers = 0.0 if run is None else run.turnover
            return Converged(point.at, point.at - later.start_s, turnovers)
    return None


def _jain_line(
    names: str, shares: list[tuple[PoolPoint, float]], since: float, why: str
) -> list[str]:
    window = [x for p, x in shares if p.at >= since]
    if not window:
        return [f"Jain's index of {names}: no window"]
    mean = sum(window) / len(window)
    return [
        f"Jain's index of {names} over their mean KV shares {why} to the first one's end: "
        f"{jain([mean, 1 - mean]):.3f} (mean shares {mean:.2f} / {1 - mean:.2f}; "
        f"{len(window)} looks)"
    ]


def jain(shares: Sequence[float]) -> float:
    """Jain's fairness index: 1 when equal, 1/n when one holds everything."""
    total, squares = sum(shares), sum(x * x for x in shares)
    return total * total / (len(shares) * squares) if squares else 1.0


def _priority_join(run: PoolRun, shared: PoolOutcome) -> str:
    after = [p for p in shared.points if p.at >= run.start_s]
    given = next((own for p in after if (own := p.of(run.run_id)) and own.ceiling), None)
    first = "never" if given is None else str(given.ceiling)
    head = (
        f"run {run.run_id} (priority {run.priority}) joins at {run.start_s:g} s, "
        f"first ceiling {first}; the others within theirs {_room_made(run, shared)}"
    )
    for point in after:
        own = point.of(run.run_id)
        if own is not None and own.ceiling is not None and own.inflight >= REACHED * own.ceiling:
            return (
                f"{head}; 90 % of its ceiling then ({own.inflight} of {own.ceiling}) in "
                f"{point.at - run.start_s:g} s ({own.turnover:.1f} turnovers), "
                f"{_preemptions(run, shared, point)}"
            )
    return f"{head}; never at 90 % of its ceiling"


def _preemptions(run: PoolRun, shared: PoolOutcome, until: PoolPoint) -> str:
    """The engines' preemptions from ``run``'s start to ``until``, and in as long before."""
    before = [p for p in shared.points if p.at <= run.start_s]
    at_start = before[-1].preemptions if before else 0
    span = until.at - run.start_s
    earlier = [p for p in before if p.at <= run.start_s - span]
    base = at_start - (earlier[-1].preemptions if earlier else 0)
    return f"preemptions meanwhile {until.preemptions - at_start} (in as long before: {base})"


def _room_made(run: PoolRun, shared: PoolOutcome) -> str:
    """How soon the runs a joining one displaced hold no more than the ceilings they took for
    it: the room its ceiling gives it made, whatever its own controller does with it."""
    taken = {
        other: min(
            (d.at for d in decisions if d.kind == "share" and d.at >= run.start_s),
            default=run.start_s,
        )
        for other, decisions in shared.decisions.items()
        if other != run.run_id
    }
    for point in shared.points:
        others = [r for r in point.runs if r.run_id in taken]
        if point.at <= max(taken.values(), default=run.start_s) or not others:
            continue
        if all(r.ceiling is None or r.inflight <= r.ceiling for r in others):
            own = point.of(run.run_id)
            turnovers = "" if own is None else f" ({own.turnover:.1f} turnovers)"
            return f"in {point.at - run.start_s:g} s{turnovers}, {_preemptions(run, shared, point)}"
    return "never"


def _handback(run: PoolRun, shared: PoolOutcome) -> str:
    last = [p for p in shared.points if run.end_s - HOLD_S <= p.at <= run.end_s]
    held = sum(sum(r.inflight for r in p.runs) for p in last) / max(1, len(last))
    later = [p for p in shared.points if p.at > run.end_s]
    ceded = next((p for p in later if _ceilings(p) >= REACHED * held), None)
    given = "never" if ceded is None else f"in {ceded.at - run.end_s:g} s"
    ends = "'s host dies" if run.host_dies else " ends"
    head = (
        f"run {run.run_id}{ends} at {run.end_s:g} s: the others' ceilings add up to 90 % of the "
        f"pool's {held:.0f} in flight {given}"
    )
    for point in later:
        others = sum(r.inflight for r in point.runs if r.run_id != run.run_id)
        if others >= REACHED * held:
            first = min(point.runs, key=lambda r: r.run_id)
            before = next(
                (r for p in reversed(last) if (r := p.of(first.run_id)) is not None), None
            )
            turns = first.turnover - (before.turnover if before is not None else 0.0)
            return (
                f"{head}; they hold it in {point.at - run.end_s:g} s ({turns:.1f} turnovers "
                f"of run {first.run_id})"
            )
    return f"{head}; they never hold it (in {shared.seconds - run.end_s:g} s)"


def _ceilings(point: PoolPoint) -> float:
    """What the live runs' ceilings allow together: no bound once one has none (alone)."""
    return sum(math.inf if r.ceiling is None else r.ceiling for r in point.runs)


def _throughput(pool: PoolWorkload, shared: PoolOutcome, alone: list[PoolOutcome]) -> str:
    start = max(r.start_s for r in pool.runs)
    end = min(min(r.end_s for r in pool.runs), shared.seconds)
    together = _rate(shared, start, end)
    singles = [(_rate(o, start, end), run) for o, run in zip(alone, pool.runs, strict=True)]
    best, best_run = max(singles, key=lambda pair: pair[0])
    ratio = together / best if best else 0.0
    weights = sum(run.share for _, run in singles)
    mixed = sum(rate * run.share for rate, run in singles) / weights
    each = " / ".join(f"{rate:,.0f}" for rate, _ in singles)
    return (
        f"pool tokens/s from {start:g} s to {end:g} s (every run running): {together:,.0f}; "
        f"the better single run on the same engines (run {best_run.run_id} alone): "
        f"{best:,.0f}; ratio {ratio:.3f}; each run alone {each}, their mean by share "
        f"{mixed:,.0f} (ratio {together / mixed if mixed else 0.0:.3f})"
    )


def _rate(outcome: PoolOutcome, start: float, end: float) -> float:
    """Completed-episode tokens per second of every run between the looks at ``start`` and
    ``end``."""

    def total(at: float) -> int:
        point = min(outcome.points, key=lambda p: abs(p.at - at))
        return sum(r.completed_tokens for r in point.runs)

    return (total(end) - total(start)) / (end - start) if end > start else 0.0
