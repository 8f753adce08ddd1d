"""A step's ``batch.pt`` as the tensors a loss needs, next-token aligned.

The orchestrator writes each sample as one row of token ids (prompt, answers, observations),
with ``loss_mask`` true on the tokens the engine sampled and ``logprobs`` holding the
sampler's log-probability of each of them, padded on the right. A causal language model's
logits at position ``t`` score the token at ``t + 1``, so the model reads ``token_ids[:, :-1]``
and every per-token tensor is taken from position 1 on. Right padding needs no attention mask
for that: a causal model's outputs at a position depend only on the positions before it, and
the padded positions are outside the mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

REQUIRED = ("token_ids", "loss_mask", "logprobs", "advantages", "rewards")


class BatchError(ValueError):
    """The file is not a batch this trainer can train on; the message says why."""


@dataclass(frozen=True)
class TrainBatch:
    """One step's samples, ready for a forward pass: ``[samples, positions]`` tensors but
    ``advantages`` and ``rewards``, which are per sample."""

    inputs: torch.Tensor  # int64, what the model reads
    targets: torch.Tensor  # int64, the token each position's logits must score
    mask: torch.Tensor  # bool, true where ``targets`` was sampled (and is trained on)
    old_logprobs: torch.Tensor  # float32, the sampler's log-probability of ``targets``
    advantages: torch.Tensor  # float32 [samples], the group-normalised advantage
    rewards: torch.Tensor  # float32 [samples]

    @property
    def tokens(self) -> int:
        """Sampled tokens: what the loss averages over."""
        return int(self.mask.sum())


def from_tensors(tensors: dict[str, object]) -> TrainBatch:
    """The aligned batch, or BatchError naming what is missing or inconsistent."""
    missing = [key for key in REQUIRED if not isinstance(tensors.get(key), torch.Tensor)]
    if missing:
        raise BatchError(f"no tensor {', '.join(missing)} in the batch")
    token_ids, mask, logprobs = (tensors[key] for key in ("token_ids", "loss_mask", "logprobs"))
    advantages, rewards = tensors["advantages"], tensors["rewards"]
    assert isinstance(token_ids, torch.Tensor) and isinstance(mask, torch.Tensor)
    assert isinstance(logprobs, torch.Tensor) and isinstance(advantages, torch.Tensor)
    assert isinstance(rewards, torch.Tensor)
    if token_ids.dim() != 2 or token_ids.shape[1] < 2:
        shape = tuple(token_ids.shape)
        raise BatchError(f"token_ids must be [samples, 2 positions or more], got {shape}")
    if mask.shape != token_ids.shape or logprobs.shape != token_ids.shape:
        raise BatchError(
            f"token_ids {tuple(token_ids.shape)}, loss_mask {tuple(mask.shape)} and "
            f"logprobs {tuple(logprobs.shape)} must have one shape"
        )
    samples = token_ids.shape[0]
    if advantages.shape != (samples,) or rewards.shape != (samples,):
        raise BatchError(f"advantages and rewards must have one value per sample ({samples})")
    if bool(mask[:, 0].any()):
        raise BatchError("a sample's first token is in the loss mask: nothing came before it")
    return TrainBatch(
        inputs=token_ids[:, :-1].long(),
        targets=token_ids[:, 1:].long(),
        mask=mask[:, 1:].bool(),
        old_logprobs=logprobs[:, 1:].float(),
        advantages=advantages.float(),
        rewards=rewards.float(),
    )


def load(path: Path) -> TrainBatch:
    """``batch.pt`` read (tensors only: ``weights_only``, so a file cannot run code) and
    aligned."""
    try:
        tensors = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise BatchError(f"{path} does not exist") from None
    except Exception as unreadable:  # torch raises several kinds for a damaged file
        raise BatchError(f"{path} cannot be read: {unreadable}") from None
    if not isinstance(tensors, dict):
        raise BatchError(f"{path} holds {type(tensors).__name__}, not a batch's tensors")
    return from_tensors(tensors)
