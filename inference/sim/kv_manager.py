"""Which KV blocks each request holds, prefix-cache lookups, and allocation that can say no.

This sits between the scheduler and the block pool, as vLLM's KV cache manager does, so the
scheduler only asks questions in tokens ("can this request compute n more tokens?") and never
sees block ids. ``allocate_slots`` returns None when the blocks are not there; the scheduler
answers by preempting or by leaving the request waiting.

Blocks are registered in the prefix cache at two moments. Prompt blocks are registered as the
prefill reaches them (while it is still running, so that a request with the same prompt
admitted a step later hits them, as vLLM's GRPO-style groups do). Blocks that hold output are
registered when the request lets its blocks go (finish, abort or preemption). vLLM registers
those as they fill, but a prefix lookup happens only when a request is admitted, and no
admitted request's prompt can contain another running request's unfinished output, so the two
orders give the same hits while this one costs nothing per decode step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inference.sim.block_hash import BlockHasher, ChainState
from inference.sim.block_pool import BlockPool
from inference.sim.request import Request


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """Prefix-cache lookups of newly admitted requests since the previous ``make_*`` call."""

    queries: int  # prompt tokens looked up
    hits: int  # of which found in the cache
    requests: int  # admissions that looked up


class KVCacheManager:
    """Per-request block lists over one block pool."""

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, enable_caching: bool):
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        self.hasher = BlockHasher(block_size, max_model_len)
        self.req_to_blocks: dict[str, list[int]] = {}
        self._num_registered: dict[str, int] = {}  # leading blocks of a request in the cache
        self._chains: dict[str, tuple[list[int], ChainState]] = {}  # hashes computed so far
        self._queries = self._hits = self._lookups = 0

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def usage(self) -> float:
        return self.pool.usage()

    def get_computed_blocks(self, req: Request) -> tuple[list[int], int]:
        """Longest run of cached full blocks at the start of the request's tokens.

        At least one token is always left to compute, so that the step samples from it.
        """
        if not self.enable_caching:
            return [], 0
        max_hit_tokens = (req.num_tokens - 1) // self.block_size * self.block_size
        hit_blocks = self.pool.longest_cached_prefix(self._hashes(req, max_hit_tokens))
        return hit_blocks, len(hit_blocks) * self.block_size

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        new_computed_blocks: Sequence[int] = (),
        full_sequence_must_fit: bool = False,
    ) -> list[int] | None:
        """Blocks for ``num_new_tokens`` more tokens after the computed ones, or None.

        Args:
            req: the request; ``req.num_computed_tokens`` tokens already have KV.
            num_new_tokens: tokens the step will compute for it.
            new_computed_blocks: prefix-cache hit blocks to adopt (admission only).
            full_sequence_must_fit: admission check of vLLM's default scheduler: the whole
                prompt (and output so far) must fit now, not only this step's chunk.

        Returns:
            The newly allocated blocks, or None (nothing changed) if they are not free.
        """
        blocks = self.req_to_blocks.setdefault(req.req_id, [])
        num_computed = req.num_computed_tokens + len(new_computed_blocks) * self.block_size
        num_held = len(blocks) + len(new_computed_blocks)
        num_needed = _cdiv(num_computed + num_new_tokens, self.block_size) - num_held
        if full_sequence_must_fit:
            num_needed_full = _cdiv(req.num_tokens, self.block_size) - num_held
            num_needed_check = max(num_needed, num_needed_full)
        else:
            num_needed_check = num_needed
        # A hit on a free cached block takes that block off the free queue.
        num_evictable_hits = self.pool.num_free_among(new_computed_blocks)
        if num_needed_check + num_evictable_hits > self.pool.num_free_blocks:
            if not blocks:
                del self.req_to_blocks[req.req_id]
            return None
        self.pool.touch(new_computed_blocks)
        blocks.extend(new_computed_blocks)
        if new_computed_blocks:
            self._num_registered[req.req_id] = len(new_computed_blocks)
        new_blocks = self.pool.get_new_blocks(max(num_needed, 0))
        blocks.extend(new_blocks)
        self._register(req, min(num_computed + num_new_tokens, req.num_prompt_tokens))
        return new_blocks

    def append_blocks(self, reqs: list[Request], num_blocks: list[int]) -> None:
        """Adds ``num_blocks[i]`` blocks to ``reqs[i]``, taken in that order from the free queue.

        The scheduler has checked that they are free (its batched path); one pool call for all.
        """
        new_blocks = self.pool.get_new_blocks(sum(num_blocks))
        start = 0
        for req, count in zip(reqs, num_blocks, strict=True):
            self.req_to_blocks[req.req_id].extend(new_blocks[start : start + count])
            start += count

    def register_prompt_blocks(self, req: Request, num_tokens: int) -> None:
        """Registers the prompt's full blocks among the first ``num_tokens`` tokens."""
        self._register(req, min(num_tokens, req.num_prompt_tokens))

    def free(self, req: Request) -> None:
        """Registers the request's remaining full blocks, then frees all of them tail first.

        The request's hashes are kept: a preempted request is hashed again from them when it
        is re-admitted. A request that ends must also call ``free_block_hashes``.
        """
        blocks = self.req_to_blocks.pop(req.req_id, None)
        if blocks is not None:
            self._register(req, req.num_computed_tokens, blocks)
            self.pool.free_blocks(blocks[::-1])
        self._num_registered.pop(req.req_id, None)

    def free_block_hashes(self, req: Request) -> None:
        """Forgets the hashes of a request that has ended (finished or aborted), as vLLM does.

        They are keyed by request id: kept, they would leak with every request and hand a later
        request reusing the id the hashes of another prompt (false prefix-cache hits). A request
        that was looked up while waiting and never admitted has hashes too.
        """
        self._chains.pop(req.req_id, None)

    def reset_prefix_cache(self) -> bool:
        """Empties the prefix cache if no request holds blocks; see ``BlockPool``.

        The requests' own hash chains stay: they hash tokens, not weights, and a waiting
        request re-registers its blocks from them when it runs.
        """
        return self.pool.reset_prefix_cache()

    def num_blocks_of(self, req: Request) -> int:
        return len(self.req_to_blocks.get(req.req_id, ()))

    def record_prefix_cache_stats(self, req: Request, num_hit_tokens: int) -> None:
        """Counts an admission's lookup; re-admissions after preemption do not count, as in vLLM."""
        if not self.enable_caching or req.num_preemptions > 0:
            return
        self._lookups += 1
        self._queries += req.num_tokens
        self._hits += num_hit_tokens

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        stats = PrefixCacheStats(queries=self._queries, hits=self._hits, requests=self._lookups)
        self._queries = self._hits = self._lookups = 0
        return stats

    def _register(self, req: Request, num_tokens: int, blocks: list[int] | None = None) -> None:
        if not self.enable_caching:
            return
        blocks = self.req_to_blocks[req.req_id] if blocks is None else blocks
        done = self._num_registered.get(req.req_id, 0)
        num_full = min(num_tokens // self.block_size, len(blocks))
        if num_full <= done:
            return
        hashes = self._hashes(req, num_full * self.block_size)
        self.pool.cache_blocks(blocks[done:num_full], hashes[done:num_full])
        self._num_registered[req.req_id] = num_full

    def _hashes(self, req: Request, num_tokens: int) -> list[int]:
        """Chain hashes of the request's first ``num_tokens // block_size`` blocks.

        Hashes are kept while the request lives and extended as it grows, so a request is
        hashed once over its lifetime, preemptions included.
        """
        num_blocks = num_tokens // self.block_size
        hashes, state = self._chains.get(req.req_id, ([], ChainState()))
        if len(hashes) < num_blocks:
            start = state.num_blocks * self.block_size
            # Within the prompt, hash all of it at once: admission needs the rest soon.
            stop = max(num_blocks * self.block_size, req.num_prompt_tokens)
            new_hashes, state = self.hasher.hash_blocks(req.token_ids(start, stop), state)
            hashes = hashes + new_hashes
            self._chains[req.req_id] = (hashes, state)
        return hashes[:num_blocks]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
