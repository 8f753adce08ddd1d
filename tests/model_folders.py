"""Hugging Face model folders as a trainer writes its checkpoints, for the tests of what an
acknowledgement may name: the files vLLM looks for, with stand-in contents (nothing here is
loaded; the checks read the folder's shape, and the config as JSON)."""

from __future__ import annotations

import json
from pathlib import Path


def model_folder(path: Path, *, shards: int = 0) -> Path:
    """``path`` made into a model folder: ``config.json`` and ``model.safetensors``, or with
    ``shards`` the shard files and their ``model.safetensors.index.json``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 64}))
    if not shards:
        (path / "model.safetensors").write_bytes(b"weights")
        return path
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    for name in names:
        (path / name).write_bytes(b"weights")
    weight_map = {f"layers.{i}.weight": name for i, name in enumerate(names)}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return path
