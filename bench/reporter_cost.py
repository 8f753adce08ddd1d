"""What one poll of two engines costs the run's reporter: rows written and milliseconds.

    DATABASE_URL=postgres://... python -m bench.reporter_cost [--polls N]

A scratch run is created in the configured database, and each of N polls hands the reporter
two engine samples, the run's live figures and one decision, then flushes: the rows go to
the database in one transaction and the events to the run's Channels group on Redis, as in a
hosted run. The scratch run and its rows are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from channels.layers import get_channel_layer  # noqa: E402
from django.db import connection  # noqa: E402

from controlplane.runs.models import Decision, EngineSample, Run  # noqa: E402
from inference.metrics.monitor import PollResult  # noqa: E402
from workers.core.clock import MonotonicClock  # noqa: E402
from workers.core.decisions import Cause, DecisionKind, Signal  # noqa: E402
from workers.core.decisions import Decision as CoreDecision  # noqa: E402
from workers.core.samples import EngineHealth, EngineRole, LoadSample  # noqa: E402
from workers.runtime.reporter import RunReporter  # noqa: E402

OWNER = "bench-reporter"


def samples(at: float) -> tuple[LoadSample, ...]:
    return tuple(
        LoadSample(
            engine_id=f"sim-engine-{n}",
            role=EngineRole.UNIFIED,
            scraped_at=at,
            health=EngineHealth.UP,
            kv_capacity_tokens=450_000,
            max_model_len=32_768,
            kv_usage=0.62,
            num_running=120,
            num_waiting=3,
            num_waiting_capacity=0,
            num_preemptions=0,
            prefix_cache_hits=90_000,
            prefix_cache_queries=100_000,
            generation_tokens=25_000,
        )
        for n in range(2)
    )


def decision(at: float, cap: int) -> CoreDecision:
    return CoreDecision(
        at=at,
        kind=DecisionKind.GROW,
        cause=Cause.CLEAR,
        signal=Signal.CLEAR,
        cap_before=cap,
        cap_after=cap + 1,
        reason=f"Increased concurrency {cap} -> {cap + 1} (clear): x1.05 per turnover",
        figures={"inflight": cap, "max_kv_usage": 0.62},
    )


async def measure(run_id: int, polls: int, push: bool) -> list[float]:
    db = ThreadPoolExecutor(1)
    clock = MonotonicClock()
    layer = get_channel_layer()
    reporter = RunReporter(
        run_id=run_id,
        owner=OWNER,
        db=db,
        clock=clock,
        send=layer.group_send if push and layer is not None else None,
    )
    live = {"cap": 100, "policy_cap": 100, "inflight_train": 96, "inflight_eval": 0}
    costs = []
    for n in range(polls):
        now = clock.now()
        started = time.perf_counter()
        reporter.decisions((decision(now, 100 + n),))
        reporter.poll(
            PollResult(now, samples(now), (), (), ()),
            {**live, "controller_state": {"n": n}},
            {"sim-engine-0": (48, 0), "sim-engine-1": (48, 0)},
        )
        assert await reporter.flush()
        costs.append(time.perf_counter() - started)
    await asyncio.get_running_loop().run_in_executor(db, lambda: connection.close())
    db.shutdown()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args()
    for push in (True, False):
        run = Run.objects.create(name="bench-reporter", lease_owner=OWNER)
        try:
            costs = asyncio.run(measure(run.pk, args.polls, push))
            decisions = Decision.objects.filter(run=run).count()
            rows = EngineSample.objects.filter(run=run).count()
        finally:
            run.delete()
        ordered = sorted(costs)
        print(
            f"{args.polls} polls of 2 engines on {connection.vendor}: per poll "
            f"{rows // args.polls} sample rows + {decisions // args.polls} decision + the run's "
            f"live figures in one transaction" + (", events pushed to Redis" if push else "")
        )
        print(
            f"  median {statistics.median(costs) * 1e3:.2f} ms, "
            f"p90 {ordered[int(0.9 * len(ordered))] * 1e3:.2f} ms, max {ordered[-1] * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
