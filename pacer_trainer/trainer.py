"""One optimizer step per batch: the model, its optimizer and the loss wired together.

Plain torch on a model already in memory (``model_files`` loads and saves it): the same step
runs under the command line, in a test and in a notebook. The model is trained in float32
whatever the dtype its files are in; AdamW's small updates vanish in bfloat16's 8 bits of
mantissa, so the weights are kept whole here and rounded only when saved for the engines.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pacer_trainer.batch import TrainBatch
from pacer_trainer.loss import policy_loss, token_logprobs

# A tiny random model learns a syllable reward in tens of steps at this rate; a large
# pretrained one would take 1e-6 to 1e-5.
DEFAULT_LR = 1e-2
# Gradients clipped to this norm: a batch of a few rewarded answers must not throw the
# weights off in one step.
MAX_GRAD_NORM = 1.0


@dataclass(frozen=True)
class StepStats:
    stepped: bool  # False: nothing to learn from (every advantage 0), the weights unchanged
    loss: float
    tokens: int
    reward_mean: float
    clipped: float
    ratio_mean: float
    grad_norm: float


class PolicyTrainer:
    def __init__(
        self,
        model: torch.nn.Module,
        *,
        lr: float = DEFAULT_LR,
        clip: float | None = None,
        temperature: float = 1.0,
        max_grad_norm: float = MAX_GRAD_NORM,
    ) -> None:
        """``model``: a causal language model called as Hugging Face's are
        (``model(input_ids=...).logits``). ``temperature``: the sampling temperature of the
        run's environments, so that the log-probabilities are those of the distribution the
        engine sampled from."""
        if lr <= 0:
            raise ValueError(f"the learning rate must be above 0, got {lr}")
        if temperature <= 0:
            raise ValueError(f"the temperature must be above 0, got {temperature}")
        self.model = model
        self.clip = clip
        self.temperature = temperature
        self.max_grad_norm = max_grad_norm
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.0)

    def logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """The model's log-probability of each target token, with gradients."""
        logits = self.model(input_ids=batch.inputs).logits
        return token_logprobs(logits / self.temperature, batch.targets)

    def step(self, batch: TrainBatch) -> StepStats:
        """One optimizer step on ``batch``; a batch whose advantages are all 0 (every group
        agreed) is no step at all, so AdamW's moments are not moved by nothing."""
        self.model.train()
        reward_mean = float(batch.rewards.mean()) if batch.rewards.numel() else 0.0
        if batch.tokens == 0 or not bool(batch.advantages.any()):
            return StepStats(False, 0.0, batch.tokens, reward_mean, 0.0, 1.0, 0.0)
        parts = policy_loss(
            self.logprobs(batch),
            batch.advantages,
            batch.mask,
            old_logprobs=batch.old_logprobs,
            clip=self.clip,
        )
        self.optimizer.zero_grad(set_to_none=True)
        parts.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        return StepStats(
            stepped=True,
            loss=parts.loss.item(),
            tokens=parts.tokens,
            reward_mean=reward_mean,
            clipped=parts.clipped,
            ratio_mean=parts.ratio_mean,
            grad_norm=float(norm),
        )
