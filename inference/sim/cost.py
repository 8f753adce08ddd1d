"""How long one engine step takes, from what the scheduler put in it.

A forward pass costs a fixed overhead (launches, scheduling, reading the weights once), a part
that grows with the tokens in the batch (dense matmuls), a part per sequence (sampling,
output handling) and a part that grows with the context the batch attends to (reading KV).
The last term is what makes a crowded engine slow down as its requests' contexts grow, and the
first is what makes small batches wasteful: together they shape the throughput-versus-
concurrency curve that Pacer climbs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepCost:
    """Linear step-time model; every coefficient is seconds per unit, all must be >= 0."""

    step_overhead_s: float  # per step, whatever is in it
    per_batched_token_s: float  # per token computed in the step (prefill chunk or decode)
    per_seq_s: float  # per sequence scheduled in the step
    per_context_token_s: float  # per token of KV read: each scheduled sequence reads its context

    def __post_init__(self) -> None:
        for name in ("step_overhead_s", "per_batched_token_s", "per_seq_s", "per_context_token_s"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ValueError(f"{name} must be >= 0 seconds, got {value}")
        if self.step_overhead_s + self.per_batched_token_s <= 0.0:
            raise ValueError("step_overhead_s + per_batched_token_s must be > 0: steps take time")

    def step_time(self, num_batched_tokens: int, num_seqs: int, num_context_tokens: int) -> float:
        """Seconds of one step.

        Args:
            num_batched_tokens: tokens computed in the step, summed over sequences.
            num_seqs: sequences scheduled in the step.
            num_context_tokens: KV tokens read, i.e. each sequence's context after the step.
        """
        return (
            self.step_overhead_s
            + self.per_batched_token_s * num_batched_tokens
            + self.per_seq_s * num_seqs
            + self.per_context_token_s * num_context_tokens
        )
