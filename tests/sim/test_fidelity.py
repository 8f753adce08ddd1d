"""Fidelity: the simulator (preset cpu-tiny) against a real vLLM-CPU engine, same load ladder.

Both engines get the same shape (block size 128, 9 blocks, max_num_seqs 32, max model length
512, 2,048 tokens a step) and the same closed-loop ladder: concurrency 1, 2, 4, ... 64, every
request a fresh 96-token prompt asking for exactly 64 tokens, at least 32 requests a level.
A request needs one block to be admitted and a second one after 32 tokens, so the eight
usable blocks run out between concurrency 4 and 8: that is where both engines must start
preempting and queueing.

Compared, with the tolerances the test asserts:
- the concurrency at which requests start waiting for capacity (mean over the level's scrapes
  of at least ``QUEUE_KNEE_WAITING`` requests): equal, or one rung apart;
- the concurrency at which preemptions start: equal, or one rung apart;
- throughput versus concurrency, each curve divided by its own maximum: mean absolute
  difference at most ``CURVE_TOLERANCE``.

Before the ladder, each engine serves one chat turn and the same conversation re-sent with
its answer: both must hit the prefix cache on every full block the re-sent prompt shares with
what the engine held, and the simulator must share all of it (its answers re-encode exactly;
the random tiny model samples ids that do not survive detokenization, so vLLM shares the
answer up to the first of those).

Each engine first runs a warm-up ladder (vLLM-CPU pays a one-off cost the first time it sees
a batch shape), then the ladder three times; ``ladder.combine`` keeps, per level, what the
engine can do when nothing else on the machine gets in its way. Needs the vLLM virtualenv
(scripts/vllm-env.sh); takes about three minutes on two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from inference.sim import text
from inference.sim.openai_requests import chat_prompt
from tests.conftest import REPO_ROOT, free_port, stop_process_group
from tests.sim.chat_resend import Resend, resend_with_answer, shared_prefix, tokenize_chat
from tests.sim.ladder import LevelResult, Workload, combine, run_ladder
from tests.vllm import conftest as vllm_fixtures
from tests.vllm.conftest import SERVED_MODEL, running_engine

pytestmark = pytest.mark.vllm

# The real engine's session fixtures (vLLM virtualenv, tiny model), shared with tests/vllm.
vllm_python = vllm_fixtures.vllm_python
tiny_model = vllm_fixtures.tiny_model

LEVELS = (1, 2, 4, 8, 16, 32, 64)
WORKLOAD = Workload(prompt_tokens=96, completion_tokens=64, requests_per_slot=2, min_requests=32)
WARM_UP = Workload(
    prompt_tokens=96, completion_tokens=64, requests_per_slot=1, min_requests=4, seed=1
)
REPETITIONS = 3  # the measured ladder runs three times; see ladder.combine
ENGINE_SHAPE = (
    "--num-gpu-blocks-override", "9",
    "--max-num-seqs", "32",
    "--max-model-len", "512",
    "--max-num-batched-tokens", "2048",
)  # fmt: skip
QUEUE_KNEE_WAITING = 0.5  # mean requests waiting for capacity that count as queueing
KNEE_TOLERANCE_RUNGS = 1  # knees may differ by one step of the ladder (a factor of 2)
CURVE_TOLERANCE = 0.2  # mean |difference| of the two normalised throughput curves
SIM_STARTUP_TIMEOUT_S = 30.0
BLOCK_SIZE = 128  # vLLM-CPU's KV block, and the simulator's here
CHAT_CONTENT = "Bamo tiku lesa. " * 20  # a prompt of one block or so on either tokenizer
CHAT_ANSWER_TOKENS = 250  # long enough for the answer to fill a block of its own


def queue_knee(results: list[LevelResult]) -> int | None:
    return next(
        (r.concurrency for r in results if r.mean_waiting_capacity >= QUEUE_KNEE_WAITING), None
    )


def preemption_knee(results: list[LevelResult]) -> int | None:
    return next((r.concurrency for r in results if r.preemptions > 0), None)


def normalised(results: list[LevelResult]) -> list[float]:
    peak = max(r.throughput for r in results)
    return [r.throughput / peak for r in results]


def rungs_apart(a: int | None, b: int | None) -> float:
    if a is None or b is None:
        return 0.0 if a == b else math.inf
    return abs(math.log2(a) - math.log2(b))


@dataclass(frozen=True)
class Measured:
    """What one engine did: the chat re-send (with the ids involved) and the load ladder."""

    chat: Resend
    held_ids: list[int]  # the first turn's prompt and answer, as the engine held them
    resent_ids: list[int]  # the re-sent conversation's prompt, as the engine tokenized it
    ladder: list[LevelResult]


def expected_hits(shared: int, chat: Resend) -> int:
    """Full blocks of the shared ids that the first turn computed and the second may reuse."""
    reusable = min(shared, chat.computed, chat.resent_tokens - 1)
    return reusable // BLOCK_SIZE * BLOCK_SIZE


def ladder(url: str) -> list[LevelResult]:
    """Warm-up (vLLM pays once for each new batch shape), then the measured repetitions."""
    asyncio.run(run_ladder(url, SERVED_MODEL, LEVELS, WARM_UP))
    return combine(
        [asyncio.run(run_ladder(url, SERVED_MODEL, LEVELS, WORKLOAD)) for _ in range(REPETITIONS)]
    )


@contextlib.contextmanager
def running_simulator() -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "inference.sim", "--preset", "cpu-tiny", "--port", str(port)]
    command += ["--block-size", "128", "--served-model-name", SERVED_MODEL, *ENGINE_SHAPE]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SIM_STARTUP_TIMEOUT_S
        while not _healthy(url):
            assert process.poll() is None and time.monotonic() < deadline, "simulator down"
            time.sleep(0.1)
        yield url
    finally:
        stop_process_group(process)


def _healthy(url: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    return False


@pytest.fixture(scope="module")
def real(
    vllm_python: Path,
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Measured:
    log_path = tmp_path_factory.mktemp("fidelity") / "vllm.log"
    with running_engine(vllm_python, tiny_model, log_path, ENGINE_SHAPE, {}) as engine:
        chat = asyncio.run(
            resend_with_answer(engine.url, SERVED_MODEL, CHAT_CONTENT, CHAT_ANSWER_TOKENS)
        )
        assert chat.prompt_ids is not None and chat.answer_ids is not None
        resent_ids = asyncio.run(tokenize_chat(engine.url, SERVED_MODEL, chat.messages))
        return Measured(chat, chat.prompt_ids + chat.answer_ids, resent_ids, ladder(engine.url))


@pytest.fixture(scope="module")
def simulated() -> Measured:
    with running_simulator() as url:
        chat = asyncio.run(resend_with_answer(url, SERVED_MODEL, CHAT_CONTENT, CHAT_ANSWER_TOKENS))
        # The simulator's tokenizer is inference.sim.text, and its answers re-encode exactly.
        first_prompt = text.encode(chat_prompt(chat.messages[:1]))
        answer = text.encode(chat.messages[1]["content"])
        held_ids = [*first_prompt.tolist(), *answer.tolist()]
        resent_ids = text.encode(chat_prompt(chat.messages)).tolist()
        return Measured(chat, held_ids, resent_ids, ladder(url))


def test_a_chat_re_sent_with_its_answer_hits_the_prefix_cache_on_it_on_both_engines(
    real: Measured, simulated: Measured
) -> None:
    shared = {}
    for name, measured in (("real", real), ("sim", simulated)):
        chat = measured.chat
        shared[name] = shared_prefix(measured.held_ids, measured.resent_ids)
        print(
            f"{name} chat: prompt {chat.prompt_tokens} + answer {chat.completion_tokens} tokens, "
            f"re-sent {chat.resent_tokens} sharing {shared[name]}, hit {chat.hits}"
        )
        assert chat.hits == expected_hits(shared[name], chat), name
    assert shared["real"] > real.chat.prompt_tokens  # vLLM's template keeps the answer's ids
    assert shared["sim"] == simulated.chat.prompt_tokens + simulated.chat.completion_tokens
    assert simulated.chat.hits > simulated.chat.prompt_tokens  # served from the answer's blocks


def test_the_simulator_matches_a_real_engine_on_the_load_ladder(
    real: Measured, simulated: Measured
) -> None:
    for name, results in (("real", real.ladder), ("sim", simulated.ladder)):
        print(
            f"{name}: "
            + ", ".join(
                f"c={r.concurrency} {r.throughput:.0f} tok/s wait={r.mean_waiting_capacity:.1f} "
                f"preempt={r.preemptions:.0f}"
                for r in results
            )
        )
    knees = {
        "queue": (queue_knee(real.ladder), queue_knee(simulated.ladder)),
        "preemption": (preemption_knee(real.ladder), preemption_knee(simulated.ladder)),
    }
    curve_error = sum(
        abs(a - b)
        for a, b in zip(normalised(real.ladder), normalised(simulated.ladder), strict=True)
    ) / len(LEVELS)
    print(f"knees (real, sim): {knees}; normalised curve mean |error|: {curve_error:.3f}")
    assert all(knee is not None for knee, _ in knees.values()), "the ladder made no pressure"
    for name, (real_knee, sim_knee) in knees.items():
        assert rungs_apart(real_knee, sim_knee) <= KNEE_TOLERANCE_RUNGS, (name, knees)
    assert curve_error <= CURVE_TOLERANCE
