"""Hash chains of full KV blocks, computed for many blocks at once with numpy.

vLLM names a full block by a hash of its tokens chained with the hash of the block before it,
so one hash stands for the entire prefix up to that block: two sequences share a cached block
only if they agree on every token before it. Here each block's tokens are folded into one
64-bit word (a weighted sum with random odd weights, then mixed), and the chain is a
polynomial over those words modulo 2**64 (numpy's unsigned arithmetic wraps there), whose
value at each block is that block's hash:

    P(i) = sum_{l <= i} w(l) * B**(i - l) = B**i * S(i),   S(i) = sum_{l <= i} w(l) * B**-l

B is odd, hence invertible modulo 2**64, so S is a plain cumulative sum: every block of a
sequence is hashed in a few vectorised calls, and a chain can be continued later from S alone
(a request's output blocks extend its prompt's chain without rehashing the prompt).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MODULUS = 1 << 64
_BASE = 0x9E3779B97F4A7C15  # odd: the 64-bit golden-ratio constant, a common hashing multiplier
_BASE_INVERSE = pow(_BASE, -1, _MODULUS)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)  # splitmix64 finaliser constants (Steele et al.)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_TOKEN_SALT = np.uint64(0x632BE59BD9B4E019)  # keeps token id 0 from weighing nothing


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise over uint64: spreads every input bit over the word."""
    x = values.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _MIX_1
    x ^= x >> np.uint64(27)
    x *= _MIX_2
    x ^= x >> np.uint64(31)
    return x


@dataclass(frozen=True, slots=True)
class ChainState:
    """Where a hash chain stopped: blocks hashed so far and the running sum S after them."""

    num_blocks: int = 0
    running_sum: int = 0


class BlockHasher:
    """Chain hashes of full blocks, for sequences of at most ``max_len`` tokens."""

    def __init__(self, block_size: int, max_len: int) -> None:
        if block_size < 1 or max_len < 1:
            raise ValueError(f"block_size and max_len must be >= 1, got {block_size}, {max_len}")
        self.block_size = block_size
        self.max_blocks = max_len // block_size
        odd = np.uint64(1)
        self._weights = mix64(np.arange(1, block_size + 1, dtype=np.uint64)) | odd
        self._powers = _power_table(_BASE, self.max_blocks)
        self._inverse_powers = _power_table(_BASE_INVERSE, self.max_blocks)

    def hash_blocks(
        self, token_ids: np.ndarray, state: ChainState = ChainState()
    ) -> tuple[list[int], ChainState]:
        """Hashes the full blocks of ``token_ids``, continuing the chain from ``state``.

        Args:
            token_ids: the tokens of blocks ``state.num_blocks`` onwards; a partial last block
                is ignored.
            state: the chain so far (default: an empty chain, i.e. the sequence's start).

        Returns:
            The hashes (Python ints, for dict keys) and the state after the last full block.
        """
        num_new = len(token_ids) // self.block_size
        if num_new == 0:
            return [], state
        first, stop = state.num_blocks, state.num_blocks + num_new
        if stop > self.max_blocks:
            raise ValueError(f"{stop} blocks exceed the longest sequence ({self.max_blocks})")
        blocks = token_ids[: num_new * self.block_size].astype(np.uint64).reshape(num_new, -1)
        words = mix64(((blocks + _TOKEN_SALT) * self._weights).sum(axis=1, dtype=np.uint64))
        sums = np.cumsum(words * self._inverse_powers[first:stop], dtype=np.uint64)
        sums += np.uint64(state.running_sum)
        # P itself is the block's name: a final mix would be a bijection, adding nothing.
        hashes = sums * self._powers[first:stop]
        return hashes.tolist(), ChainState(stop, int(sums[-1]))


def _power_table(base: int, length: int) -> np.ndarray:
    """base**0 .. base**(length-1) modulo 2**64."""
    powers = np.full(max(length, 1), base, dtype=np.uint64)
    powers[0] = 1
    return np.cumprod(powers, dtype=np.uint64)
