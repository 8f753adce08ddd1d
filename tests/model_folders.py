"""Hugging Face model folders as a trainer writes its checkpoints, for the tests of what an
acknowledgement may name: the files vLLM looks for, with stand-in contents (nothing here is
loaded; the checks read the folder's shape, the config as JSON and each weights file's
safetensors header)."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def safetensors(values: int = 2) -> bytes:
    """A whole safetensors file of one float32 tensor of ``values`` zeros."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [values], "data_offsets": [0, 4 * values]}})
    return struct.pack("<Q", len(header)) + header.encode() + bytes(4 * values)


def model_folder(path: Path, *, shards: int = 0) -> Path:
    """``path`` made into a model folder: ``config.json`` and ``model.safetensors``, or with
    ``shards`` the shard files and their ``model.safetensors.index.json``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 64}))
    if not shards:
        (path / "model.safetensors").write_bytes(safetensors())
        return path
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    for name in names:
        (path / name).write_bytes(safetensors())
    weight_map = {f"layers.{i}.weight": name for i, name in enumerate(names)}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return path
