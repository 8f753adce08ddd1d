"""The monitor's poll: concurrency (F10), health, backoff, deltas, max_model_len, warnings."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import httpx
import pytest

from inference.metrics.client import MetricsClient, ScrapeConfig
from inference.metrics.endpoints import EngineSpec
from inference.metrics.health import HealthConfig
from inference.metrics.monitor import EngineMonitor
from inference.metrics.stats import POOL
from tests.unit.metrics.conftest import Route, TinyServer
from tests.unit.metrics.monitor_harness import MODELS, Answer, Engines, build, by_id, refuse, spec
from tests.unit.metrics.texts import exposition
from workers.core.clock import ManualClock
from workers.core.controller.polls import PollSummary
from workers.core.samples import EngineHealth, EngineRole


async def test_samples_carry_configured_roles_gauges_and_deltas_between_polls() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("p", exposition(running=1, generated=100))
    engines.serve("d", exposition(running=5, preemptions=2, generated=1000))
    client, monitor = build(
        engines, [spec("p", EngineRole.PREFILL), spec("d", EngineRole.DECODE)], clock
    )
    async with client:
        first = await monitor.poll()
        clock.advance(5.0)
        engines.serve("d", exposition(running=6, preemptions=5, generated=1500))
        second = await monitor.poll()
    d0, d1 = by_id(first)["d/0"], by_id(second)["d/0"]
    assert (d0.role, d0.health, d0.num_running, d0.max_model_len) == (
        EngineRole.DECODE,
        EngineHealth.UP,
        5,
        4096,
    )
    assert (d0.num_preemptions, d0.generation_tokens) == (0, 0)
    assert (d1.num_preemptions, d1.generation_tokens, d1.scraped_at) == (3, 500, clock.now())
    assert by_id(second)["p/0"].role is EngineRole.PREFILL
    stats = {s.scope: s for s in second.stats}
    assert stats["d/0"].generation_tokens_per_s == 100.0
    assert stats[POOL].generation_tokens_per_s == 100.0
    assert [e.health for e in second.endpoints] == [EngineHealth.UP, EngineHealth.UP]


async def test_a_hanging_engine_costs_its_own_timeout_and_the_others_still_report() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("good", exposition(running=4))
    engines.serve("slow", exposition(running=9))
    client, monitor = build(engines, [spec("slow"), spec("good")], clock)
    async with client:
        await monitor.poll()
        engines.metrics["slow"] = lambda: httpx.Response(599)
        engines.serve("good", exposition(running=5))
        clock.advance(5.0)
        result = await monitor.poll()
    samples = by_id(result)
    assert (samples["good/0"].health, samples["good/0"].num_running) == (EngineHealth.UP, 5)
    assert (samples["slow/0"].health, samples["slow/0"].num_running) == (EngineHealth.STALE, 9)
    slow_status = result.endpoints[0]
    assert slow_status.error is not None
    assert "ScrapeTimeout" in slow_status.error


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (lambda: httpx.Response(200, text="<!DOCTYPE html><html>oops</html>"), "an HTML page"),
        (lambda: httpx.Response(200, text=""), "empty body"),
        (
            lambda: httpx.Response(200, text='vllm:num_requests_running{engine="0" 1'),
            "not Prometheus",
        ),
        (lambda: httpx.Response(200, text=exposition(usage="NaN")), "not finite"),
        (lambda: httpx.Response(200, text=exposition(usage="-Inf")), "not finite"),
        (lambda: httpx.Response(200, content=b"#" * 20_000), "ScrapeTooLarge"),
        (lambda: httpx.Response(500, text="Internal Server Error"), "HTTP 500"),
        (refuse, "ScrapeRefused"),
    ],
)
async def test_bad_input_fails_that_engine_with_a_clear_error_and_others_flow(
    answer: Answer, error: str
) -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("good", exposition(running=3))
    engines.metrics["bad"] = answer
    client, monitor = build(
        engines, [spec("bad"), spec("good")], clock, ScrapeConfig(max_body_bytes=16_384)
    )
    async with client:
        result = await monitor.poll()
    bad = result.endpoints[0]
    assert bad.health is EngineHealth.DOWN
    assert bad.error is not None
    assert error in bad.error
    assert by_id(result)["good/0"].num_running == 3
    assert by_id(result)["bad"].health is EngineHealth.DOWN


GARBLED = 'vllm:num_preemptions _total{engine="0"} 3\n'


async def test_a_garbled_exposition_fails_that_engine_only_and_it_backs_off() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("good", exposition(running=3))
    engines.serve("bad", exposition(running=8))
    client, monitor = build(engines, [spec("bad"), spec("good")], clock)
    async with client:
        await monitor.poll()
        engines.serve("bad", exposition(running=8, extra=GARBLED))
        engines.serve("good", exposition(running=4, preemptions=5))
        clock.advance(5.0)
        result = await monitor.poll()
        for _ in range(2):
            clock.advance(5.0)
            await monitor.poll()
    good, bad = by_id(result)["good/0"], by_id(result)["bad/0"]
    assert (good.health, good.num_running, good.num_preemptions) == (EngineHealth.UP, 4, 3)
    assert (bad.health, bad.num_running, bad.num_preemptions) == (EngineHealth.STALE, 8, 0)
    status = result.endpoints[0]
    assert status.health is EngineHealth.STALE
    assert "ScrapeBadFormat" in (status.error or "")
    assert "garbled sample name 'vllm:num_preemptions _total'" in (status.error or "")
    assert engines.requests["bad", "/metrics"] == 1 + 2  # the third try is skipped: backoff


def explode() -> httpx.Response:
    raise RuntimeError("exporter bug")


async def test_an_unexpected_exception_fails_that_engine_only_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The last line of defence: an exception no ScrapeError foresaw costs one engine's scrape
    (or its /v1/models read), never the poll."""
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("good", exposition(running=3))
    engines.metrics["bad"] = explode
    engines.models["good"] = explode
    client, monitor = build(engines, [spec("bad"), spec("good")], clock)
    async with client:
        result = await monitor.poll()
    bad, good = result.endpoints
    assert (bad.health, bad.error) == (EngineHealth.DOWN, "RuntimeError: exporter bug")
    assert (good.health, good.models_error) == (EngineHealth.UP, "RuntimeError: exporter bug")
    assert by_id(result)["good/0"].num_running == 3
    assert by_id(result)["bad"].health is EngineHealth.DOWN
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert [r.getMessage() for r in logged] == [
        "monitor: scrape of bad failed unexpectedly",
        "monitor: /v1/models of good failed unexpectedly",
    ]


