"""The block pool: reference counts, eviction order, prefix-hash map."""

from __future__ import annotations

import pytest

from inference.sim.block_pool import BlockPool


def test_blocks_come_from_the_head_of_the_free_queue_and_block_zero_never_does() -> None:
    pool = BlockPool(5, enable_caching=True)
    assert pool.get_new_blocks(4) == [1, 2, 3, 4]
    assert pool.num_free_blocks == 0 and pool.usage() == 1.0
    with pytest.raises(ValueError, match="asked for 1 blocks, 0 free"):
        pool.get_new_blocks(1)


def test_freed_blocks_join_the_tail_in_the_order_given() -> None:
    pool = BlockPool(5, enable_caching=True)
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(blocks[::-1])  # a request frees its tail first
    assert pool.get_new_blocks(4) == [4, 3, 2, 1]


def test_a_cached_free_block_is_found_until_it_is_taken_for_new_data() -> None:
    pool = BlockPool(3, enable_caching=True)
    first, second = pool.get_new_blocks(2)
    pool.cache_blocks([first], [111])
    pool.free_blocks([first, second])
    assert pool.longest_cached_prefix([111]) == [first]  # free but still cached
    assert pool.get_new_blocks(1) == [first]  # head of the queue: evicted
    assert pool.longest_cached_prefix([111]) == []
    pool.check()


def test_a_prefix_hit_takes_a_free_block_off_the_queue_and_counts_references() -> None:
    pool = BlockPool(4, enable_caching=True)
    block = pool.get_new_blocks(1)[0]
    pool.cache_blocks([block], [7])
    pool.free_blocks([block])
    pool.touch([block])
    pool.touch([block])
    assert pool.num_free_blocks == 2 and pool.num_held_blocks == 1
    pool.free_blocks([block])
    assert pool.num_free_blocks == 2  # one holder left
    pool.free_blocks([block])
    assert pool.num_free_blocks == 3
    with pytest.raises(ValueError, match="freed more often"):
        pool.free_blocks([block])
    pool.check()


def test_the_first_block_cached_under_a_hash_keeps_it_and_caching_can_be_off() -> None:
    pool = BlockPool(4, enable_caching=True)
    a, b = pool.get_new_blocks(2)
    pool.cache_blocks([a, b], [5, 5])
    assert pool.longest_cached_prefix([5]) == [a]
    off = BlockPool(4, enable_caching=False)
    block = off.get_new_blocks(1)[0]
    off.cache_blocks([block], [5])
    assert off.longest_cached_prefix([5]) == []
