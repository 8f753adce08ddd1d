"""Engine shape: validation with clear messages, sizing from a token count."""

from __future__ import annotations

import pytest

from inference.sim.config import EngineConfig


def test_kv_tokens_round_down_to_blocks_plus_the_null_block() -> None:
    config = EngineConfig.from_kv_tokens(65_536 + 10, 16, max_model_len=4096)
    assert config.num_gpu_blocks == 4097
    assert (config.num_usable_blocks, config.kv_capacity_tokens) == (4096, 65_536)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"block_size": 0}, "block_size must be in 1..4096"),
        ({"num_gpu_blocks": 1}, "num_gpu_blocks must be >= 2"),
        ({"max_num_seqs": 0}, "max_num_seqs must be >= 1"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens must be >= 1"),
        ({"max_model_len": 100_000}, "must fit in the KV cache"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"model_name": ""}, "model_name must not be empty"),
    ],
)
def test_bad_shapes_are_refused_with_the_valid_range(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**fields)


def test_kv_tokens_below_one_block_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one block"):
        EngineConfig.from_kv_tokens(8, 16)
