"""``python -m inference.sim`` serves, a stock OpenAI client gets completions, SIGTERM stops it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import httpx
import openai
import pytest

from inference.sim.__main__ import build_engine, build_parser
from tests.conftest import REPO_ROOT, free_port, stop_process_group

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
