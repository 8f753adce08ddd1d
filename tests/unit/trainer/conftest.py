"""A minute Llama saved as a Hugging Face folder (bfloat16, like the tiny test model), and
batches in the orchestrator's ``batch.pt`` layout, for the trainer's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

VOCAB = 48
PROMPT = [1, 5, 6, 7]  # BOS and three prompt tokens


@pytest.fixture(scope="session")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("trainer-base") / "model"
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {}}}')
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def batch_tensors(
    answers: list[list[int]], advantages: list[float], rewards: list[float] | None = None
) -> dict[str, torch.Tensor]:
    """A batch of one prompt and these answers, padded on the right as the run writes it."""
    rows = [PROMPT + answer for answer in answers]
    longest = max(len(r) for r in rows)
    token_ids = torch.zeros(len(rows), longest, dtype=torch.int64)
    loss_mask = torch.zeros(len(rows), longest, dtype=torch.bool)
    logprobs = torch.zeros(len(rows), longest)
    for index, row in enumerate(rows):
        token_ids[index, : len(row)] = torch.tensor(row)
        loss_mask[index, len(PROMPT) : len(row)] = True
        logprobs[index, len(PROMPT) : len(row)] = -3.0
    return {
        "step": 1,
        "token_ids": token_ids,
        "loss_mask": loss_mask,
        "logprobs": logprobs,
        "lengths": torch.tensor([len(r) for r in rows]),
        "advantages": torch.tensor(advantages),
        "rewards": torch.tensor(rewards if rewards is not None else [0.5] * len(rows)),
        "policy_version": torch.zeros(len(rows), dtype=torch.int64),
        "turn_versions": torch.zeros(len(rows), 1, dtype=torch.int64),
    }


def write_step(output: Path, step: int, tensors: dict[str, torch.Tensor]) -> Path:
    folder = output / "steps" / f"{step:06d}"
    folder.mkdir(parents=True)
    torch.save(tensors, folder / "batch.pt")
    return folder
