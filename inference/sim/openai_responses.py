"""OpenAI response bodies and stream chunks for the simulator's outputs, as vLLM writes them.

A ``ChoiceText`` is the visible side of one engine request: its planned output ids, their text
(cut before the stop string that ended it, as the API does), and per-token log-probabilities.
The stop string is found as the plan found it, so the text ends where the tokens do.
Streaming sends slices of it as the engine samples tokens; the whole response sends all of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inference.sim import text
from inference.sim.request import FinishReason, Request
from inference.sim.sampling import find_stop

ALTERNATIVE_STRIDE = 97  # spacing of the made-up alternative ids in top_logprobs
ALTERNATIVE_GAP = 0.75  # each alternative is this much less likely (nats) than the one before


class ChoiceText:
    """Text, offsets and log-probabilities of one choice's planned output."""

    def __init__(self, req: Request, stop: tuple[str, ...], min_tokens: int) -> None:
        """The planned output of ``req``, its text cut where the stop string that ended it begins.

        ``stop`` and ``min_tokens`` are the request's: a stop string within the first
        ``min_tokens`` tokens did not end the output, so it must not cut the text either.
        """
        self.req = req
        self.token_ids = text.output_token_ids(req.output_seed, 0, req.max_output_tokens).tolist()
        pieces = [text.token_text(token_id) for token_id in self.token_ids]
        self.pieces = pieces
        self.ends = np.cumsum([len(piece) for piece in pieces]).tolist()
        full = "".join(pieces)
        if req.final_reason is FinishReason.STOP and stop:
            match = find_stop(pieces, stop, min_tokens)
            if match is not None:
                full = full[: match.start]
        self.text = full
        self.logprobs = text.token_logprobs(req.output_seed, 0, req.max_output_tokens).tolist()

    def offset(self, num_tokens: int) -> int:
        """Characters of visible text once ``num_tokens`` tokens are out."""
        return 0 if num_tokens == 0 else min(self.ends[num_tokens - 1], len(self.text))

    def text_between(self, start: int, stop: int) -> str:
        return self.text[self.offset(start) : self.offset(stop)]

    def completion_logprobs(self, start: int, stop: int, top: int) -> dict[str, Any]:
        """The /v1/completions ``logprobs`` object for tokens start..stop-1."""
        return {
            "text_offset": [self.offset(i) for i in range(start, stop)],
            "token_logprobs": self.logprobs[start:stop],
            "tokens": self.pieces[start:stop],
            "top_logprobs": [dict(self._top(i, max(top, 1))) for i in range(start, stop)],
        }

    def chat_logprobs(self, start: int, stop: int, top: int) -> dict[str, Any]:
        """The chat ``logprobs`` object for tokens start..stop-1."""
        return {
            "content": [
                {
                    **_entry(self.pieces[i], self.logprobs[i]),
                    "top_logprobs": [_entry(piece, value) for piece, value in self._top(i, top)],
                }
                for i in range(start, stop)
            ]
        }

    def _top(self, index: int, top: int) -> list[tuple[str, float]]:
        """``top`` entries: the sampled token, then made-up alternatives, each less likely."""
        if top == 0:
            return []
        token_id, logprob = self.token_ids[index], self.logprobs[index]
        entries = [(self.pieces[index], logprob)]
        for rank in range(1, top):
            other = (token_id + rank * ALTERNATIVE_STRIDE) % len(text.OUTPUT_VOCAB)
            entries.append((text.token_text(other), logprob - rank * ALTERNATIVE_GAP))
        return entries


def _entry(piece: str, logprob: float) -> dict[str, Any]:
    return {"token": piece, "logprob": logprob, "bytes": list(piece.encode())}


def usage(num_prompt_tokens: int, num_completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": num_prompt_tokens,
        "total_tokens": num_prompt_tokens + num_completion_tokens,
        "completion_tokens": num_completion_tokens,
    }


def completion_choice(
    index: int,
    choice: ChoiceText,
    start: int,
    stop: int,
    logprobs: int | None,
    finished: bool,
    token_ids: bool = False,
) -> dict[str, Any]:
    """One entry of ``choices`` for /v1/completions, whole or as a stream chunk's delta. With
    ``token_ids`` (vLLM's ``return_token_ids``) it carries the output's ids from ``start`` to
    ``stop``, and the prompt's ids with the first of them, as vLLM does."""
    entry: dict[str, Any] = {
        "index": index,
        "text": choice.text_between(start, stop),
        "logprobs": None if logprobs is None else choice.completion_logprobs(start, stop, logprobs),
        "finish_reason": _finish_reason(choice) if finished else None,
        "stop_reason": None,
    }
    if token_ids:
        entry["token_ids"] = choice.token_ids[start:stop]
        entry["prompt_token_ids"] = choice.req.prompt_token_ids.tolist() if start == 0 else None
    return entry


def chat_choice(index: int, choice: ChoiceText, logprobs: int | None) -> dict[str, Any]:
    num_tokens = choice.req.num_output_tokens
    return {
        "index": index,
        "message": {"role": "assistant", "content": choice.text_between(0, num_tokens)},
        "logprobs": None if logprobs is None else choice.chat_logprobs(0, num_tokens, logprobs),
        "finish_reason": _finish_reason(choice),
        "stop_reason": None,
    }


def chat_delta(
    index: int,
    choice: ChoiceText,
    start: int,
    stop: int,
    logprobs: int | None,
    finished: bool,
    first: bool,
) -> dict[str, Any]:
    """One entry of a chat stream chunk's ``choices``; the first one carries the role."""
    delta: dict[str, Any] = {"content": choice.text_between(start, stop)}
    if first:
        delta = {"role": "assistant", **delta}
    return {
        "index": index,
        "delta": delta,
        "logprobs": None if logprobs is None else choice.chat_logprobs(start, stop, logprobs),
        "finish_reason": _finish_reason(choice) if finished else None,
    }


def envelope(
    kind: str, resp_id: str, created: int, model: str, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    """The fields around ``choices``; ``kind`` is the ``object`` value."""
    return {"id": resp_id, "object": kind, "created": created, "model": model, "choices": choices}


def error_body(status: int, message: str, error_type: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": status}}


def models_body(model: str, max_model_len: int, created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": max_model_len,
            }
        ],
    }


def _finish_reason(choice: ChoiceText) -> str:
    reason = choice.req.finish_reason or choice.req.final_reason
    return reason.value


def tokenize_body(token_ids: list[int], max_model_len: int) -> dict[str, Any]:
    return {"count": len(token_ids), "max_model_len": max_model_len, "tokens": token_ids}
