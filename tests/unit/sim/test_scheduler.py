"""The scheduler stepped by hand: budget, batch cap, preemption, prefix hits, deferral, aborts."""

from __future__ import annotations

import numpy as np

from inference.sim.request import Request, RequestStatus
from inference.sim.sampling import SamplingParams
from inference.sim.scheduler import Scheduler
from tests.unit.sim.helpers import make_engine, make_request, make_scheduler, step


def test_chunked_prefill_spends_the_token_budget_then_decodes_one_token_a_step() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=32)
    req = make_request("a", num_prompt=40, num_output=2)
    scheduler.add_request(req)

    assert step(scheduler) == ([32], [])
    assert req.num_computed_tokens == 32 and req.num_output_tokens == 0
    assert step(scheduler) == ([8], [])
    assert req.num_output_tokens == 1  # the step that ends the prefill samples a token
    assert step(scheduler) == ([1], [req])
    assert req.status is RequestStatus.FINISHED_LENGTH
    assert scheduler.kv.num_free_blocks == 16


def test_running_decodes_go_first_and_a_waiting_prefill_gets_the_rest_of_the_budget() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=8)
    for name in "abc":
        scheduler.add_request(make_request(name, num_prompt=2, num_output=5))
    assert step(scheduler) == ([2, 2, 2], [])
    late = make_request("late", num_prompt=20, num_output=1)
    scheduler.add_request(late)
    assert step(scheduler) == ([1, 1, 1, 5], [])
    assert late.num_computed_tokens == 5


def test_batch_cap_leaves_requests_waiting_for_capacity() -> None:
    scheduler = make_scheduler(max_num_seqs=2)
    for name in "abc":
        scheduler.add_request(make_request(name, num_prompt=4, num_output=3))
    assert step(scheduler) == ([4, 4], [])
    stats = scheduler.make_stats()
    assert (stats.num_running_reqs, stats.num_waiting_reqs, stats.num_deferred_reqs) == (2, 1, 0)


def test_a_request_waits_until_its_whole_prompt_fits_in_free_blocks() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=64)
    scheduler.add_request(make_request("big", num_prompt=40, num_output=30))  # 10 of 16 blocks
    scheduler.add_request(make_request("next", num_prompt=28, num_output=1, first_token=100))
    assert step(scheduler) == ([40], [])
    assert scheduler.make_stats().num_waiting_reqs == 1


def test_a_decode_without_a_free_block_preempts_the_newest_request_by_recompute() -> None:
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64)
    old = make_request("old", num_prompt=28, num_output=20, first_token=0)
    new = make_request("new", num_prompt=28, num_output=20, first_token=100)
    queued = make_request("queued", num_prompt=4, num_output=1, first_token=200)
    for req in (old, new, queued):
        scheduler.add_request(req)

    assert step(scheduler) == ([28, 28], [])  # 14 of 16 blocks
    for _ in range(4):  # the 8th block each, then decodes within it
        assert step(scheduler) == ([1, 1], [])
    assert scheduler.kv.num_free_blocks == 0

    output = scheduler.schedule(0.0)
    assert output.preempted == [new]
    assert output.num_scheduled_tokens.tolist() == [1]
    assert list(scheduler.waiting) == [new, queued]  # requeued at the head
    assert new.status is RequestStatus.PREEMPTED and new.num_preemptions == 1
    assert new.num_computed_tokens == 0 and new.num_output_tokens == 5  # samples are kept
    assert scheduler.kv.num_blocks_of(new) == 0
    scheduler.update_from_output(output, 0.0)

    finished = []
    for _ in range(200):
        finished += step(scheduler)[1]
        scheduler.kv.pool.check()
    assert {req.req_id for req in finished} == {"old", "new", "queued"}
    assert new.num_output_tokens == 20
    assert scheduler.kv.num_free_blocks == 16


def test_a_request_admitted_after_another_with_the_same_prompt_hits_its_blocks() -> None:
    scheduler = make_scheduler()
    first = make_request("first", num_prompt=16, num_output=2)
    second = make_request("second", num_prompt=16, num_output=2)
    scheduler.add_request(first)
    scheduler.add_request(second)
    # At most 15 of 16 tokens can hit: one is always recomputed to sample from.
    assert step(scheduler) == ([16, 4], [])
    stats = scheduler.kv.make_prefix_cache_stats()
    assert (stats.queries, stats.hits, stats.requests) == (32, 12, 2)
    assert second.num_cached_prompt_tokens == 12


