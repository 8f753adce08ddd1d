"""Every decision of a run delivered to many websocket clients at once: how fast, and whether
all of them get all of it.

    python -m bench.websocket_fanout [--clients 100] [--decisions 60]

Starts a whole stack in processes (bench.stack), creates a run through the API, connects
``--clients`` websocket clients to the run's live feed (token auth), then sets the cap once
a second by the API until the run has made ``--decisions`` decisions after the clients
joined (its own growth decisions count too). Each client notes when each decision arrives;
a decision's delivery latency is its arrival less the time the worker made it (same
machine, same clock). Printed: p50 and p99 over every (client, decision) pair, and how many
of the pairs arrived at all (live events are at most once; pages re-read the API besides).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import datetime

import httpx
import websockets

from bench.override_latency import percentile, run_config
from bench.stack import pacer_stack, wait_until

CONNECT_GAP_S = 0.05  # between two clients' connects


async def follow(url: str, origin: str, arrivals: dict[int, float], done: asyncio.Event) -> None:
    async with websockets.connect(url, origin=origin, max_queue=None) as socket:
        while not done.is_set():
            try:
                async with asyncio.timeout(0.5):
                    message = json.loads(await socket.recv())
            except TimeoutError:
                continue
            if message.get("type") == "decision":
                arrivals.setdefault(message["data"]["id"], time.time())


async def drive(
    api: httpx.AsyncClient, ws_url: str, run_id: int, clients: int, wanted: int
) -> tuple[list[dict[int, float]], list[dict[str, object]]]:
    arrivals: list[dict[int, float]] = [{} for _ in range(clients)]
    done = asyncio.Event()
    origin = str(api.base_url).rstrip("/")  # the web server checks it, as for a browser
    followers = []
    for mine in arrivals:  # as pages open, not all in one instant
        followers.append(asyncio.ensure_future(follow(ws_url, origin, mine, done)))
        await asyncio.sleep(CONNECT_GAP_S)
    await asyncio.sleep(3.0)  # every client joined its group
    joined = datetime.now().astimezone()
    decisions = f"/api/runs/{run_id}/decisions/"
    made: list[dict[str, object]] = []
    n = 0
    while len(made) < wanted:
        n += 1
        body = {"mode": "set", "cap": 16 + n % 16, "reason": f"fan-out {n}"}
        (await api.post(f"/api/runs/{run_id}/override/", json=body)).raise_for_status()
        await asyncio.sleep(1.0)
        page = (
            await api.get(decisions, params={"since": joined.isoformat(), "page_size": 1000})
        ).json()
        made = page["results"]
    await asyncio.sleep(3.0)  # the last ones reach everyone
    done.set()
    await asyncio.gather(*followers)
    return arrivals, made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--decisions", type=int, default=60)
    args = parser.parse_args()
    with pacer_stack(2, PACER_OVERRIDE_RATE="10000/minute") as stack:
        headers = {"Authorization": f"Token {stack.token}"}
        with httpx.Client(base_url=stack.web_url, headers=headers, timeout=30.0) as api:
            run = api.post("/api/runs/", json=run_config(stack.engine_urls))
            run.raise_for_status()
            run_id = run.json()["id"]
            wait_until(
                lambda: api.get(f"/api/runs/{run_id}/decisions/").json()["results"],
                "the run to start",
                timeout=120,
            )
        ws_url = (
            stack.web_url.replace("http://", "ws://") + f"/ws/runs/{run_id}/?token={stack.token}"
        )

        async def go() -> tuple[list[dict[int, float]], list[dict[str, object]]]:
            async with httpx.AsyncClient(
                base_url=stack.web_url, headers=headers, timeout=30.0
            ) as api:
                result = await drive(api, ws_url, run_id, args.clients, args.decisions)
                await api.post(f"/api/runs/{run_id}/stop/", json={"reason": "benchmark done"})
                return result

        arrivals, made = asyncio.run(go())
    made_at = {int(d["id"]): datetime.fromisoformat(str(d["at"])).timestamp() for d in made}
    latencies = [
        (arrived - made_at[decision]) * 1000
        for mine in arrivals
        for decision, arrived in mine.items()
        if decision in made_at
    ]
    pairs = len(made_at) * args.clients
    print(f"{args.clients} websocket clients, {len(made_at)} decisions of one run:")
    print(
        f"  delivered {len(latencies)} of {pairs} (client, decision) pairs "
        f"({100 * len(latencies) / pairs:.1f} %)"
    )
    print(
        f"  latency from the decision to its arrival: p50 {statistics.median(latencies):.0f} ms, "
        f"p99 {percentile(latencies, 0.99):.0f} ms, max {max(latencies):.0f} ms"
    )


if __name__ == "__main__":
    main()
