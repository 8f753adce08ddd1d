"""How fast the engine simulator runs in virtual time: one hour of traffic on four engines.

Each engine (preset h100-8b) is kept busy by a closed-loop client of GRPO-style rollouts:
groups of 8 requests share a 1,024-token prompt, answers follow a lognormal length (by default
mean 1,500 tokens, sigma 0.6, as reasoning-style RL answers; capped by max_tokens 4,096), and
every finished request is replaced at once. The concurrency per engine sits where its KV cache
fills, so the run exercises admission, prefix hits, eviction and preemption, not only plain
decoding. The cost of a simulated hour grows with the requests it completes: shorter answers
mean more requests per hour (``--answer-length lognormal:600:0.6`` completes ~2.4x as many).

Usage: .venv/bin/python -m bench.sim_virtual_time [--hours 1] [--engines 4] [--concurrency 320]
           [--answer-length lognormal:1500:0.6]
Prints the wall and CPU time, the simulated seconds per wall second and the engine totals
(CPU time is the steadier figure on a machine shared with other work).
"""

from __future__ import annotations

import argparse
import heapq
import time

import numpy as np

from inference.sim.config import EngineConfig
from inference.sim.engine import Engine
from inference.sim.presets import get_preset
from inference.sim.sampling import LengthDistribution, SamplingParams
from inference.sim.text import VOCAB_SIZE
from inference.sim.virtual import VirtualEngine

GROUP_SIZE = 8  # rollouts per prompt, as a GRPO group
PROMPT_TOKENS = 1024
MAX_TOKENS = 4096
ANSWER_LENGTH = "lognormal:1500:0.6"
MAX_NUM_SEQS = 1024  # as inference.serve launches vLLM for Pacer: KV, not the batch cap, binds


class ClosedLoopClient:
    """Keeps ``concurrency`` requests in one engine, replacing each as it finishes."""

    def __init__(self, engine: VirtualEngine, name: str, seed: int) -> None:
        self.engine = engine
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.params = SamplingParams(max_tokens=MAX_TOKENS)
        self.num_sent = 0
        self.prompt = self.rng.integers(VOCAB_SIZE, size=PROMPT_TOKENS)

    def send(self, at: float) -> None:
        if self.num_sent % GROUP_SIZE == 0:
            self.prompt = self.rng.integers(VOCAB_SIZE, size=PROMPT_TOKENS)
        self.engine.submit(f"{self.name}-{self.num_sent}", self.prompt, self.params, at)
        self.num_sent += 1


def run(hours: float, num_engines: int, concurrency: int, answer_length: str) -> None:
    preset = get_preset("h100-8b")
    horizon = hours * 3600.0
    clients = []
    for index in range(num_engines):
        config = EngineConfig.from_kv_tokens(
            preset.kv_tokens,
            preset.block_size,
            max_num_seqs=MAX_NUM_SEQS,
            max_num_batched_tokens=preset.max_num_batched_tokens,
            max_model_len=preset.max_model_len,
            seed=index,
        )
        engine = Engine(config, preset.cost, LengthDistribution.parse(answer_length))
        client = ClosedLoopClient(VirtualEngine(engine), f"e{index}", seed=100 + index)
        for _ in range(concurrency):
            client.send(0.0)
        clients.append(client)

    started, cpu_started = time.perf_counter(), time.process_time()
    heap = [(0.0, index) for index in range(num_engines)]
    while heap:
        _, index = heapq.heappop(heap)
        client = clients[index]
        for req in client.engine.run_until(horizon):
            assert req.finish_time is not None
            client.send(req.finish_time)
        if client.engine.now < horizon:
            heapq.heappush(heap, (client.engine.now, index))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started

    simulated = horizon * num_engines
    print(f"simulated {hours:g} h on {num_engines} engines in {wall:.1f} s wall ({cpu:.1f} s CPU)")
    print(f"  engine-seconds per wall second: {simulated / wall:,.0f}")
    print(f"  virtual seconds per wall second (all engines together): {horizon / wall:,.0f}")
    for client in clients:
        counters = client.engine.engine.counters
        finished = sum(counters.request_success.values())
        print(
            f"  {client.name}: {client.engine.num_steps:,} steps, {finished:,} requests, "
            f"{counters.generation_tokens / horizon:,.0f} gen tok/s, "
            f"prefix hit {counters.prefix_cache_hits / max(counters.prefix_cache_queries, 1):.2f}, "
            f"{counters.num_preemptions:,} preemptions"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=320)
    parser.add_argument("--answer-length", default=ANSWER_LENGTH)
    args = parser.parse_args()
    run(args.hours, args.engines, args.concurrency, args.answer_length)


if __name__ == "__main__":
    main()
