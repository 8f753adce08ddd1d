"""The policy-gradient loss on hand-made logits: which way its gradient points, that masked
positions add nothing, that zero advantages move nothing, and what the clip takes away."""

from __future__ import annotations

import math

import pytest
import torch

from pacer_trainer.loss import policy_loss, token_logprobs

VOCAB = 5


def logits_for(samples: int, positions: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(samples, positions, VOCAB, generator=generator).requires_grad_()


def grad_of(
    logits: torch.Tensor,
    targets: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    **clip: object,
) -> tuple[float, torch.Tensor]:
    logits.grad = None
    parts = policy_loss(token_logprobs(logits, targets), advantages, mask, **clip)  # type: ignore[arg-type]
    parts.loss.backward()
    assert logits.grad is not None
    return parts.loss.item(), logits.grad.clone()


def test_a_positive_advantage_makes_the_sampled_token_likelier_and_a_negative_one_rarer() -> None:
    logits = logits_for(2, 3)
    targets = torch.tensor([[1, 2, 3], [1, 2, 3]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    _, grad = grad_of(logits, targets, torch.tensor([1.0, -1.0]), mask)
    sampled = grad.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    # Gradient descent moves a logit against its gradient: up for the rewarded sample's
    # tokens, down for the other's.
    assert (sampled[0] < 0).all()
    assert (sampled[1] > 0).all()
    # One SGD step on the logits does what the signs say.
    with torch.no_grad():
        before = token_logprobs(logits, targets)
        after = token_logprobs(logits - 0.5 * grad, targets)
    assert (after[0] > before[0]).all() and (after[1] < before[1]).all()


def test_the_loss_is_the_token_mean_of_minus_advantage_times_logprob() -> None:
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    parts = policy_loss(logprobs, torch.tensor([2.0, -1.0]), mask)
    # (2 * 1 + 2 * 2 - 1 * 0.5) / 3 sampled tokens
    assert parts.loss.item() == pytest.approx((2.0 + 4.0 - 0.5) / 3)
    assert parts.tokens == 3


@pytest.mark.parametrize("clip", [None, 0.2])
def test_masked_positions_contribute_nothing(clip: float | None) -> None:
    targets = torch.tensor([[1, 2, 3, 4], [0, 1, 2, 3]])
    mask = torch.tensor([[False, True, True, False], [False, False, True, True]])
    advantages = torch.tensor([0.7, -1.3])
    old = torch.full((2, 4), -1.5)
    old[~mask] = float("nan")  # what lies outside the mask is never read
    options = {"clip": clip, "old_logprobs": old} if clip else {}
    first = logits_for(2, 4, seed=1)
    loss, grad = grad_of(first, targets, advantages, mask, **options)
    # Other logits and other targets wherever the mask is off: the same loss, the same
    # gradient where it is on, and none at all where it is off.
    second = logits_for(2, 4, seed=2)
    with torch.no_grad():
        second[mask] = first[mask]
    other_targets = torch.where(mask, targets, (targets + 1) % VOCAB)
    loss_again, grad_again = grad_of(second, other_targets, advantages, mask, **options)
    assert loss_again == pytest.approx(loss)
    assert torch.allclose(grad_again[mask], grad[mask])
    assert (grad[~mask] == 0).all() and (grad_again[~mask] == 0).all()


@pytest.mark.parametrize("clip", [None, 0.2])
def test_zero_advantages_give_a_zero_loss_and_no_gradient(clip: float | None) -> None:
    logits = logits_for(3, 4)
    targets = torch.randint(0, VOCAB, (3, 4), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(3, 4, dtype=torch.bool)
    options = {"clip": clip, "old_logprobs": torch.full((3, 4), -2.0)} if clip else {}
    loss, grad = grad_of(logits, targets, torch.zeros(3), mask, **options)
    assert loss == 0.0
    assert (grad == 0).all()


def test_no_sampled_token_is_a_zero_loss_not_a_division_by_zero() -> None:
    nothing = torch.zeros(2, 3, dtype=torch.bool)
    parts = policy_loss(torch.full((2, 3), -1.0), torch.ones(2), nothing)
    assert parts.loss.item() == 0.0 and parts.tokens == 0


def test_on_fresh_samples_the_clipped_ratio_has_the_plain_gradient() -> None:
    logits = logits_for(2, 3, seed=4)
    targets = torch.tensor([[0, 1, 2], [3, 4, 0]])
    mask = torch.tensor([[True, True, True], [False, True, True]])
    advantages = torch.tensor([1.5, -0.5])
    fresh = token_logprobs(logits, targets).detach()  # as the sampler saw them
    _, plain = grad_of(logits, targets, advantages, mask)
    _, clipped = grad_of(logits, targets, advantages, mask, clip=0.2, old_logprobs=fresh)
    assert torch.allclose(plain, clipped, atol=1e-6)


def test_a_ratio_past_the_clip_in_the_advantages_direction_gives_no_gradient() -> None:
    logits = logits_for(1, 2, seed=5)
    targets = torch.tensor([[1, 2]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    now = token_logprobs(logits, targets).detach()
    # Token 0 has become twice as likely since it was sampled (ratio 2 > 1.2), token 1 no
    # likelier: with a positive advantage, only token 1 is still pushed up.
    old = now - torch.tensor([[math.log(2.0), 0.0]])
    loss, grad = grad_of(logits, targets, torch.tensor([1.0]), mask, clip=0.2, old_logprobs=old)
    assert (grad[0, 0] == 0).all()
    assert grad[0, 1, 2] < 0
    parts = policy_loss(now, torch.tensor([1.0]), mask, clip=0.2, old_logprobs=old)
    assert parts.clipped == pytest.approx(0.5)
    assert parts.ratio_mean == pytest.approx(1.5)
    assert loss == pytest.approx(-(1.2 + 1.0) / 2)


def test_a_clip_needs_the_samplers_logprobs_and_a_sane_range() -> None:
    logprobs, mask = torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(logprobs, torch.ones(1), mask, clip=0.2)
    with pytest.raises(ValueError, match="clip must be in"):
        policy_loss(logprobs, torch.ones(1), mask, clip=1.5, old_logprobs=logprobs)
