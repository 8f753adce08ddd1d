"""Engine restarts as the monitor sees them: zero deltas, a warning, /v1/models read again.

A restart shows as counters going backwards or, once the relaunched engine's totals have passed
the old ones, only as new ``_created`` stamps on its series.
"""

from __future__ import annotations

import json

import httpx

from inference.metrics.warnings import WarningKind
from tests.unit.metrics.monitor_harness import Answer, Engines, build, by_id, spec
from tests.unit.metrics.texts import exposition
from workers.core.clock import ManualClock


async def test_a_restart_reads_as_zero_deltas_warns_and_rereads_max_model_len() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", exposition(preemptions=50, generated=9000))
    client, monitor = build(engines, [spec("e")], clock)
    async with client:
        await monitor.poll()
        clock.advance(5.0)
        engines.serve("e", exposition(preemptions=0, generated=40))
        result = await monitor.poll()
        await monitor.poll()
    sample = by_id(result)["e/0"]
    assert sample.restarted
    assert (sample.num_preemptions, sample.generation_tokens) == (0, 0)
    assert [w.kind for w in result.warnings] == [WarningKind.ENGINE_RESTART]
    assert engines.requests["e", "/v1/models"] == 2


def stamped(created: float, generated: int) -> str:
    """One engine life's text: its counters made at ``created``, ``generated`` tokens since."""
    stamp = f'vllm:generation_tokens_created{{engine="0",model_name="m"}} {created}\n'
    return exposition(generated=generated, extra=stamp)


def models(max_model_len: int) -> Answer:
    body = json.dumps({"data": [{"id": "m", "max_model_len": max_model_len}]})
    return lambda: httpx.Response(200, text=body)


async def test_a_restart_shown_by_created_stamps_rereads_max_model_len_in_the_same_poll() -> None:
    """Relaunched with another --max-model-len and busier than before: the restart's own
    sample carries the new length, and the poll after it asks for no more."""
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", stamped(1_700_000_000.5, generated=40))
    engines.models["e"] = models(4096)
    client, monitor = build(engines, [spec("e")], clock)
    async with client:
        first = by_id(await monitor.poll())["e/0"]
        engines.serve("e", stamped(1_700_000_004.5, generated=300))
        engines.models["e"] = models(2048)
        clock.advance(5.0)
        result = await monitor.poll()
        clock.advance(5.0)
        engines.serve("e", stamped(1_700_000_004.5, generated=350))
        after = by_id(await monitor.poll())["e/0"]
    sample = by_id(result)["e/0"]
    assert first.max_model_len == 4096
    assert (sample.restarted, sample.generation_tokens, sample.max_model_len) == (True, 0, 2048)
    assert [w.kind for w in result.warnings] == [WarningKind.ENGINE_RESTART]
    assert (after.restarted, after.generation_tokens, after.max_model_len) == (False, 50, 2048)
    assert engines.requests["e", "/v1/models"] == 2


async def test_a_failed_reread_after_a_restart_keeps_the_old_length_and_retries() -> None:
    engines, clock = Engines(), ManualClock(1000.0)
    engines.serve("e", stamped(1_700_000_000.5, generated=40))
    client, monitor = build(engines, [spec("e")], clock)
    async with client:
        await monitor.poll()
        engines.serve("e", stamped(1_700_000_004.5, generated=300))
        engines.models["e"] = lambda: httpx.Response(503)
        clock.advance(5.0)
        failed = await monitor.poll()
        engines.models["e"] = models(2048)
        clock.advance(5.0)
        retried = await monitor.poll()
    assert by_id(failed)["e/0"].max_model_len == 4096
    assert "HTTP 503" in (failed.endpoints[0].models_error or "")
    assert by_id(retried)["e/0"].max_model_len == 2048
    assert retried.endpoints[0].models_error is None
    assert engines.requests["e", "/v1/models"] == 3
