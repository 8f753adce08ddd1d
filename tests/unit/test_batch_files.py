"""A step's files carry the versions its samples were sampled under: per sample the oldest
of its turns' (what the trainer's importance ratio is taken against), per turn each."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workers.core.environments.base import Episode
from workers.core.orchestrator.batches import Batch, Sample
from workers.core.orchestrator.steps import StepTally
from workers.runtime.batch_files import TorchBatchWriter


def sample(index: int, versions: tuple[int, ...], dispatched: int = 5) -> Sample:
    episode = Episode(
        token_ids=(1, 2, 3),
        loss_mask=(False, True, True),
        logprobs=(0.0, -0.5, -0.5),
        reward=1.0,
        turns=max(1, len(versions)),
        turn_versions=versions,
    )
    return Sample("g1", index, "multiturn", "e0", dispatched, episode, advantage=0.0)


def test_batch_pt_samples_jsonl_and_report_carry_the_served_versions(tmp_path: Path) -> None:
    samples = (sample(0, (4, 5)), sample(1, (5, 5, 5)), sample(2, ()))
    batch = Batch(step=1, policy_version=5, samples=samples)
    report = StepTally(0.0).report(
        step=1, written_at=1.0, policy_version=5, samples=samples, cap=8, inflight=0, path="p"
    )
    assert report.sampled_versions == {"4": 1, "5": 2}
    writer = TorchBatchWriter(tmp_path)
    writer.write(batch, report)
    folder = Path(writer.path_of(1))
    tensors = torch.load(folder / "batch.pt")
    assert tensors["policy_version"].tolist() == [4, 5, 5]  # a turn-less sample: its dispatch
    assert tensors["turn_versions"].tolist() == [[4, 5, -1], [5, 5, 5], [5, -1, -1]]
    lines = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert [(r["policy_version"], r["turn_versions"], r["dispatch_version"]) for r in lines] == [
        (4, [4, 5], 5),
        (5, [5, 5, 5], 5),
        (5, [], 5),
    ]
    assert (
        json.loads((folder / "report.json").read_text())["sampled_versions"]
        == report.sampled_versions
    )
