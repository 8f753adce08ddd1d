"""OpenAI completion and chat-completion request bodies, read the way vLLM reads them.

Fields that shape the output (prompt or messages, ``max_tokens``, ``stop``, ``n``, ``seed``,
``logprobs``, ``stream``, vLLM's ``ignore_eos`` and ``min_tokens``, structured-output fields)
are honoured; sampling knobs with no meaning without a model (``temperature``, ``top_p``...)
are accepted and ignored, as a client sends them anyway. One extension: ``sim_length``
(``kind:mean[:spread]``) gives the request its own end-of-sequence length distribution.
Anything malformed raises ``ApiError`` with the message the client gets back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference.sim import text
from inference.sim.sampling import LengthDistribution, RequestError, SamplingParams

MAX_N = 128  # choices per request; vLLM bounds n too
MAX_LOGPROBS = 20  # top alternatives per token, as vLLM's default max_logprobs
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's (and vLLM's) default for /v1/completions
ASSISTANT_MARKER = "<|assistant|>"  # the generation prompt: answers follow it directly
STRUCTURED_FIELDS = (
    "response_format",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "structured_outputs",
)


class ApiError(Exception):
    """A request refused with an HTTP status and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, error_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A parsed request: what to feed the engine and how to answer."""

    chat: bool  # /v1/chat/completions (else /v1/completions)
    prompt_token_ids: np.ndarray
    params: SamplingParams
    n: int  # choices, each its own engine request sharing the prompt
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with token counts
    logprobs: int | None  # alternatives per token; None: no logprobs at all
    return_token_ids: bool = False  # vLLM >= 0.10.2: the prompt's and the output's ids too


def parse_completion(body: Any, model_name: str) -> GenerationRequest:
    body = _object(body)
    _check_model(body, model_name)
    if body.get("echo"):
        raise ApiError(400, "echo is not supported by the engine simulator")
    prompt = _prompt_ids(body.get("prompt"))
    logprobs = _optional_int(body, "logprobs", 0, MAX_LOGPROBS)
    return _request(body, False, prompt, logprobs, COMPLETION_DEFAULT_MAX_TOKENS)


def parse_chat(body: Any, model_name: str) -> GenerationRequest:
    body = _object(body)
    _check_model(body, model_name)
    prompt = text.encode(chat_prompt(body.get("messages")))
    logprobs = None
    if body.get("logprobs"):
        logprobs = _optional_int(body, "top_logprobs", 0, MAX_LOGPROBS) or 0
    return _request(body, True, prompt, logprobs, None)


def chat_prompt(messages: Any) -> str:
    """The chat template: each turn after its role's marker, then the assistant's marker.

    An assistant turn is rendered as generation saw it: its marker, then the answer verbatim,
    as a real template's assistant turn starts with its generation prompt. Every answer
    starts with whitespace, so a conversation re-sent with its answers keeps the earlier
    prompt and the answer's sampled ids as a prefix and hits the prefix cache on both; a
    newline after the marker would merge with the answer's first piece into another token.
    """
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    turns = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, "each message must be an object with a string role")
        role, content = message["role"], _content_text(message.get("content"))
        marker = ASSISTANT_MARKER if role == "assistant" else f"<|{role}|>\n"
        turns.append(f"{marker}{content}\n")
    return "".join(turns) + ASSISTANT_MARKER


def _request(
    body: Mapping[str, Any],
    chat: bool,
    prompt: np.ndarray,
    logprobs: int | None,
    default_max_tokens: int | None,
) -> GenerationRequest:
    max_tokens = _optional_int(body, "max_completion_tokens" if chat else "max_tokens", 1, None)
    if chat and max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", 1, None)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ApiError(400, "stream_options must be an object")
    try:
        params = SamplingParams(
            max_tokens=default_max_tokens if max_tokens is None else max_tokens,
            min_tokens=_optional_int(body, "min_tokens", 0, None) or 0,
            stop=_stop(body.get("stop")),
            ignore_eos=bool(body.get("ignore_eos", False)),
            seed=_optional_int(body, "seed", 0, None),
            length=_length(body.get("sim_length")),
            structured=any(
                body.get(name) not in (None, {"type": "text"}) for name in STRUCTURED_FIELDS
            ),
        )
    except RequestError as exc:
        raise ApiError(400, str(exc)) from None
    return GenerationRequest(
        chat=chat,
        prompt_token_ids=prompt,
        params=params,
        n=_optional_int(body, "n", 1, MAX_N) or 1,
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)),
        logprobs=logprobs,
        return_token_ids=bool(body.get("return_token_ids", False)),
    )


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _check_model(body: Mapping[str, Any], model_name: str) -> None:
    model = body.get("model")
    if model is not None and model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")


def _prompt_ids(prompt: Any) -> np.ndarray:
    """A string, a list of token ids, or a batch of exactly one of those."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = text.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(_is_int(token) for token in prompt):
        # Checked here, not only by the engine: a JSON integer may not even fit an int64.
        bad = next((token for token in prompt if not 0 <= token < text.VOCAB_SIZE), None)
        if bad is not None:
            raise ApiError(400, f"token id {bad} is out of vocabulary (0..{text.VOCAB_SIZE - 1})")
        ids = np.asarray(prompt, dtype=np.int64)
    elif isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(400, "batched prompts are not supported: send one prompt per request")
    else:
        raise ApiError(400, "prompt must be a non-empty string or list of token ids")
    if len(ids) == 0:
        raise ApiError(400, "the prompt encodes to no tokens")
    return ids


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        if all(isinstance(part, str) for part in parts) and len(parts) == len(content):
            return "".join(parts)
    raise ApiError(400, "message content must be a string or a list of text parts")


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        return tuple(stop)
    raise ApiError(400, "stop must be a string or a list of strings")


def _length(spec: Any) -> LengthDistribution | None:
    if spec is None:
        return None
    if not isinstance(spec, str):
        raise ApiError(400, "sim_length must be a string like 'lognormal:300:0.5'")
    try:
        return LengthDistribution.parse(spec)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


def _optional_int(body: Mapping[str, Any], name: str, low: int, high: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ApiError(400, f"{name} must be an integer {bound}, got {value!r}")
    return int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_tokenize(body: Any, model_name: str) -> np.ndarray:
    """vLLM's ``/tokenize``: the ids of a ``prompt``, or of chat ``messages`` as the template
    renders them. ``add_special_tokens`` is accepted and changes nothing: the simulator's
    vocabulary has no special tokens to add."""
    body = _object(body)
    _check_model(body, model_name)
    if "messages" in body:
        return text.encode(chat_prompt(body["messages"]))
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "prompt must be a string (or send messages)")
    return text.encode(prompt)
