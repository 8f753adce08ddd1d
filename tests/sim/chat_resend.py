"""A chat turn re-sent with its answer, and what the prefix cache made of it, over HTTP.

Multi-turn episodes re-send the whole conversation each turn; an engine whose chat template
renders the previous answer as its generation saw it serves that answer from the prefix
cache. The measurement speaks only the OpenAI chat API and vLLM's metric names, so it runs
against the simulator and a real vLLM engine alike (tests/sim/test_fidelity.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
FOLLOW_UP = {"role": "user", "content": "And then?"}


@dataclass(frozen=True, slots=True)
class Resend:
    prompt_tokens: int  # the first turn's prompt
    completion_tokens: int  # its answer
    resent_tokens: int  # the second turn's prompt: first prompt, answer, follow-up
    hits: int  # prefix-cache hits of the second turn
    messages: list[dict[str, str]]  # the second turn's conversation
    answer_ids: list[int] | None  # the answer's token ids, when the engine returns them
    prompt_ids: list[int] | None  # the first prompt's token ids, likewise

    @property
    def computed(self) -> int:
        """Tokens with KV after the first turn: the last sampled token has none."""
        return self.prompt_tokens + self.completion_tokens - 1


async def prefix_cache_hits(client: httpx.AsyncClient, url: str) -> float:
    response = await client.get(f"{url}/metrics")
    response.raise_for_status()
    return sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == f"{PREFIX_CACHE_HITS}_total"
    )


async def resend_with_answer(url: str, model: str, content: str, max_tokens: int) -> Resend:
    """One greedy turn of exactly ``max_tokens``, then the conversation with its answer."""
    messages = [{"role": "user", "content": content}]
    async with httpx.AsyncClient(timeout=120.0) as client:
        first = await client.post(
            f"{url}/v1/chat/completions",
            json={
                "model": model,
                "messages": messages,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
                "seed": 0,
                "return_token_ids": True,  # vLLM's; the simulator ignores it
            },
        )
        first.raise_for_status()
        body = first.json()
        choice = body["choices"][0]
        answer = {"role": "assistant", "content": choice["message"]["content"]}
        resent = [*messages, answer, FOLLOW_UP]
        before = await prefix_cache_hits(client, url)
        second = await client.post(
            f"{url}/v1/chat/completions",
            json={"model": model, "messages": resent, "max_tokens": 1},
        )
        second.raise_for_status()
        hits = await prefix_cache_hits(client, url) - before
    return Resend(
        prompt_tokens=body["usage"]["prompt_tokens"],
        completion_tokens=body["usage"]["completion_tokens"],
        resent_tokens=second.json()["usage"]["prompt_tokens"],
        hits=round(hits),
        messages=resent,
        answer_ids=choice.get("token_ids"),
        prompt_ids=body.get("prompt_token_ids"),
    )


async def tokenize_chat(url: str, model: str, messages: list[dict[str, str]]) -> list[int]:
    """vLLM's /tokenize of a conversation with its generation prompt, as a turn sends it."""
    async with httpx.AsyncClient(timeout=30.0) as client:
        response = await client.post(
            f"{url}/tokenize",
            json={"model": model, "messages": messages, "add_generation_prompt": True},
        )
        response.raise_for_status()
        return response.json()["tokens"]


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids the two sequences have in common."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
