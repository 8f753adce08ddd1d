"""vLLM 0.32's weight-update routes on the simulator, over real HTTP (inference.sim.dev_routes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference.sim.request import Request
from tests.model_folders import safetensors
from tests.sim.conftest import SimHttpServer, serve_sim

RELOAD_S = 0.4  # long against a test step (~2 ms), short for the suite
PROMPT = list(range(5, 69))  # four full 16-token blocks: a repeat hits the prefix cache
LONG = 1500  # output tokens: ~3 s at a test step's cost, outlives every pause below
TIMEOUT_S = 30.0


def http(server: SimHttpServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT_S)


async def complete(api: httpx.AsyncClient, max_tokens: int) -> dict:
    body = {"model": "sim-test", "prompt": PROMPT, "max_tokens": max_tokens}
    response = await api.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


async def until_generating(server: SimHttpServer, tokens: int = 20) -> None:
    """Waits until the engine's only request has produced ``tokens`` tokens."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        reqs = list(server.engine.scheduler.requests.values())
        if reqs and reqs[0].num_output_tokens >= tokens:
            return
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)


def the_request(server: SimHttpServer) -> Request:
    (req,) = server.engine.scheduler.requests.values()
    return req


@pytest.fixture
async def dev_server() -> AsyncIterator[SimHttpServer]:
    async with serve_sim(dev_mode=True, reload_s=RELOAD_S) as server:
        yield server


async def test_without_dev_mode_the_routes_are_not_there(sim_server: SimHttpServer) -> None:
    async with http(sim_server) as api:
        for method, path in (
            ("POST", "/pause"),
            ("POST", "/resume"),
            ("GET", "/is_paused"),
            ("POST", "/collective_rpc"),
            ("POST", "/reset_prefix_cache"),
            ("POST", "/update_weight_version"),
            ("GET", "/weight_info"),
        ):
            assert (await api.request(method, path, json={})).status_code == 404, path
        assert "pacer_sim:" not in (await api.get("/metrics")).text


async def test_the_version_served_follows_update_weight_version(
    dev_server: SimHttpServer,
) -> None:
    async with http(dev_server) as api:
        assert (await api.get("/weight_info")).json() == {"weight_version": "default"}
        answer = await api.post("/update_weight_version", json={"new_version": "12"})
        assert answer.json() == {"success": True, "new_version": "12"}
        assert (await api.get("/weight_info")).json() == {"weight_version": "12"}
        bad = await api.post("/update_weight_version", json={"new_version": 13})
        assert bad.status_code == 400
        assert (await api.get("/weight_info")).json() == {"weight_version": "12"}
        families = {
            family.name: family
            for family in text_string_to_metric_families((await api.get("/metrics")).text)
        }
        (sample,) = families["pacer_sim:weight_version_info"].samples
        assert sample.labels["weight_version"] == "12" and sample.value == 1.0
        assert families["pacer_sim:paused"].samples[0].value == 0.0
        assert (await api.get("/weight_info")).status_code == 200
        assert (await api.post("/weight_info")).status_code == 405


async def test_pause_abort_ends_the_request_in_flight_and_holds_new_ones(
    dev_server: SimHttpServer,
) -> None:
    async with http(dev_server) as api:
        in_flight = asyncio.create_task(complete(api, LONG))
        await until_generating(dev_server)
        assert (await api.post("/pause", params={"mode": "abort"})).json() == {"status": "paused"}
        ended = await asyncio.wait_for(in_flight, 1.0)
        assert ended["finish_reason"] == "abort"
        assert (await api.get("/is_paused")).json() == {"is_paused": True}
        held = asyncio.create_task(complete(api, 8))
        await asyncio.sleep(0.3)
        assert not held.done()  # queued, not refused, not run
        assert (await api.post("/resume")).json() == {"status": "resumed"}
        assert (await asyncio.wait_for(held, 5.0))["finish_reason"] == "length"
        assert (await api.get("/is_paused")).json() == {"is_paused": False}


async def test_pause_wait_answers_once_the_running_request_has_finished(
    dev_server: SimHttpServer,
) -> None:
    async with http(dev_server) as api:
        in_flight = asyncio.create_task(complete(api, 300))
        await until_generating(dev_server)
        pausing = asyncio.create_task(api.post("/pause", params={"mode": "wait"}))
        await asyncio.sleep(0.05)
        assert (await api.get("/is_paused")).json() == {"is_paused": True}
        assert not pausing.done()
        held = asyncio.create_task(complete(api, 8))
        assert (await pausing).json() == {"status": "paused"}
        assert in_flight.done()  # the pause answered after the request ended, not before
        finished = in_flight.result()
        assert finished["finish_reason"] == "length"
        await asyncio.sleep(0.2)
        assert not held.done()  # a request sent during the drain waits for resume
        await api.post("/resume")
        assert (await asyncio.wait_for(held, 5.0))["finish_reason"] == "length"


