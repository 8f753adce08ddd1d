"""The engine: step times, counters and histograms, determinism, aborts during a step."""

from __future__ import annotations

import numpy as np
import pytest

from inference.sim.engine import Engine
from inference.sim.request import FinishReason, RequestStatus
from inference.sim.sampling import LengthDistribution, RequestError, SamplingParams
from tests.unit.sim.helpers import UNIT_COST, make_config, make_engine


def run_to_end(engine: Engine, now: float = 0.0) -> float:
    while engine.has_unfinished_requests():
        result = engine.step(now)
        now = result.end if not result.is_idle else now + 0.01
    return now


def test_a_step_lasts_what_the_cost_model_says_and_counters_follow() -> None:
    engine = make_engine()
    req = engine.add_request("a", np.arange(10), SamplingParams(max_tokens=3), now=0.0)
    first = engine.step(0.0)
    assert first.end == pytest.approx(0.01 + 10 * 0.001)  # the prefill
    assert first.first_token == [req] and req.first_token_time == first.end
    end = run_to_end(engine, first.end)
    assert end == pytest.approx(first.end + 2 * 0.011)
    counters = engine.counters
    assert (counters.prompt_tokens, counters.generation_tokens) == (10, 3)
    assert counters.request_success[FinishReason.LENGTH] == 1
    assert counters.time_to_first_token.count == 1
    assert counters.e2e_request_latency.sum == pytest.approx(end)
    assert counters.request_queue_time.sum == 0.0


def test_the_same_seed_and_load_give_the_same_run() -> None:
    def run(seed: int) -> list[tuple[float | None, int]]:
        engine = Engine(
            make_config(seed=seed), UNIT_COST, LengthDistribution.parse("uniform:8:0.9")
        )
        reqs = [
            engine.add_request(f"r{i}", np.arange(5 + i), SamplingParams(max_tokens=15), 0.0)
            for i in range(6)
        ]
        run_to_end(engine)
        return [(req.finish_time, req.num_output_tokens) for req in reqs]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_a_request_seed_fixes_its_output_whatever_else_runs() -> None:
    alone = make_engine(seed=1)
    crowded = make_engine(seed=2)
    crowded.add_request("other", np.arange(4), SamplingParams(max_tokens=2), 0.0)
    params = SamplingParams(
        max_tokens=20, seed=99, length=LengthDistribution.parse("uniform:10:0.9")
    )
    a = alone.add_request("x", np.arange(4), params, 0.0)
    b = crowded.add_request("x", np.arange(4), params, 0.0)
    assert (a.max_output_tokens, a.output_seed) == (b.max_output_tokens, b.output_seed)


def test_an_abort_during_a_step_waits_for_the_step_then_frees_the_blocks() -> None:
    engine = make_engine()
    engine.add_request("a", np.arange(10), SamplingParams(max_tokens=50), 0.0)
    pending = engine.begin_step(0.0)
    assert engine.abort(["a"], 0.005) == []
    result = engine.end_step(pending)
    assert not engine.has_unfinished_requests()
    assert engine.kv.num_free_blocks == 16
    assert engine.counters.request_success[FinishReason.ABORT] == 1
    assert result.num_generated_tokens == 1
    with pytest.raises(RuntimeError, match="end_step"):
        engine.end_step(pending)


def test_structured_output_requests_are_deferred_for_the_grammar_compile_time() -> None:
    engine = Engine(make_config(), UNIT_COST, grammar_compile_s=0.2)
    req = engine.add_request("s", np.arange(4), SamplingParams(max_tokens=1, structured=True), 1.0)
    assert req.status is RequestStatus.WAITING_FOR_FSM
    assert engine.next_ready_time() == pytest.approx(1.2)
    assert engine.step(1.1).is_idle
    assert engine.make_stats().num_deferred_reqs == 1
    assert engine.step(1.2).finished == [req]


def test_bad_prompts_are_refused_before_anything_is_queued() -> None:
    engine = make_engine()
    with pytest.raises(RequestError, match="out of vocabulary"):
        engine.add_request("bad", np.array([1, 10**9]), SamplingParams(max_tokens=1), 0.0)
    with pytest.raises(RequestError, match="non-empty"):
        engine.add_request("empty", np.array([], dtype=np.int64), SamplingParams(max_tokens=1), 0.0)
    assert not engine.has_unfinished_requests()
