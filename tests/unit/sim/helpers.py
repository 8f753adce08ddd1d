"""Small engines and workloads for the simulator's unit tests."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from inference.sim.config import EngineConfig
from inference.sim.cost import StepCost
from inference.sim.engine import Engine
from inference.sim.kv_manager import KVCacheManager
from inference.sim.request import FinishReason, Request
from inference.sim.scheduler import Scheduler

# Round numbers so that step times can be checked by hand: 10 ms a step plus 1 ms a token.
UNIT_COST = StepCost(
    step_overhead_s=0.01, per_batched_token_s=0.001, per_seq_s=0.0, per_context_token_s=0.0
)


def make_config(**fields: Any) -> EngineConfig:
    values: dict[str, Any] = {
        "block_size": 4,
        "num_gpu_blocks": 17,  # 16 usable blocks, 64 tokens
        "max_num_seqs": 8,
        "max_num_batched_tokens": 32,
        "max_model_len": 64,
    }
    values.update(fields)
    return EngineConfig(**values)


def make_scheduler(**fields: Any) -> Scheduler:
    config = make_config(**fields)
    kv = KVCacheManager(
        config.num_gpu_blocks, config.block_size, config.max_model_len, config.enable_prefix_caching
    )
    return Scheduler(config, kv)


def make_engine(**fields: Any) -> Engine:
    return Engine(make_config(**fields), UNIT_COST)


def make_request(
    req_id: str, num_prompt: int, num_output: int, first_token: int = 0, arrival: float = 0.0
) -> Request:
    """A request whose prompt is ``first_token, first_token + 1, ...``."""
    return Request(
        req_id=req_id,
        prompt_token_ids=np.arange(first_token, first_token + num_prompt, dtype=np.int64),
        max_output_tokens=num_output,
        final_reason=FinishReason.LENGTH,
        output_seed=zlib.crc32(req_id.encode()) % 1000,  # hash() changes per process
        arrival_time=arrival,
        max_tokens=num_output,
    )


def step(scheduler: Scheduler, now: float = 0.0) -> tuple[list[int], list[Request]]:
    """One scheduler step by hand: tokens per running position, and the finished requests."""
    output = scheduler.schedule(now)
    update = scheduler.update_from_output(output, now)
    return output.num_scheduled_tokens.tolist(), update.finished