async def test_a_stale_engine_keeps_its_last_gauges_with_zero_deltas() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", exposition(usage=0.5, preemptions=1))
    client, monitor = build(engines, [spec("e")], clock)
    async with client:
        await monitor.poll()
        clock.advance(5.0)
        engines.serve("e", exposition(usage=0.75, preemptions=4))
        good = by_id(await monitor.poll())["e/0"]
        engines.metrics["e"] = failing
        clock.advance(5.0)
        stale = by_id(await monitor.poll())["e/0"]
    assert good.num_preemptions == 3
    assert (stale.health, stale.kv_usage, stale.scraped_at) == (
        EngineHealth.STALE,
        0.75,
        good.scraped_at,
    )
    assert stale.num_preemptions == 0


def failing() -> httpx.Response:
    """An engine that answers, but not with numbers: its scrape fails, it is not gone."""
    return httpx.Response(503, text="Service Unavailable")


async def test_a_refused_engine_is_down_at_once_and_stays_down_until_it_answers() -> None:
    """A refused connection means the process is gone: its requests are lost, and new groups
    must go elsewhere on this poll, not once its numbers are 30 s old."""
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", exposition(usage=0.5))
    client, monitor = build(engines, [spec("e")], clock)
    async with client:
        await monitor.poll()
        engines.metrics["e"] = refuse
        healths = []
        for _ in range(4):  # the failed poll, then two skipped by the backoff, then a retry
            clock.advance(5.0)
            healths.append(by_id(await monitor.poll())["e/0"].health)
        engines.serve("e", exposition(usage=0.25))
        for _ in range(4):
            clock.advance(5.0)
            back = by_id(await monitor.poll())["e/0"]
    assert healths == [EngineHealth.DOWN] * 4
    assert (back.health, back.kv_usage) == (EngineHealth.UP, 0.25)


