"""Request bodies read as vLLM reads them; malformed ones refused with a clear message."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim import text
from inference.sim.openai_requests import ApiError, chat_prompt, parse_chat, parse_completion


def test_a_completion_body_with_vllm_extras() -> None:
    parsed = parse_completion(
        {
            "model": "m",
            "prompt": [5, 6, 7],
            "max_tokens": 9,
            "min_tokens": 2,
            "stop": "END",
            "ignore_eos": True,
            "seed": 4,
            "n": 2,
            "logprobs": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.7,
            "sim_length": "fixed:5",
        },
        "m",
    )
    assert parsed.prompt_token_ids.tolist() == [5, 6, 7]
    params = parsed.params
    assert (params.max_tokens, params.min_tokens, params.stop, params.seed) == (9, 2, ("END",), 4)
    assert params.ignore_eos and params.length is not None and params.length.mean == 5
    assert (parsed.n, parsed.logprobs, parsed.stream, parsed.include_usage) == (2, 3, True, True)
    assert not parsed.chat and not params.structured


def test_completion_defaults_follow_openai() -> None:
    parsed = parse_completion({"prompt": "hello there"}, "m")
    assert parsed.params.max_tokens == 16 and parsed.n == 1 and parsed.logprobs is None
    assert np.array_equal(parsed.prompt_token_ids, text.encode("hello there"))
    assert parse_completion({"prompt": ["one prompt"]}, "m").prompt_token_ids.size > 0


def test_a_chat_body_with_parts_logprobs_and_a_schema() -> None:
    parsed = parse_chat(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            ],
            "max_completion_tokens": 7,
            "logprobs": True,
            "top_logprobs": 2,
            "response_format": {"type": "json_object"},
        },
        "m",
    )
    assert parsed.chat and parsed.params.max_tokens == 7 and parsed.logprobs == 2
    assert parsed.params.structured
    expected = "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>"
    assert np.array_equal(parsed.prompt_token_ids, text.encode(expected))
    assert (
        parse_chat({"messages": [{"role": "user", "content": "x"}]}, "m").params.max_tokens is None
    )


def test_a_multi_turn_chat_extends_the_previous_prompt_and_its_answer() -> None:
    first = [{"role": "user", "content": "Question one?"}]
    answer_ids = text.output_token_ids(3, 0, 20)
    answer = text.decode(answer_ids)
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "Two?"}]
    # What the engine held after the first turn: its prompt, then the ids it sampled.
    seen = np.concatenate([text.encode(chat_prompt(first)), answer_ids])
    assert np.array_equal(text.encode(chat_prompt(second))[: len(seen)], seen)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ([], 400, "JSON object"),
        ({"model": "other", "prompt": "x"}, 404, "does not exist"),
        ({"prompt": ""}, 400, "encodes to no tokens"),
        ({"prompt": ["a", "b"]}, 400, "batched prompts"),
        ({"prompt": 5}, 400, "non-empty string or list of token ids"),
        ({"prompt": [1, 10**30]}, 400, f"token id {10**30} is out of vocabulary"),
        ({"prompt": [-1]}, 400, "token id -1 is out of vocabulary"),
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be an integer >= 1"),
        ({"prompt": "x", "n": 1000}, 400, "n must be an integer 1..128"),
        ({"prompt": "x", "stop": [1]}, 400, "stop must be a string"),
        ({"prompt": "x", "stop": [""]}, 400, "stop strings must not be empty"),
        ({"prompt": "x", "sim_length": "gauss:3"}, 400, "bad length spec"),
        ({"prompt": "x", "sim_length": "fixed:inf"}, 400, "length mean must be 1..1000000000"),
        ({"prompt": "x", "echo": True}, 400, "echo is not supported"),
        ({"prompt": "x", "seed": True}, 400, "seed must be an integer"),
    ],
)
def test_bad_completion_bodies(body: object, status: int, message: str) -> None:
    with pytest.raises(ApiError, match=message) as caught:
        parse_completion(body, "m")
    assert caught.value.status == status


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (None, "non-empty list"),
        ([{"content": "no role"}], "string role"),
        ([{"role": "user", "content": 3}], "string or a list of text parts"),
    ],
)
def test_bad_chat_messages(messages: object, message: str) -> None:
    with pytest.raises(ApiError, match=message):
        parse_chat({"messages": messages}, "m")
