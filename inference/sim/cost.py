"""How long one engine step takes, from what the scheduler put in it.

A forward pass costs a fixed overhead (launches, scheduling, reading the weights once), a part
that grows with the tokens in the batch (dense matmuls), a part per sequence (sampling,
output handling), a part that grows with the context the batch attends to (reading KV), and
the attention of prefill chunks: each token of a chunk attends every token before it, so a
chunk of c tokens after p computed ones costs c x p + c (c + 1) / 2 token pairs. The context
term is what makes a crowded engine slow down as its requests' contexts grow, the first what
makes small batches wasteful, and the attention term what makes recomputing a long preempted
context dear (quadratic in its length, where the token term is linear): together they shape
the throughput-versus-concurrency curve that Pacer climbs. A decode token's attention is its
KV read, already the context term, so only chunks of more than one token count pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class StepCost:
    """Linear step-time model; every coefficient is seconds per unit, all must be >= 0."""

    step_overhead_s: float  # per step, whatever is in it
    per_batched_token_s: float  # per token computed in the step (prefill chunk or decode)
    per_seq_s: float  # per sequence scheduled in the step
    per_context_token_s: float  # per token of KV read: each scheduled sequence reads its context
    per_attention_pair_s: float = 0.0  # per (chunk token, token it attends) of a prefill chunk

    def __post_init__(self) -> None:
        for name in (
            "step_overhead_s",
            "per_batched_token_s",
            "per_seq_s",
            "per_context_token_s",
            "per_attention_pair_s",
        ):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ValueError(f"{name} must be >= 0 seconds, got {value}")
        if self.step_overhead_s + self.per_batched_token_s <= 0.0:
            raise ValueError("step_overhead_s + per_batched_token_s must be > 0: steps take time")

    def step_time(
        self,
        num_batched_tokens: int,
        num_seqs: int,
        num_context_tokens: int,
        num_attention_pairs: int = 0,
    ) -> float:
        """Seconds of one step.

        Args:
            num_batched_tokens: tokens computed in the step, summed over sequences.
            num_seqs: sequences scheduled in the step.
            num_context_tokens: KV tokens read, i.e. each sequence's context after the step.
            num_attention_pairs: token pairs the step's prefill chunks attend (``chunk_pairs``).
        """
        return (
            self.step_overhead_s
            + self.per_batched_token_s * num_batched_tokens
            + self.per_seq_s * num_seqs
            + self.per_context_token_s * num_context_tokens
            + self.per_attention_pair_s * num_attention_pairs
        )


def chunk_pairs(chunk: np.ndarray, computed: np.ndarray) -> int:
    """Token pairs the prefill chunks attend: ``chunk[i]`` tokens after ``computed[i]`` ones,
    each attending every token up to itself. Decode tokens (chunks of one) count none."""
    prefill = chunk > 1
    if not prefill.any():
        return 0
    c, p = chunk[prefill], computed[prefill]
    return int((c * p).sum() + (c * (c + 1) // 2).sum())
