"""Record real `/metrics` expositions of a vLLM engine: once idle, once under KV pressure.

Pacer's metrics parser is tested against these recordings (tests/fixtures/metrics/), so they
must be what a real engine prints, not a hand-written imitation. The pressure recording is the
first scrape that shows the overload signals Pacer reacts to: preemptions and requests waiting
for capacity, which needs an engine with a small KV cache, for example

    python -m inference.serve --model DIR --cpu --num-gpu-blocks-override 16 --max-model-len 1024

Then, against that freshly started (still idle) engine:

    python -m inference.record_metrics http://127.0.0.1:8000 tests/fixtures/metrics/vllm-0.32.0-cpu

writes `...-idle.txt` and `...-pressure.txt`. With `--models-only` it writes the engine's
`/v1/models` body, byte for byte, to `...-models.json` instead, e.g. of an engine serving a LoRA
adapter (`--enable-lora --lora-modules NAME=DIR`), which vLLM lists beside its base model.

A restart that the counters alone cannot show needs a relaunched engine whose totals all passed
those of its earlier life. Against an engine started again (another `--max-model-len`, say),

    python -m inference.record_metrics URL tests/fixtures/metrics/vllm-0.32.0-cpu \
        --past tests/fixtures/metrics/vllm-0.32.0-cpu-pressure.txt

loads it until every total Pacer differences is above that recording's, then writes that scrape
to `...-relaunched.txt`.
"""

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
# The KV usage from which Pacer trims its cap; right after a preemption frees blocks, usage can
# dip below half, and such a scrape would not show KV pressure.
PRESSURE_KV_USAGE = 0.8
# Concurrent streams of load; 16 needs ~7x more KV than a 16-block cache holds.
PRESSURE_CONCURRENCY = 16
# Every request sends the same prompt of token ids (from 3, past <unk>, <s>, </s>): its first
# two 128-token CPU blocks are shared, so prefix-cache hits show up in the recording too.
PROMPT = list(range(3, 3 + 300))
# Long answers, so that running requests outgrow the cache and get preempted; prompt + answer
# stays under the 1024-token max model length of the example engine.
PRESSURE_MAX_TOKENS = 600
SCRAPE_PERIOD_S = 0.5
# The tiny CPU model preempts within seconds at this load; a minute means the engine is not
# configured for pressure.
PRESSURE_TIMEOUT_S = 60.0
# The totals Pacer reads as deltas (inference.metrics.names): counters and histogram counts.
TOTALS = (
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_count",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:request_queue_time_seconds_count",
)
# The pressure recording's totals took this load under a minute to make; five is far past it.
PAST_TIMEOUT_S = 300.0


def sample_value(exposition: str, name: str, **labels: str) -> float | None:
    """Sum of the samples named `name` whose labels include `labels`; None if there are none."""
    values = [
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]
    return sum(values) if values else None


def is_under_pressure(exposition: str) -> bool:
    """Every overload signal at once: preempted, requests queued, KV cache nearly full."""
    return (
        (sample_value(exposition, PREEMPTIONS) or 0) > 0
        and (sample_value(exposition, WAITING) or 0) > 0
        and (sample_value(exposition, KV_USAGE) or 0) >= PRESSURE_KV_USAGE
    )


async def scrape(client: httpx.AsyncClient, base_url: str) -> str:
    response = await client.get(f"{base_url}/metrics")
    response.raise_for_status()
    return response.text


async def record_idle(client: httpx.AsyncClient, base_url: str) -> str:
    exposition = await scrape(client, base_url)
    busy = (sample_value(exposition, RUNNING) or 0) + (sample_value(exposition, WAITING) or 0)
    if busy:
        raise RuntimeError(f"{base_url} is not idle: {busy:.0f} requests running or waiting")
    return exposition


def is_past(exposition: str, earlier: str) -> bool:
    """Every total Pacer differences is above the earlier recording's: read against it, the
    counters show no sign of the restart in between."""
    return all((sample_value(exposition, n) or 0) > (sample_value(earlier, n) or 0) for n in TOTALS)


