"""Training batches on disk, one folder per step, written whole or not at all.

    <output>/steps/000003/batch.pt       tensors, saved with torch
    <output>/steps/000003/samples.jsonl  one line per sample: where it came from, its score
    <output>/steps/000003/report.json    the step's report (StepReport's fields), from which
                                         a run killed before recording the step rebuilds it

``batch.pt`` holds ``token_ids``, ``loss_mask`` and ``logprobs`` as [samples, longest]
tensors padded on the right (``lengths`` gives each sample's own), and ``advantages``,
``rewards`` and ``policy_version`` per sample: the oldest version any of its turns was
sampled under, as its engine served it (with weights relayed; else the trainer's version
when its group was dispatched), which is what an importance ratio must be taken against.
``turn_versions`` [samples, most turns] has each turn's version, -1 past a sample's last
turn. ``samples.jsonl`` has the same per sample, and ``dispatch_version``.

A step is written into a temporary folder and renamed into place: a reader (a trainer, a
resumed run) sees a step whole or not at all, and a step already there is never written
again. The writer's ``fence`` is called right before the rename: a host whose tenure ended
while it was writing leaves no step behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from workers.core.orchestrator.batches import Batch, Sample, StepReport

STEP_DIGITS = 6
_STEP_DIR = re.compile(rf"^\d{{{STEP_DIGITS}}}$")
_PARTIAL = ".partial-"  # prefix of a step still being written
REPORT = "report.json"  # the step's report, in its folder


class TorchBatchWriter:
    def __init__(self, root: Path, *, fence: Callable[[], None] = lambda: None) -> None:
        """``fence`` raises when the step must not be put in place after all."""
        self._fence = fence
        self.steps_dir = root / "steps"
        self.steps_dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.steps_dir.glob(f"{_PARTIAL}*"):
            shutil.rmtree(leftover)  # a write a killed process never finished

    def written_steps(self) -> set[int]:
        return {int(p.name) for p in self.steps_dir.iterdir() if _STEP_DIR.match(p.name)}

    def path_of(self, step: int) -> str:
        return str(self._folder(step))

    def _folder(self, step: int) -> Path:
        return self.steps_dir / f"{step:0{STEP_DIGITS}d}"

    def write(self, batch: Batch, report: StepReport) -> None:
        final = self._folder(batch.step)
        if final.exists():
            raise FileExistsError(f"step {batch.step} is written already at {final}")
        partial = self.steps_dir / f"{_PARTIAL}{batch.step}-{os.getpid()}"
        partial.mkdir()
        try:
            with (partial / "batch.pt").open("wb") as tensors:
                torch.save(batch_tensors(batch), tensors)
                _sync(tensors)
            with (partial / "samples.jsonl").open("w") as lines:
                for sample in batch.samples:
                    lines.write(json.dumps(sample_record(batch, sample)) + "\n")
                _sync(lines)
            with (partial / REPORT).open("w") as record:
                json.dump(dataclasses.asdict(report), record)
                _sync(record)
            _sync_dir(partial)
            self._fence()
            partial.rename(final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        _sync_dir(self.steps_dir)


def batch_tensors(batch: Batch) -> dict[str, torch.Tensor | int]:
    samples = batch.samples
    longest = max(len(s.episode.token_ids) for s in samples)
    shape = (len(samples), longest)
    token_ids = torch.zeros(shape, dtype=torch.int64)
    loss_mask = torch.zeros(shape, dtype=torch.bool)
    logprobs = torch.zeros(shape, dtype=torch.float32)
    for row, sample in enumerate(samples):
        episode = sample.episode
        n = len(episode.token_ids)
        token_ids[row, :n] = torch.tensor(episode.token_ids, dtype=torch.int64)
        loss_mask[row, :n] = torch.tensor(episode.loss_mask, dtype=torch.bool)
        logprobs[row, :n] = torch.tensor(episode.logprobs, dtype=torch.float32)
    return {
        "step": batch.step,
        "token_ids": token_ids,
        "loss_mask": loss_mask,
        "logprobs": logprobs,
        "lengths": torch.tensor([len(s.episode.token_ids) for s in samples], dtype=torch.int64),
        "advantages": torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        "rewards": torch.tensor([s.episode.reward for s in samples], dtype=torch.float32),
        "policy_version": torch.tensor([s.sampled_version for s in samples], dtype=torch.int64),
        "turn_versions": _turn_versions(samples),
    }


def _turn_versions(samples: tuple[Sample, ...]) -> torch.Tensor:
    """Each sample's per-turn versions, padded with -1; its dispatch version for a sample
    whose turns carry none."""
    rows = [s.episode.turn_versions or (s.policy_version,) for s in samples]
    table = torch.full((len(rows), max(len(r) for r in rows)), -1, dtype=torch.int64)
    for index, row in enumerate(rows):
        table[index, : len(row)] = torch.tensor(row, dtype=torch.int64)
    return table


def sample_record(batch: Batch, sample: Sample) -> dict[str, object]:
    episode = sample.episode
    return {
        "step": batch.step,
        "group_id": sample.group_id,
        "index": sample.index,
        "env": sample.env,
        "engine": sample.engine,
        "policy_version": sample.sampled_version,
        "turn_versions": list(episode.turn_versions),
        "dispatch_version": sample.policy_version,
        "reward": episode.reward,
        "advantage": sample.advantage,
        "length": len(episode.token_ids),
        "generated_tokens": episode.tokens,
        "turns": episode.turns,
        "metadata": dict(episode.metadata),
    }


def _sync(file: IO[Any]) -> None:
    file.flush()
    os.fsync(file.fileno())


def _sync_dir(path: Path) -> None:
    """Make a rename durable: the folder's own entry, not only the files, reaches the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
