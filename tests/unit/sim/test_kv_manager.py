"""The KV manager: allocation that can say no, prefix lookups, registration of blocks."""

from __future__ import annotations

from inference.sim.kv_manager import KVCacheManager
from tests.unit.sim.helpers import make_request


def make_kv(num_blocks: int = 9) -> KVCacheManager:
    return KVCacheManager(num_blocks, block_size=4, max_model_len=64, enable_caching=True)


def test_allocate_slots_returns_none_and_changes_nothing_when_blocks_are_short() -> None:
    kv = make_kv()  # 8 usable blocks
    big = make_request("big", num_prompt=24, num_output=4)
    assert kv.allocate_slots(big, 24) is not None  # 6 blocks
    other = make_request("other", num_prompt=12, num_output=4, first_token=100)
    assert kv.allocate_slots(other, 12) is None  # needs 3, 2 free
    assert kv.num_free_blocks == 2 and kv.num_blocks_of(other) == 0
    assert kv.allocate_slots(other, 8) is not None  # a chunk that fits
    assert kv.num_free_blocks == 0


def test_full_sequence_must_fit_checks_the_whole_prompt_not_the_chunk() -> None:
    kv = make_kv()
    req = make_request("r", num_prompt=40, num_output=1)  # 10 blocks > 8
    assert kv.allocate_slots(req, 4, full_sequence_must_fit=True) is None
    assert kv.allocate_slots(req, 4) is not None


def test_a_finished_request_leaves_its_prompt_and_output_blocks_findable() -> None:
    kv = make_kv()
    req = make_request("r", num_prompt=8, num_output=6)
    kv.allocate_slots(req, 8)
    req.set_counters(13, 6)  # prompt and 5 outputs computed: 3 full blocks
    kv.append_blocks([req], [2])
    kv.free(req)
    follow_up = make_request("follow", num_prompt=14, num_output=1)
    follow_up.prompt_token_ids = req.token_ids(0, 14)  # the conversation so far, re-sent
    blocks, num_hit_tokens = kv.get_computed_blocks(follow_up)
    assert num_hit_tokens == 12 and len(blocks) == 3


def test_a_hit_on_free_cached_blocks_counts_them_against_the_free_blocks() -> None:
    kv = make_kv(num_blocks=5)  # 4 usable
    first = make_request("first", num_prompt=8, num_output=1)
    kv.allocate_slots(first, 8)
    first.set_counters(8, 1)
    kv.free(first)  # 2 cached free blocks, 4 free in all
    second = make_request("second", num_prompt=17, num_output=1)
    hits, num_hit_tokens = kv.get_computed_blocks(second)
    assert num_hit_tokens == 8
    # 5 blocks in all: 2 from the hit (taken off the free queue) and 3 new: 5 > 4 free.
    assert kv.allocate_slots(second, 9, hits, full_sequence_must_fit=True) is None
    assert kv.num_free_blocks == 4
    second.prompt_token_ids = second.prompt_token_ids[:16]
    assert kv.allocate_slots(second, 8, hits, full_sequence_must_fit=True) == [3, 4]
    assert kv.num_free_blocks == 0
    kv.pool.check()


def test_prefix_stats_count_first_admissions_only_and_reset_when_made() -> None:
    kv = make_kv()
    req = make_request("r", num_prompt=10, num_output=1)
    kv.record_prefix_cache_stats(req, 8)
    req.num_preemptions = 1
    kv.record_prefix_cache_stats(req, 8)
    stats = kv.make_prefix_cache_stats()
    assert (stats.queries, stats.hits, stats.requests) == (10, 8, 1)
    assert kv.make_prefix_cache_stats().queries == 0
