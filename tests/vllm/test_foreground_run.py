"""A short run against the real vLLM CPU engine with the tiny model: token ids, logprobs and
tokenization as vLLM gives them, all the way into the batch files. The tiny model samples
ids its tokenizer has no piece for, with logprobs asked for: the input that kills an
unpatched vLLM's API server, so the run finishing shows the plugin at work inside a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.vllm.conftest import Engine

pytestmark = pytest.mark.vllm


def test_a_two_step_arithmetic_run_on_real_vllm_writes_whole_batches(
    engine: Engine, tiny_model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "vllm.toml"
    config.write_text(
        f"""
name = "vllm-arithmetic"
batch_size = 8
group_size = 4
max_steps = 2
[concurrency]
max_inflight = 16
poll_interval_s = 1.0
[[env]]
name = "arithmetic"
[env.sampling]
max_tokens = 12
[[engine]]
url = "{engine.url}"
"""
    )
    output = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "workers.run", str(config), "--output", str(output)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tokenizer = json.loads((tiny_model / "tokenizer.json").read_text())
    pieces = len(tokenizer["model"]["vocab"]) + len(tokenizer.get("added_tokens", []))
    out_of_vocabulary = 0
    for step in (1, 2):
        folder = output / "steps" / f"{step:06d}"
        batch = torch.load(folder / "batch.pt")
        samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        assert batch["token_ids"].shape[0] == len(samples) == 8
        for row, sample in enumerate(samples):
            mask = batch["loss_mask"][row]
            assert int(mask.sum()) == sample["generated_tokens"] > 0
            assert (batch["logprobs"][row][mask] < 0).all()  # vLLM's own logprobs
            assert sample["metadata"]["question"]  # the task, checked against the answer
            out_of_vocabulary += int((batch["token_ids"][row][mask] >= pieces).sum())
    assert out_of_vocabulary > 0  # sampled, with logprobs, and the engine lived on
