"""A ``lengths`` event (W5's drift) reaches the answers queued on an engine, not only those
sent after it: the drifted weights write every answer not yet started. Before, a pool with
hundreds queued answered at the old length for minutes after the drift, which made a large
fixed cap look better than it is."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from bench.virtual.engines import SimEngine
from bench.virtual.workload import parse_workload
from inference.sim.request import FinishReason, Request
from inference.sim.sampling import SamplingParams

ENGINE = {
    "kv_tokens": 4096,
    "block_size": 16,
    "max_num_seqs": 1,  # one request runs; the rest queue
    "max_model_len": 1024,
    "answer_length": "fixed:100",  # the engine's end of sequence, for requests that allow it
}
WORKLOAD = {
    "workload": {"name": "drift"},
    "run": {"seconds": 60, "batch_size": 8, "group_size": 2},
    "engine": [ENGINE],
    "env": [{"name": "longtail"}],
}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The loop the waiters' futures belong to, as the benchmark's client's do."""
    made = asyncio.new_event_loop()
    yield made
    made.close()


def test_answers_queued_before_the_drift_are_written_at_the_new_length(
    loop: asyncio.AbstractEventLoop,
) -> None:
    engine = SimEngine(parse_workload(WORKLOAD).engines[0], seed=1)

    def submit(name: str, params: SamplingParams, at: float) -> Request:
        """A request on the engine as the benchmark's client sends one."""
        req = engine.virtual.submit(name, np.arange(3, 67, dtype=np.int64), params, at)
        engine.waiters[name] = (loop.create_future(), req)
        return req

    running = submit("running", SamplingParams(max_tokens=400, ignore_eos=True), 0.0)
    engine.virtual.run_until(0.5)  # admitted and under way before the drift
    assert running.scheduled_time is not None
    planned = submit("planned", SamplingParams(max_tokens=400, ignore_eos=True), 0.5)
    ended = submit("ended", SamplingParams(max_tokens=500), 0.5)  # EOS at 100
    capped = submit("capped", SamplingParams(max_tokens=60), 0.5)  # max_tokens first
    near_room = submit("near_room", SamplingParams(max_tokens=900, ignore_eos=True), 0.5)
    tight = submit("tight", SamplingParams(max_tokens=150), 0.5)  # EOS 100 x2 > 150
    assert (ended.max_output_tokens, ended.final_reason) == (100, FinishReason.STOP)

    engine.lengthen_unstarted(2.0)

    assert running.max_output_tokens == 400  # started: left alone
    assert (planned.max_tokens, planned.max_output_tokens) == (800, 800)
    assert (ended.max_output_tokens, ended.final_reason) == (200, FinishReason.STOP)
    assert (capped.max_output_tokens, capped.final_reason) == (60, FinishReason.LENGTH)
    assert near_room.max_output_tokens == 1024 - 64  # within the model length
    assert (tight.max_output_tokens, tight.final_reason) == (150, FinishReason.LENGTH)

    while engine.virtual.now < 600.0:
        engine.virtual.run_until(600.0)  # returns at each step that finishes a request
    assert planned.num_output_tokens == 800 and ended.num_output_tokens == 200
    assert planned.finish_reason is FinishReason.LENGTH and ended.finish_reason is FinishReason.STOP
