"""The engine's KV blocks: who holds them, which are free, which still cache a prefix.

As in vLLM's block pool, a block is either held (reference count above zero: some running
requests use it) or free. Free blocks wait in one queue ordered for eviction: the head is taken
first when new blocks are needed. A free block may still hold a full block of some prefix and
stay findable by its hash; it is then "cached free" and is evicted (its hash forgotten) only
when it is taken for new data. A prefix hit on a cached free block takes it off the queue.
Freed requests give their blocks back tail first, so the head of a prefix outlives its tail.
Block 0 is never handed out, like vLLM's null block.

Reference counts are a numpy array, so that a request's hundred blocks are touched and freed
in a few vectorised operations; the free queue is an ordered dict (O(1) removal from the
middle on a prefix hit) and block hashes live in a list beside the hash map.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np


class BlockPool:
    """Reference counts, the free queue in eviction order and the prefix-hash map."""

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is reserved), got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._ref_cnt = np.zeros(num_blocks, dtype=np.int64)
        self._block_hash: list[int | None] = [None] * num_blocks  # hash of a cached block
        self._cached: dict[int, int] = {}  # block hash -> block id holding that full block
        # Insertion order is eviction order; values are unused.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self.num_held_blocks = 0  # blocks with a reference count above zero

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def num_free_blocks(self) -> int:
        """Free blocks, cached or not: all can be handed out."""
        return len(self._free)

    def usage(self) -> float:
        """Fraction of usable blocks held, as vLLM's ``kv_cache_usage_perc`` reports it."""
        return 1.0 - self.num_free_blocks / self.num_usable_blocks

    def longest_cached_prefix(self, block_hashes: list[int]) -> list[int]:
        """Blocks holding the leading run of ``block_hashes`` that is cached."""
        get = self._cached.get
        found = []
        for block_hash in block_hashes:
            block_id = get(block_hash)
            if block_id is None:
                break
            found.append(block_id)
        return found

    def num_free_among(self, block_ids: Sequence[int]) -> int:
        """How many of these blocks are free (a hit on them takes them off the queue)."""
        if not block_ids:
            return 0
        return int(np.count_nonzero(self._ref_cnt[np.asarray(block_ids, dtype=np.int64)] == 0))

    def touch(self, block_ids: Sequence[int]) -> None:
        """Takes a reference on blocks found by a prefix hit, lifting free ones off the queue."""
        if not block_ids:
            return
        ids = np.asarray(block_ids, dtype=np.int64)
        was_free = ids[self._ref_cnt[ids] == 0].tolist()
        for block_id in was_free:
            del self._free[block_id]
        self._ref_cnt[ids] += 1
        self.num_held_blocks += len(was_free)

    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Takes blocks from the head of the free queue, evicting any prefix they cached."""
        if num_blocks > len(self._free):
            raise ValueError(f"asked for {num_blocks} blocks, {len(self._free)} free")
        if num_blocks == 0:
            return []
        popitem = self._free.popitem
        taken = [popitem(False)[0] for _ in range(num_blocks)]
        block_hashes, cached = self._block_hash, self._cached
        for block_id in taken:
            block_hash = block_hashes[block_id]
            if block_hash is not None:  # a cached free block: its prefix is forgotten
                block_hashes[block_id] = None
                del cached[block_hash]
        self._ref_cnt[taken] = 1
        self.num_held_blocks += num_blocks
        return taken

    def cache_blocks(self, block_ids: Sequence[int], block_hashes: Sequence[int]) -> None:
        """Makes full, held blocks findable by their chain hashes; the first holder wins."""
        if not self.enable_caching or not block_ids:
            return
        if len(block_ids) != len(block_hashes):
            raise ValueError(f"{len(block_ids)} blocks but {len(block_hashes)} hashes")
        hashes_of, cached = self._block_hash, self._cached
        for block_id, block_hash in zip(block_ids, block_hashes, strict=True):
            if hashes_of[block_id] is None and block_hash not in cached:
                cached[block_hash] = block_id
                hashes_of[block_id] = block_hash

    def free_blocks(self, block_ids: Sequence[int]) -> None:
        """Drops one reference per block (distinct ids); those reaching zero join the queue.

        They join the tail in the order given: pass a request's blocks tail first, so that the
        blocks freed last (the head of its prefix) are evicted last.
        """
        if not block_ids:
            return
        ids = np.asarray(block_ids, dtype=np.int64)
        counts = self._ref_cnt[ids] - 1
        if (counts < 0).any():
            raise ValueError(f"block {int(ids[counts < 0][0])} freed more often than taken")
        self._ref_cnt[ids] = counts
        released = ids[counts == 0].tolist()
        self._free.update(dict.fromkeys(released))
        self.num_held_blocks -= len(released)

    def reset_prefix_cache(self) -> bool:
        """Forgets every cached prefix, as after a weight update; False (nothing done) if any
        block is held, since a running request's blocks cannot be dropped under it (vLLM's
        rule: the reset succeeds only when every block but the null block is free)."""
        if self.num_held_blocks:
            return False
        self._cached.clear()
        self._block_hash = [None] * self.num_blocks
        return True

    def check(self) -> None:
        """Raises AssertionError if the counts, queue and hash map disagree (for tests)."""
        held = int(np.count_nonzero(self._ref_cnt[1:]))
        assert held == self.num_held_blocks, (held, self.num_held_blocks)
        assert held + len(self._free) == self.num_usable_blocks
        assert all(self._ref_cnt[block_id] == 0 for block_id in self._free)
        assert sum(block_hash is not None for block_hash in self._block_hash) == len(self._cached)
        for block_hash, block_id in self._cached.items():
            assert self._block_hash[block_id] == block_hash
