"""Pseudo-text: deterministic, about four characters a token, re-encodable, prefix-stable."""

from __future__ import annotations

import numpy as np

from inference.sim import text


def test_the_same_text_always_gives_the_same_ids_and_longer_text_more_of_them() -> None:
    sentence = "The quick brown fox jumps over the lazy dog, again and again."
    assert np.array_equal(text.encode(sentence), text.encode(sentence))
    assert 10 <= len(text.encode(sentence)) <= 20  # ~4 characters a token
    assert len(text.encode(sentence * 4)) > 3 * len(text.encode(sentence))
    assert all(0 <= i < text.VOCAB_SIZE for i in text.encode(sentence * 4).tolist())


def test_outputs_re_encode_to_the_ids_they_were_sampled_as() -> None:
    ids = text.output_token_ids(seed=42, start=0, stop=200)
    assert np.array_equal(text.encode(text.decode(ids)), ids)


def test_a_text_extended_at_whitespace_keeps_its_ids_as_a_prefix() -> None:
    prompt = "<|user|>\nWhat is the capital of France?\n<|assistant|>"
    answer = text.decode(text.output_token_ids(seed=1, start=0, stop=30))
    turn_two = prompt + answer + "\n<|user|>\nAnd of Spain?\n<|assistant|>"
    head = text.encode(prompt)
    assert np.array_equal(text.encode(turn_two)[: len(head) + 30][: len(head)], head)
    assert np.array_equal(text.encode(turn_two)[len(head) : len(head) + 30], text.encode(answer))


def test_output_slices_compose_and_seeds_differ() -> None:
    whole = text.output_token_ids(seed=7, start=0, stop=50)
    parts = np.concatenate([text.output_token_ids(7, 0, 20), text.output_token_ids(7, 20, 50)])
    assert np.array_equal(whole, parts)
    assert not np.array_equal(whole, text.output_token_ids(seed=8, start=0, stop=50))


def test_logprobs_are_deterministic_and_in_range() -> None:
    values = text.token_logprobs(seed=3, start=0, stop=500)
    assert np.array_equal(values, text.token_logprobs(3, 0, 500))
    assert values.max() <= -0.01 and values.min() > -4.0
    assert values.std() > 0.5  # not a constant
