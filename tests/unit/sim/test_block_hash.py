"""Hash chains: a block's hash stands for the whole prefix up to it."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim.block_hash import BlockHasher, ChainState


def test_equal_prefixes_give_equal_hashes_and_a_change_moves_every_later_one() -> None:
    hasher = BlockHasher(block_size=4, max_len=64)
    tokens = np.arange(20)
    changed = tokens.copy()
    changed[9] = 99  # in the third block
    original, _ = hasher.hash_blocks(tokens)
    altered, _ = hasher.hash_blocks(changed)
    assert len(original) == 5
    assert original[:2] == altered[:2]
    assert all(a != b for a, b in zip(original[2:], altered[2:], strict=True))


def test_the_same_block_content_after_different_prefixes_hashes_differently() -> None:
    hasher = BlockHasher(block_size=2, max_len=16)
    first, _ = hasher.hash_blocks(np.array([1, 2, 5, 6]))
    second, _ = hasher.hash_blocks(np.array([3, 4, 5, 6]))
    assert first[1] != second[1]


def test_a_continued_chain_equals_hashing_the_whole_sequence() -> None:
    hasher = BlockHasher(block_size=4, max_len=64)
    tokens = np.random.default_rng(0).integers(0, 1000, size=30)
    whole, whole_state = hasher.hash_blocks(tokens)
    head, state = hasher.hash_blocks(tokens[:12])
    tail, tail_state = hasher.hash_blocks(tokens[12:], state)
    assert head + tail == whole
    assert tail_state == whole_state == ChainState(7, whole_state.running_sum)


def test_partial_blocks_are_ignored_and_overlong_sequences_refused() -> None:
    hasher = BlockHasher(block_size=4, max_len=8)
    assert hasher.hash_blocks(np.arange(3)) == ([], ChainState())
    with pytest.raises(ValueError, match="exceed"):
        hasher.hash_blocks(np.arange(12))
