"""What the orchestrator itself costs per episode, against what an episode costs on engines.

    python -m bench.orchestrator_overhead [--steps N] [--engines URL URL ...]

First the core alone: the real orchestrator, control loop, dispatcher and controller run a
multi-turn workload against engines that answer at once, so every microsecond of CPU per
episode is the control plane's own (groups, sessions, scoring, batches, decisions; batch
files are assembled but not written). Then, when engine URLs are given (two simulators, say),
the same config over HTTP, showing how long an episode spends on the engines and how much
CPU the whole process spends per episode, HTTP client included.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import zlib
from typing import Any

from inference.engine_http import engine_http_client, rollout_session
from inference.metrics.client import MetricsClient
from inference.metrics.monitor import EngineMonitor
from inference.rollout_client import RolloutClient
from workers.core.clock import MonotonicClock
from workers.core.config.run import RunConfig, parse_run_config
from workers.core.orchestrator.batches import Batch, StepReport
from workers.core.orchestrator.orchestrator import Orchestrator
from workers.core.samples import EngineHealth, EngineRole, LoadSample
from workers.core.turns import Turn, TurnResult
from workers.runtime.engines import engine_specs, preflight
from workers.runtime.foreground import EnginePoll

TURNS = 4
BATCH, GROUP = 64, 8


class InstantEngine:
    """Answers every turn at once with ``max_tokens`` made-up tokens."""

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        return tuple(2 + zlib.crc32(w.encode()) % 30_000 for w in text.split())

    async def complete(self, turn: Turn) -> TurnResult:
        await asyncio.sleep(0)
        n = turn.max_tokens
        ids = tuple(range(100, 100 + n))
        return TurnResult(n, " w" * n, "length", tuple(-0.5 for _ in ids), ids)


class NoFiles:
    def __init__(self) -> None:
        self.samples = 0

    def written_steps(self) -> set[int]:
        return set()

    def write(self, batch: Batch, report: StepReport) -> None:
        self.samples += len(batch.samples)

    def path_of(self, step: int) -> str:
        return "memory"


class Timed:
    """An engine client that records how long each of its turns took on the engine."""

    def __init__(self, inner: Any, durations: list[float]) -> None:
        self._inner = inner
        self._durations = durations

    async def tokenize(self, text: str, *, add_special_tokens: bool) -> tuple[int, ...]:
        return await self._inner.tokenize(text, add_special_tokens=add_special_tokens)

    async def complete(self, turn: Turn) -> TurnResult:
        started = time.monotonic()
        result = await self._inner.complete(turn)
        self._durations.append(time.monotonic() - started)
        return result


def config(steps: int, urls: list[str]) -> RunConfig:
    return parse_run_config(
        {
            "name": "overhead",
            "batch_size": BATCH,
            "group_size": GROUP,
            "max_steps": steps,
            "concurrency": {"initial_inflight": 256, "max_inflight": 256, "poll_interval_s": 1.0},
            "env": [
                {
                    "name": "multiturn",
                    "args": {"turns": TURNS, "prompt_tokens": 256, "observation_tokens": 64},
                    "sampling": {"max_tokens": 64},
                }
            ],
            "engine": [{"url": url} for url in urls],
        }
    )


def clear_sample(
    name: str, *, running: int, kv_usage: float, kv_capacity_tokens: int
) -> LoadSample:
    """A fresh sample of an engine with room to spare: nothing waits, nothing is preempted."""
    return LoadSample(
        engine_id=name,
        role=EngineRole.UNIFIED,
        scraped_at=time.monotonic(),
        health=EngineHealth.UP,
        kv_capacity_tokens=kv_capacity_tokens,
        max_model_len=32_768,
        kv_usage=kv_usage,
        num_running=running,
        num_waiting=0,
        num_waiting_capacity=0,
        num_preemptions=0,
        prefix_cache_hits=0,
        prefix_cache_queries=0,
        generation_tokens=1000,
    )


async def healthy_poll(engines: list[str]) -> list[LoadSample]:
    return [
        clear_sample(name, running=10, kv_usage=0.2, kv_capacity_tokens=1_000_000)
        for name in engines
    ]


async def core_alone(steps: int) -> tuple[float, int]:
    names = ["e0", "e1"]
    cfg = config(steps, [f"http://{n}:8000" for n in names])
    writer = NoFiles()
    orchestrator = Orchestrator(
        cfg,
        controller=cfg.concurrency.make_controller(),
        poll=lambda: healthy_poll(names),
        engines={n: InstantEngine() for n in names},
        clock=MonotonicClock(),
        writer=writer,
    )
    started = time.thread_time()
    await orchestrator.run()
    return time.thread_time() - started, writer.samples


async def over_http(steps: int, urls: list[str]) -> None:
    """The same config on real engines: turns timed on the wire, CPU of the whole process."""
    cfg = config(steps, urls)
    specs = engine_specs(cfg.engines)
    durations: list[float] = []
    async with engine_http_client(len(specs)) as http:
        model = await preflight(cfg, specs, http)
    async with rollout_session(300) as http, MetricsClient(engine_http_client(4)) as metrics:
        clock = MonotonicClock()
        writer = NoFiles()
        orchestrator = Orchestrator(
            cfg,
            controller=cfg.concurrency.make_controller(),
            poll=EnginePoll(EngineMonitor(specs, metrics, clock), specs),
            engines={
                s.name: Timed(RolloutClient(http, base_url=s.base_url, model=model), durations)
                for s in specs
            },
            clock=clock,
            writer=writer,
        )
        cpu, wall = time.process_time(), time.monotonic()
        await orchestrator.run()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    turn = statistics.mean(durations)
    print(f"over HTTP on {len(urls)} engines: {writer.samples} episodes kept in {wall:.1f} s")
    print(
        f"  an episode spends {TURNS * turn:.2f} s on the engines ({TURNS} turns of {turn:.3f} s)"
    )
    print(
        f"  process CPU per kept episode, HTTP client included: {cpu / writer.samples * 1e3:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--engines", nargs="*", default=[])
    args = parser.parse_args()
    runs = [asyncio.run(core_alone(args.steps)) for _ in range(3)]
    per_episode = [cpu / kept * 1e6 for cpu, kept in runs]
    print(
        f"core alone, {TURNS} turns an episode, groups of {GROUP}, 256 in flight, "
        f"{args.steps} steps:"
    )
    print(
        f"  CPU per kept episode: median {statistics.median(per_episode):.0f} us "
        f"(runs: {', '.join(f'{v:.0f}' for v in per_episode)})"
    )
    if args.engines:
        asyncio.run(over_http(args.steps, args.engines))


if __name__ == "__main__":
    main()