def test_a_deferred_request_waits_for_its_ready_time_and_lets_others_pass() -> None:
    scheduler = make_scheduler()
    deferred = make_request("deferred", num_prompt=4, num_output=1)
    deferred.ready_time = 0.5
    ready = make_request("ready", num_prompt=4, num_output=1)
    scheduler.add_request(deferred)
    scheduler.add_request(ready)
    stats = scheduler.make_stats()
    assert (stats.num_waiting_reqs, stats.num_deferred_reqs) == (1, 1)

    output = scheduler.schedule(0.1)
    assert output.admitted == [ready]
    assert list(scheduler.waiting) == [deferred]
    scheduler.update_from_output(output, 0.1)
    assert scheduler.schedule(0.5).admitted == [deferred]
    assert scheduler.make_stats().num_deferred_reqs == 0


def test_aborting_a_running_request_frees_its_blocks_and_forgets_it() -> None:
    scheduler = make_scheduler()
    running = make_request("running", num_prompt=10, num_output=5)
    waiting = make_request("waiting", num_prompt=60, num_output=2, first_token=100)
    scheduler.add_request(running)
    scheduler.add_request(waiting)
    step(scheduler)
    assert scheduler.kv.num_free_blocks == 13

    aborted = scheduler.finish_requests(["running", "waiting", "unknown"], 1.0)
    assert aborted == [running, waiting]
    assert running.status is RequestStatus.FINISHED_ABORTED and running.finish_time == 1.0
    assert scheduler.kv.num_free_blocks == 16
    assert not scheduler.has_unfinished_requests()
    assert len(scheduler.running) == 0 and not scheduler.waiting


def test_ended_requests_leave_no_block_hashes_behind() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=64)  # 16 usable blocks
    for index in range(5):
        scheduler.add_request(make_request(f"r{index}", 10, 3, first_token=10 * index))
    while scheduler.has_unfinished_requests():
        step(scheduler)
    running = make_request("running", num_prompt=40, num_output=20, first_token=100)
    waiting = make_request("waiting", num_prompt=30, num_output=2, first_token=200)
    scheduler.add_request(running)
    scheduler.add_request(waiting)
    step(scheduler)
    assert list(scheduler.waiting) == [waiting]  # looked up in the cache, 8 blocks > 6 free
    scheduler.finish_requests(["running", "waiting"], 1.0)
    # The hashes are keyed by request id: any left behind is a leak.
    assert not scheduler.kv._chains


def test_a_request_id_used_again_gets_no_hits_from_the_prompt_it_had_before() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request("x", num_prompt=20, num_output=2))
    while scheduler.has_unfinished_requests():
        step(scheduler)
    again = make_request("x", num_prompt=20, num_output=2, first_token=500)
    scheduler.add_request(again)
    step(scheduler)
    assert again.num_cached_prompt_tokens == 0
    same_prompt = make_request("y", num_prompt=20, num_output=2)
    scheduler.add_request(same_prompt)
    step(scheduler)
    assert same_prompt.num_cached_prompt_tokens == 16  # the first prompt's blocks are cached


class OneByOneScheduler(Scheduler):
    """Walks the running batch one request at a time on every step: the literal rules."""

    def _schedule_running(self, token_budget: int) -> tuple[np.ndarray, int, list[Request]]:
        return self._schedule_running_one_by_one(token_budget, [])


def run_workload(one_by_one: bool, seed: int) -> list[tuple[str, float | None, float | None, int]]:
    """A random load on a small cache (prefix sharing, preemptions); what each request saw."""
    engine = make_engine(num_gpu_blocks=25, max_num_seqs=6, max_num_batched_tokens=24)
    if one_by_one:
        engine.scheduler = OneByOneScheduler(engine.config, engine.kv)
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, 2.0, size=40))
    reqs = []
    now, index = 0.0, 0
    while index < len(arrivals) or engine.has_unfinished_requests():
        while index < len(arrivals) and arrivals[index] <= now:
            prompt = rng.integers(0, 3, size=int(rng.integers(1, 30)))  # few ids: shared prefixes
            params = SamplingParams(max_tokens=int(rng.integers(1, 25)))
            reqs.append(engine.add_request(f"r{index}", prompt, params, now))
            index += 1
        result = engine.step(now)
        engine.kv.pool.check()
        now = result.end if not result.is_idle else float(arrivals[index])
    return [(r.req_id, r.first_token_time, r.finish_time, r.num_preemptions) for r in reqs]


def test_the_batched_step_matches_the_literal_one_request_at_a_time_step() -> None:
    for seed in range(5):
        batched = run_workload(one_by_one=False, seed=seed)
        literal = run_workload(one_by_one=True, seed=seed)
        assert batched == literal
        assert all(finish is not None for _, _, finish, _ in batched)
    assert any(preemptions for seed in range(5) for *_, preemptions in run_workload(False, seed))
