"""Small hand-written expositions shared by the tests; recorded ones live in tests/fixtures."""

from __future__ import annotations

LABELS = 'engine="0",model_name="m"'


def exposition(
    labels: str = LABELS,
    *,
    extra: str = "",
    usage: float | str = 0.25,
    running: int = 7,
    waiting: int = 3,
    preemptions: int = 2,
    generated: int = 900,
) -> str:
    """The series the controller needs, for one engine, with the given values."""
    return f"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{labels}}} {running}.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{labels}}} {waiting}.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{labels}}} {usage}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{{labels}}} {preemptions}.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{labels}}} {generated}.0
{extra}"""