async def record_pressure(client: httpx.AsyncClient, base_url: str, model: str) -> str:
    return await record_under_load(
        client,
        base_url,
        model,
        is_under_pressure,
        PRESSURE_TIMEOUT_S,
        f"no preemption, queue and KV usage >= {PRESSURE_KV_USAGE} at once; start it with a "
        "small --num-gpu-blocks-override",
    )


async def record_under_load(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    wanted: Callable[[str], bool],
    timeout_s: float,
    missing: str,
) -> str:
    """Load the engine until a scrape is ``wanted``, return that scrape, then drop the load.

    Dropping the load closes the connections, which makes vLLM abort the requests.
    """

    body = {"model": model, "prompt": PROMPT, "max_tokens": PRESSURE_MAX_TOKENS, "ignore_eos": True}

    async def stream() -> None:
        while True:
            (await client.post(f"{base_url}/v1/completions", json=body)).raise_for_status()

    workers = [asyncio.create_task(stream()) for _ in range(PRESSURE_CONCURRENCY)]
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await asyncio.sleep(SCRAPE_PERIOD_S)
            for worker in workers:
                if worker.done():
                    worker.result()
            exposition = await scrape(client, base_url)
            if wanted(exposition):
                return exposition
        raise RuntimeError(f"{base_url} showed {missing} within {timeout_s} s")
    finally:
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker


async def served_model(client: httpx.AsyncClient, base_url: str) -> str:
    response = await client.get(f"{base_url}/v1/models")
    response.raise_for_status()
    return response.json()["data"][0]["id"]


async def record(base_url: str, out_stem: Path) -> list[Path]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None)) as client:
        idle = await record_idle(client, base_url)
        pressure = await record_pressure(client, base_url, await served_model(client, base_url))
    written = []
    for kind, exposition in (("idle", idle), ("pressure", pressure)):
        path = out_stem.with_name(f"{out_stem.name}-{kind}.txt")
        path.write_text(exposition)
        written.append(path)
    return written


async def record_past(base_url: str, out_stem: Path, earlier: str) -> Path:
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None)) as client:
        exposition = await record_under_load(
            client,
            base_url,
            await served_model(client, base_url),
            lambda text: is_past(text, earlier),
            PAST_TIMEOUT_S,
            f"not every one of {', '.join(TOTALS)} above the earlier recording's",
        )
    path = out_stem.with_name(f"{out_stem.name}-relaunched.txt")
    path.write_text(exposition)
    return path


async def record_models(base_url: str, out_stem: Path) -> Path:
    """The body as served, not re-encoded: a fixture must show vLLM's own nulls and spacing."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
        response = await client.get(f"{base_url}/v1/models")
    response.raise_for_status()
    path = out_stem.with_name(f"{out_stem.name}-models.json")
    path.write_bytes(response.content)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "url", help="base URL of a freshly started engine, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument(
        "out_stem",
        type=Path,
        help="path prefix of the recordings, e.g. tests/fixtures/metrics/vllm-0.32.0-cpu",
    )
    parser.add_argument(
        "--models-only",
        action="store_true",
        help="record only the /v1/models body, to OUT_STEM-models.json",
    )
    parser.add_argument(
        "--past",
        type=Path,
        metavar="EARLIER",
        help="load until every total Pacer reads is above EARLIER's (a recording of the "
        "engine's previous life), record that scrape to OUT_STEM-relaunched.txt",
    )
    args = parser.parse_args()
    if not args.out_stem.parent.is_dir():
        parser.error(f"{args.out_stem.parent} is not a directory")
    url = args.url.rstrip("/")
    if args.models_only:
        print(f"wrote {asyncio.run(record_models(url, args.out_stem))}")
        return
    if args.past is not None:
        print(f"wrote {asyncio.run(record_past(url, args.out_stem, args.past.read_text()))}")
        return
    for path in asyncio.run(record(url, args.out_stem)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
