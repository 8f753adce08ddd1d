"""``python -m inference.sim`` serves, a stock OpenAI client gets completions, SIGTERM stops it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from inference.sim.__main__ import build_engine, build_parser
from inference.sim.dev_routes import DEV_MODE_ENV
from tests.conftest import REPO_ROOT, free_port, stop_process_group
from tests.model_folders import safetensors

STARTUP_TIMEOUT_S = 30.0


def test_the_cli_serves_completions_and_stops_on_sigterm() -> None:
    port = free_port()
    command = [sys.executable, "-m", "inference.sim", "--port", str(port)]
    command += ["--kv-tokens", "65536", "--block-size", "16", "--max-num-seqs", "256"]
    command += ["--preset", "h100-8b", "--seed", "3"]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                    break
            assert time.monotonic() < deadline, "simulator not healthy in time"
            time.sleep(0.1)
        api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        completion = api.completions.create(model="sim-model", prompt="Hello", max_tokens=5)
        assert completion.usage.completion_tokens == 5 and completion.choices[0].text
        chat = api.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert chat.choices[0].message.content
        process.terminate()
        assert process.wait(timeout=10) == 0
        output = process.stdout.read().decode() if process.stdout else ""
        assert "65536 KV tokens, block 16, max_num_seqs 256" in output
    finally:
        stop_process_group(process)


def test_options_override_the_preset_and_conflicts_are_refused() -> None:
    parser = build_parser()
    engine = build_engine(
        parser.parse_args(["--preset", "cpu-tiny", "--num-gpu-blocks-override", "33"])
    )
    assert (engine.config.num_gpu_blocks, engine.config.block_size) == (33, 128)
    assert engine.config.max_num_seqs == 1024
    with pytest.raises(ValueError, match="not both"):
        build_engine(parser.parse_args(["--kv-tokens", "4096", "--num-gpu-blocks-override", "9"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["--preset", "nope"])


def test_help_documents_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "h100-8b" in out and "cpu-tiny" in out and "max_num_seqs" in out


def start_cli(port: int, dev_mode: str | None, *options: str) -> subprocess.Popen[bytes]:
    """A simulator process, healthy; with ``VLLM_SERVER_DEV_MODE`` set to ``dev_mode``."""
    env = {key: value for key, value in os.environ.items() if key != DEV_MODE_ENV}
    if dev_mode is not None:
        env[DEV_MODE_ENV] = dev_mode
    command = [sys.executable, "-m", "inference.sim", "--port", str(port), *options]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if process.poll() is not None:
            return process
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return process
        assert time.monotonic() < deadline, "simulator not healthy in time"
        time.sleep(0.1)


def test_the_dev_routes_follow_the_environment_and_reload_takes_reload_s(
    tmp_path: Path,
) -> None:
    (tmp_path / "model.safetensors").write_bytes(safetensors())
    body = {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
    for dev_mode, status in ((None, 404), ("0", 404), ("1", 200)):
        port = free_port()
        process = start_cli(port, dev_mode, "--preset", "cpu-tiny", "--reload-s", "0.6")
        try:
            url = f"http://127.0.0.1:{port}"
            assert httpx.get(f"{url}/weight_info").status_code == status, dev_mode
            started = time.monotonic()
            reload = httpx.post(f"{url}/collective_rpc", json=body, timeout=10.0)
            assert reload.status_code == status, dev_mode
            if status == 200:
                assert 0.6 <= time.monotonic() - started < 1.5
        finally:
            stop_process_group(process)
    process = start_cli(free_port(), "yes")
    try:
        assert process.wait(timeout=10) == 2  # refused as vLLM refuses a non-integer
    finally:
        stop_process_group(process)