@pytest.mark.parametrize(("clear_cache", "preempted"), [("true", 1), ("false", 0)])
async def test_pause_keep_freezes_the_request_until_resume(
    dev_server: SimHttpServer, clear_cache: str, preempted: int
) -> None:
    """vLLM 0.32 clears the cache on a keep pause too (its docstring says it does not): the
    frozen batch is preempted and recomputed after resume, unless clear_cache=false."""
    async with http(dev_server) as api:
        in_flight = asyncio.create_task(complete(api, 400))
        await until_generating(dev_server)
        params = {"mode": "keep", "clear_cache": clear_cache}
        assert (await api.post("/pause", params=params)).json() == {"status": "paused"}
        frozen_at = the_request(dev_server).num_output_tokens
        await asyncio.sleep(0.3)
        assert the_request(dev_server).num_output_tokens == frozen_at < 400
        assert the_request(dev_server).num_preemptions == preempted
        assert not in_flight.done()
        await api.post("/resume")
        finished = await asyncio.wait_for(in_flight, 10.0)
        assert finished["finish_reason"] == "length"
        assert len(finished["text"]) > 0


async def test_reload_takes_the_reload_time_and_refuses_a_missing_path(
    dev_server: SimHttpServer, tmp_path: Path
) -> None:
    (tmp_path / "model.safetensors").write_bytes(safetensors())
    async with http(dev_server) as api:
        started = time.monotonic()
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
        answer = await api.post("/collective_rpc", json=body)
        elapsed = time.monotonic() - started
        assert answer.status_code == 200 and answer.json() == {"results": [None]}
        assert RELOAD_S <= elapsed < RELOAD_S + 0.5
        assert dev_server.engine.weights_path == str(tmp_path)

        empty = tmp_path / "empty"  # a directory, but no weights in it
        empty.mkdir()
        for path in (tmp_path / "absent", empty):
            body = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
            refused = await api.post("/collective_rpc", json=body)
            assert refused.status_code == 500, path
            error = refused.json()["error"]
            assert error["type"] == "InternalServerError" and str(path) in error["message"]
        cut = tmp_path / "cut"  # a save not finished: vLLM's loader fails on the header
        cut.mkdir()
        (cut / "model.safetensors").write_bytes(safetensors()[:-4])
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(cut)}}
        refused = await api.post("/collective_rpc", json=body)
        assert refused.status_code == 500 and "is cut short" in refused.json()["error"]["message"]
        assert dev_server.engine.weights_path == str(tmp_path)  # still the last good one
        assert (await api.post("/collective_rpc", json={"kwargs": {}})).status_code == 400
        unknown = await api.post("/collective_rpc", json={"method": "no_such_method"})
        assert unknown.status_code == 500


async def test_no_step_runs_during_a_reload(dev_server: SimHttpServer, tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(safetensors())
    async with http(dev_server) as api:
        in_flight = asyncio.create_task(complete(api, LONG))
        await until_generating(dev_server)
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
        reloading = asyncio.create_task(api.post("/collective_rpc", json=body))
        await asyncio.sleep(0.1)
        during = the_request(dev_server).num_output_tokens
        await asyncio.sleep(RELOAD_S / 2)
        assert the_request(dev_server).num_output_tokens == during
        assert (await reloading).status_code == 200
        await asyncio.sleep(0.1)
        assert the_request(dev_server).num_output_tokens > during  # and it goes on after
        in_flight.cancel()


async def prefix_hits(server: SimHttpServer, api: httpx.AsyncClient) -> int:
    """Prompt tokens of one more request for PROMPT found in the prefix cache."""
    before = server.engine.counters.prefix_cache_hits
    await complete(api, 1)
    return server.engine.counters.prefix_cache_hits - before


async def test_reset_prefix_cache_drops_the_hits(dev_server: SimHttpServer) -> None:
    async with http(dev_server) as api:
        await complete(api, 1)
        assert await prefix_hits(dev_server, api) == 48  # three blocks: one token is left over
        assert (await api.post("/reset_prefix_cache")).json() == {"success": True}
        assert await prefix_hits(dev_server, api) == 0


async def test_reset_prefix_cache_fails_while_a_request_holds_blocks(
    dev_server: SimHttpServer,
) -> None:
    async with http(dev_server) as api:
        in_flight = asyncio.create_task(complete(api, LONG))
        await until_generating(dev_server)
        assert (await api.post("/reset_prefix_cache")).json() == {"success": False}
        forced = await api.post("/reset_prefix_cache", params={"reset_running_requests": "true"})
        assert forced.json() == {"success": True}
        assert the_request(dev_server).num_preemptions == 1
        in_flight.cancel()


async def test_a_pause_clears_the_prefix_cache_a_reload_alone_does_not(
    dev_server: SimHttpServer, tmp_path: Path
) -> None:
    """As in vLLM 0.32: reload_weights leaves the cache; the relay clears it by pausing."""
    (tmp_path / "model.safetensors").write_bytes(safetensors())
    async with http(dev_server) as api:
        await complete(api, 1)
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
        await api.post("/collective_rpc", json=body)
        assert await prefix_hits(dev_server, api) == 48
        await api.post("/pause", params={"mode": "wait"})
        await api.post("/resume")
        assert await prefix_hits(dev_server, api) == 0
        await api.post("/pause", params={"mode": "wait", "clear_cache": "false"})
        await api.post("/resume")
        assert await prefix_hits(dev_server, api) == 48


async def test_a_bad_pause_mode_is_refused(dev_server: SimHttpServer) -> None:
    async with http(dev_server) as api:
        assert (await api.post("/pause", params={"mode": "sleep"})).status_code == 400
        assert (await api.get("/is_paused")).json() == {"is_paused": False}