async def test_a_failing_engine_is_retried_with_backoff_and_turns_down() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", exposition())
    config = HealthConfig(down_after_s=12.0, max_skipped_polls=11)
    client, monitor = build(engines, [spec("e")], clock, health=config)
    healths = []
    async with client:
        await monitor.poll()
        engines.metrics["e"] = failing
        for _ in range(8):
            clock.advance(5.0)
            healths.append((await monitor.poll()).endpoints[0].health)
    assert engines.requests["e", "/metrics"] == 1 + 4  # polls 1, 2, 4, 8 after the failure
    assert healths[:2] == [EngineHealth.STALE, EngineHealth.STALE]
    assert healths[2:] == [EngineHealth.DOWN] * 6


async def test_max_model_len_is_retried_until_read_then_cached() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", exposition())
    engines.models["e"] = lambda: httpx.Response(503)
    client, monitor = build(engines, [spec("e")], clock)
    async with client:
        first = await monitor.poll()
        second = await monitor.poll()
        engines.models["e"] = lambda: httpx.Response(200, text=MODELS)
        third = await monitor.poll()
        await monitor.poll()
    assert [by_id(r)["e/0"].max_model_len for r in (first, second, third)] == [None, None, 4096]
    assert first.endpoints[0].health is EngineHealth.UP
    assert "HTTP 503" in (first.endpoints[0].models_error or "")
    assert third.endpoints[0].models_error is None
    assert engines.requests["e", "/v1/models"] == 3


async def test_data_parallel_ranks_are_separate_samples_of_the_configured_role() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    text = exposition('engine="0",model_name="m"', running=2) + exposition(
        'engine="1",model_name="m"', running=6
    )
    engines.serve("dp", text)
    client, monitor = build(engines, [spec("dp", EngineRole.DECODE)], clock)
    async with client:
        result = await monitor.poll()
    samples = by_id(result)
    assert {k: (s.num_running, s.role) for k, s in samples.items()} == {
        "dp/0": (2, EngineRole.DECODE),
        "dp/1": (6, EngineRole.DECODE),
    }


RANK0, RANK1 = 'engine="0",model_name="m"', 'engine="1",model_name="m"'


async def test_a_rank_missing_from_a_good_scrape_is_stale_and_its_sibling_keeps_counting() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("dp", exposition(RANK0, preemptions=2) + exposition(RANK1, running=6))
    client, monitor = build(engines, [spec("dp", EngineRole.DECODE)], clock)
    async with client:
        first = by_id(await monitor.poll())
        engines.serve("dp", exposition(RANK0, preemptions=9))
        clock.advance(5.0)
        gone = await monitor.poll()
        engines.serve("dp", exposition(RANK0, preemptions=9) + exposition(RANK1, preemptions=5))
        clock.advance(5.0)
        back = by_id(await monitor.poll())
    samples = by_id(gone)
    assert (samples["dp/0"].health, samples["dp/0"].num_preemptions) == (EngineHealth.UP, 7)
    assert samples["dp/1"] == replace(first["dp/1"], health=EngineHealth.STALE)
    assert (samples["dp/1"].num_running, samples["dp/1"].num_preemptions) == (6, 0)
    assert gone.endpoints[0].health is EngineHealth.UP
    assert not PollSummary.from_samples(gone.samples, clock.now()).complete
    assert (back["dp/1"].health, back["dp/1"].num_preemptions) == (EngineHealth.UP, 3)


