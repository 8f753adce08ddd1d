"""Deterministic pseudo-text: a tokenizer with no model behind it, and seeded output tokens.

Nothing here means anything; what matters is that it behaves like text where the engine and
its clients can tell: a prompt's token count grows with its length (about four characters a
token, like English with a BPE vocabulary), the same text always gives the same ids, and a
text that extends another keeps its ids as a prefix when it extends it at a whitespace, so a
multi-turn conversation re-sent with its previous answer hits the prefix cache. Every output
piece starts with whitespace, so an answer re-encodes to exactly the ids it was sampled as.

Output ids are a pure function of a request's seed and the position, so they need not be
stored: any slice of any request's output can be recomputed in one vectorised call.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from inference.sim.block_hash import mix64

VOCAB_SIZE = 32_000  # ids a prompt may use, as a Llama-class tokenizer has
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_PIECE = re.compile(r"\s*\S{1,4}|\s+$")  # leading whitespace, then at most four characters


def _output_vocabulary() -> tuple[str, ...]:
    """Pieces an output can use: one-to-four-letter syllable words, a few starting a line."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words = [*syllables, *(a + b for a in syllables for b in syllables)]
    pieces = [" " + word for word in words]
    pieces[::17] = ["\n" + word for word in words[::17]]
    return tuple(pieces)


OUTPUT_VOCAB: tuple[str, ...] = _output_vocabulary()
_OUTPUT_IDS = {piece: token_id for token_id, piece in enumerate(OUTPUT_VOCAB)}
_SEED_STRIDE = 0xD1B54A32D192ED03  # odd multiplier keeping request streams apart
_LOGPROB_SALT = np.uint64(0xA0761D6478BD642F)


def encode(text: str) -> np.ndarray:
    """Token ids of ``text``: output pieces map to their own ids, other pieces to a hash."""
    ids = []
    unknown_range = VOCAB_SIZE - len(OUTPUT_VOCAB)
    for piece in _PIECE.findall(text):
        token_id = _OUTPUT_IDS.get(piece)
        if token_id is None:
            token_id = len(OUTPUT_VOCAB) + zlib.crc32(piece.encode()) % unknown_range
        ids.append(token_id)
    return np.asarray(ids, dtype=np.int64)


def token_text(token_id: int) -> str:
    """The text of one output id; ids outside the output vocabulary stand for a placeholder."""
    if 0 <= token_id < len(OUTPUT_VOCAB):
        return OUTPUT_VOCAB[token_id]
    return f" <{token_id}>"


def decode(token_ids: Sequence[int] | np.ndarray) -> str:
    return "".join(token_text(int(token_id)) for token_id in token_ids)


def output_token_ids(seed: int, start: int, stop: int) -> np.ndarray:
    """Output ids at positions ``start..stop-1`` of the request seeded with ``seed``."""
    return (_stream(seed, start, stop) % np.uint64(len(OUTPUT_VOCAB))).astype(np.int64)


def token_logprobs(seed: int, start: int, stop: int) -> np.ndarray:
    """Log-probabilities of the sampled tokens at those positions: in (-4.0, -0.01]."""
    bits = mix64(_stream(seed, start, stop) ^ _LOGPROB_SALT) >> np.uint64(53)  # 11 bits
    return -0.01 - bits.astype(np.float64) * (3.99 / 2048.0)


def _stream(seed: int, start: int, stop: int) -> np.ndarray:
    positions = np.arange(start, stop, dtype=np.uint64)
    return mix64(positions + np.uint64(seed * _SEED_STRIDE % (1 << 64)))
