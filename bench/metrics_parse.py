"""How long one engine's /metrics text takes to become a LoadSample, on one core.

    python -m bench.metrics_parse [exposition.txt ...] [--repeats N]

Times the whole pure path a poll runs per engine (parse the exposition, difference it with
the previous scrape, build the sample) over recorded vLLM expositions, and prints the median
and p90 per engine and how many engines one core could read inside a 5 s poll period. The
target is 2 ms per engine: 64 engines then cost 128 ms of a 5 s poll.

Both CPU time of this thread and wall time are shown: on a shared machine other processes
inflate wall time, while CPU time is what one parse costs the core it runs on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from inference.metrics.deltas import reading_delta
from inference.metrics.endpoints import EngineSpec
from inference.metrics.parse import parse_exposition
from inference.metrics.sampling import load_sample

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics"
DEFAULT = FIXTURES / "vllm-0.32.0-cpu-pressure.txt"
POLL_PERIOD_S = 5.0  # the controller's poll period
TARGET_MS = 2.0  # per engine, from the issue
DOWN_AFTER_S = 30.0  # the monitor's default bound on a comparable interval
SPEC = EngineSpec("bench", "http://bench:8000")


def measure(text: str, repeats: int) -> tuple[int, list[float], list[float]]:
    """Engines in the text, and CPU and wall milliseconds per engine for each repeat."""
    previous = parse_exposition(text, SPEC.name)
    cpu, wall = [], []
    for _ in range(repeats):
        cpu_start, wall_start = time.thread_time_ns(), time.perf_counter_ns()
        for engine_id, reading in parse_exposition(text, SPEC.name).items():
            delta = reading_delta(previous[engine_id], reading, POLL_PERIOD_S, DOWN_AFTER_S)
            load_sample(engine_id, SPEC, 0.0, reading, delta, 4096)
        cpu.append((time.thread_time_ns() - cpu_start) / 1e6 / len(previous))
        wall.append((time.perf_counter_ns() - wall_start) / 1e6 / len(previous))
    return len(previous), sorted(cpu), sorted(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[DEFAULT])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for path in args.paths:
        text = path.read_text()
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        measure(text, 50)  # warm caches before timing
        engines, cpu, wall = measure(text, args.repeats)
        median, p90 = statistics.median(cpu), cpu[int(0.9 * len(cpu))]
        print(f"{path.name}: {series} series, {engines} engine(s), {len(text.encode())} bytes")
        print(
            f"  per engine, CPU: median {median:.3f} ms, p90 {p90:.3f} ms "
            f"(target {TARGET_MS} ms); wall: median {statistics.median(wall):.3f} ms, "
            f"p90 {wall[int(0.9 * len(wall))]:.3f} ms"
        )
        print(
            f"  engines per {POLL_PERIOD_S:.0f} s poll on one core: "
            f"{POLL_PERIOD_S * 1000 / median:.0f} at the median, "
            f"{POLL_PERIOD_S * 1000 / p90:.0f} at p90"
        )


if __name__ == "__main__":
    main()