async def test_a_missing_rank_turns_down_past_the_bound_even_while_its_endpoint_is_stale() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("dp", exposition(RANK0) + exposition(RANK1))
    config = HealthConfig(down_after_s=12.0, max_skipped_polls=0)
    client, monitor = build(engines, [spec("dp")], clock, health=config)
    rank1 = []
    async with client:
        await monitor.poll()
        engines.serve("dp", exposition(RANK0))
        for _ in range(3):
            clock.advance(5.0)
            rank1.append(by_id(await monitor.poll())["dp/1"].health)
        engines.metrics["dp"] = failing
        clock.advance(5.0)
        failed = by_id(await monitor.poll())
    assert rank1 == [EngineHealth.STALE, EngineHealth.STALE, EngineHealth.DOWN]
    assert {k: s.health for k, s in failed.items()} == {
        "dp/0": EngineHealth.STALE,
        "dp/1": EngineHealth.DOWN,
    }


async def test_an_engine_back_after_a_long_outage_does_not_replay_old_counts() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", exposition(preemptions=1))
    client, monitor = build(
        engines, [spec("e")], clock, health=HealthConfig(down_after_s=30.0, max_skipped_polls=0)
    )
    async with client:
        await monitor.poll()
        engines.metrics["e"] = refuse
        for _ in range(8):
            clock.advance(5.0)
            await monitor.poll()
        engines.serve("e", exposition(preemptions=200))
        clock.advance(5.0)
        back = by_id(await monitor.poll())["e/0"]
    assert (back.health, back.num_preemptions, back.restarted) == (EngineHealth.UP, 0, False)


def test_engine_names_must_be_unique() -> None:
    client = MetricsClient(httpx.AsyncClient())
    with pytest.raises(ValueError, match="unique"):
        EngineMonitor([spec("a"), spec("a")], client, ManualClock(1000.0))


async def test_over_real_sockets_a_live_and_a_refused_engine(tiny_server: TinyServer) -> None:
    tiny_server.routes["/metrics"] = Route(body=exposition(running=11).encode())
    tiny_server.routes["/v1/models"] = Route(body=MODELS.encode())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    specs = [EngineSpec("live", tiny_server.url), EngineSpec("gone", f"http://127.0.0.1:{closed}")]
    async with MetricsClient(httpx.AsyncClient()) as client:
        result = await EngineMonitor(specs, client, ManualClock(1000.0)).poll()
    live, gone = result.samples
    assert (live.health, live.num_running, live.max_model_len) == (EngineHealth.UP, 11, 4096)
    assert (gone.engine_id, gone.health, gone.kv_capacity_tokens) == (
        "gone",
        EngineHealth.DOWN,
        None,
    )
    assert "ConnectError" in (result.endpoints[1].error or "")


async def test_an_engine_added_while_a_poll_awaits_is_scraped_from_the_next_poll_on() -> None:
    """An engine joining a run mid-poll was once counted as skipped without being due, and its
    backoff counter went negative: it was never scraped again."""
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("a", exposition(running=3))
    engines.serve("b", exposition(running=7))
    client, monitor = build(engines, [spec("a")], clock)
    async with client:
        polling = asyncio.ensure_future(monitor.poll())
        await asyncio.sleep(0)  # the poll is awaiting its scrapes
        monitor.add(spec("b"))
        first = await polling
        assert set(by_id(first)) == {"a/0"}
        second = await monitor.poll()
        third = await monitor.poll()
        monitor.remove("a")
        fourth = await monitor.poll()
    assert (by_id(second)["b/0"].health, by_id(second)["b/0"].num_running) == (EngineHealth.UP, 7)
    assert by_id(third)["b/0"].health is EngineHealth.UP
    assert set(by_id(fourth)) == {"b/0"}
    with pytest.raises(ValueError, match="polled already"):
        monitor.add(spec("b"))
