"""Shape of one simulated engine: KV blocks, batch limits, model length, seed.

The names follow vLLM's own configuration (``block_size``, ``num_gpu_blocks``,
``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``) so that a simulator and a real
engine given the same numbers can be compared side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Capacity and limits of one engine; validated on construction."""

    model_name: str = "sim-model"  # served model name, as /v1/models and metric labels show it
    block_size: int = 16  # tokens per KV block (vLLM's GPU default; its CPU backend uses 128)
    num_gpu_blocks: int = 4096  # KV blocks including vLLM's reserved null block
    max_num_seqs: int = 256  # vLLM's default cap on requests in the running batch
    max_num_batched_tokens: int = 8192  # token budget of one step (vLLM's chunked-prefill default)
    max_model_len: int = 8192  # longest prompt plus completion a request may ask for
    enable_prefix_caching: bool = True  # vLLM v1 enables automatic prefix caching by default
    seed: int = 0  # seeds output lengths and token ids; same seed and load, same run

    def __post_init__(self) -> None:
        _require(bool(self.model_name), "model_name must not be empty")
        _require(
            1 <= self.block_size <= 4096, f"block_size must be in 1..4096, got {self.block_size}"
        )
        _require(
            self.num_gpu_blocks >= 2,
            f"num_gpu_blocks must be >= 2 (one is the null block), got {self.num_gpu_blocks}",
        )
        _require(self.max_num_seqs >= 1, f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        _require(
            self.max_num_batched_tokens >= 1,
            f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}",
        )
        _require(self.max_model_len >= 2, f"max_model_len must be >= 2, got {self.max_model_len}")
        _require(
            self.max_model_len <= self.kv_capacity_tokens,
            f"max_model_len ({self.max_model_len}) must fit in the KV cache "
            f"({self.kv_capacity_tokens} tokens = ({self.num_gpu_blocks} - 1) blocks x "
            f"{self.block_size}); lower it or add blocks",
        )
        _require(self.seed >= 0, f"seed must be >= 0, got {self.seed}")

    @classmethod
    def from_kv_tokens(cls, kv_tokens: int, block_size: int, **fields: Any) -> EngineConfig:
        """Sizes the cache from a token count, rounding down to whole blocks plus the null block."""
        _require(
            kv_tokens >= block_size,
            f"kv_tokens must be at least one block ({block_size}), got {kv_tokens}",
        )
        return cls(block_size=block_size, num_gpu_blocks=kv_tokens // block_size + 1, **fields)

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can hold KV: vLLM keeps block 0 as a null block."""
        return self.num_gpu_blocks - 1

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_usable_blocks * self.block_size


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
