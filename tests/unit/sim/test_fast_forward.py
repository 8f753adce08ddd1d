"""Runs of decode steps applied at once give exactly what stepping one at a time gives."""

from __future__ import annotations

import numpy as np

from inference.sim.engine import Engine
from inference.sim.fast_forward import max_decode_run
from inference.sim.request import Request
from inference.sim.sampling import LengthDistribution, SamplingParams
from inference.sim.virtual import VirtualEngine
from tests.unit.sim.helpers import UNIT_COST, make_config, make_engine

Outcome = list[tuple[str, float | None, float | None, int, int]]


def closed_loop(fast_forward: bool, seed: int, concurrency: int, num_requests: int) -> Outcome:
    """A closed-loop client with shared prompts on a small engine; what each request saw."""
    config = make_config(num_gpu_blocks=41, max_num_seqs=6, max_num_batched_tokens=24, seed=seed)
    engine = Engine(config, UNIT_COST, LengthDistribution.parse("lognormal:12:0.7"))
    virtual = VirtualEngine(engine, fast_forward=fast_forward)
    rng = np.random.default_rng(seed)
    reqs: list[Request] = []

    def send(at: float) -> None:
        prompt = rng.integers(0, 3, size=int(rng.integers(2, 20)))
        params = SamplingParams(max_tokens=int(rng.integers(5, 40)))
        reqs.append(virtual.submit(f"r{len(reqs)}", prompt, params, at))

    for _ in range(concurrency):
        send(0.0)
    while virtual.engine.has_unfinished_requests():
        for req in virtual.run_until(1e9):
            assert req.finish_time is not None
            if len(reqs) < num_requests:
                send(req.finish_time)
        engine.kv.pool.check()
    return [
        (r.req_id, r.first_token_time, r.finish_time, r.num_output_tokens, r.num_preemptions)
        for r in reqs
    ]


def test_fast_forwarded_runs_equal_single_steps_exactly() -> None:
    for seed, concurrency in ((0, 4), (1, 6), (2, 9), (3, 12)):
        fast = closed_loop(True, seed, concurrency, num_requests=80)
        slow = closed_loop(False, seed, concurrency, num_requests=80)
        assert fast == slow
        assert len(fast) == 80 and all(finish is not None for _, _, finish, _, _ in fast)


def test_a_run_stops_at_the_first_finish_and_never_starts_during_a_prefill() -> None:
    engine = make_engine(max_num_batched_tokens=64)
    engine.add_request("short", np.arange(4), SamplingParams(max_tokens=5), 0.0)
    engine.add_request("long", np.arange(10, 18), SamplingParams(max_tokens=30), 0.0)
    assert engine.step(0.0).num_steps == 1  # both prefill and sample a first token
    assert max_decode_run(engine.scheduler) == 4  # "short" has 4 tokens left
    result = engine.step_until(engine.step(0.0).end, until=1e9)
    assert result.num_steps == 3 and [r.req_id for r in result.finished] == ["short"]
    engine.add_request("late", np.arange(30, 50), SamplingParams(max_tokens=3), result.end)
    assert max_decode_run(engine.scheduler) == 0  # "late" may be admitted: no run


def test_a_run_only_covers_steps_that_start_before_the_horizon() -> None:
    engine = make_engine()
    engine.add_request("a", np.arange(4), SamplingParams(max_tokens=50), 0.0)
    first = engine.step(0.0)
    result = engine.step_until(first.end, until=first.end + 0.05)  # 11 ms decode steps
    assert result.num_steps == 5 and result.start < first.end + 0.05 <= result.end
