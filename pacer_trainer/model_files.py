"""The model on disk: loaded from a Hugging Face folder, saved as checkpoints vLLM reloads.

A checkpoint is the base folder with new weights: its ``config.json``, tokenizer and other
files copied as they are (vLLM's ``reload_weights`` reads only the weights, but the run checks
for a whole model folder, and a copy keeps each checkpoint servable on its own), and one
``model.safetensors`` holding every tensor in the base's dtype under the base's names. It is
written into a hidden folder and renamed into place, so neither the run's check nor an
engine ever sees half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

WEIGHTS = "model.safetensors"
# Files of a model folder that are weights: not copied, since the checkpoint has its own.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
VERSION_DIGITS = 6
_PARTIAL = ".partial-"


class ModelError(ValueError):
    """The base model folder cannot be used; the message says why."""


def load_model(folder: Path) -> tuple[torch.nn.Module, torch.dtype]:
    """The causal LM in ``folder``, in float32 for training, and the dtype its weights are
    stored in (which checkpoints keep)."""
    config = folder / "config.json"
    if not config.is_file():
        raise ModelError(f"{folder}: not a model folder (no config.json)")
    try:
        document = json.loads(config.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as bad:
        raise ModelError(f"{config}: not JSON ({bad})") from None
    if not isinstance(document, dict):
        raise ModelError(f"{config}: not a JSON object")
    declared = document.get("dtype") or document.get("torch_dtype") or "float32"
    stored = getattr(torch, str(declared), None)
    if not isinstance(stored, torch.dtype):
        raise ModelError(f"{config}: unknown dtype {declared!r}")
    # Imported here: transformers takes seconds to import, and --help should not.
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    except (OSError, ValueError) as failed:
        raise ModelError(f"{folder}: the model cannot be loaded: {failed}") from None
    return model, stored


def checkpoint_name(version: int) -> str:
    return f"v{version:0{VERSION_DIGITS}d}"


def save_checkpoint(model: torch.nn.Module, base: Path, folder: Path, dtype: torch.dtype) -> Path:
    """``folder`` made a checkpoint of ``model`` (see the module's docstring); an existing
    one is replaced whole (a trainer resumed after a crash writes its version again)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.parent / f"{_PARTIAL}{folder.name}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        for item in base.iterdir():
            if item.is_file() and not _is_weights(item.name):
                shutil.copyfile(item, partial / item.name)
        save_file(weights(model, dtype), str(partial / WEIGHTS), metadata={"format": "pt"})
        if folder.exists():
            shutil.rmtree(folder)
        partial.rename(folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder


def weights(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The model's tensors by name, in ``dtype``, contiguous; a tensor tied to one already
    named (an output layer sharing the embedding) is left out, as Hugging Face saves it."""
    seen: set[int] = set()
    tensors = {}
    for name, tensor in model.state_dict().items():
        pointer = tensor.data_ptr()
        if pointer in seen:
            continue
        seen.add(pointer)
        tensors[name] = tensor.detach().to(dtype).contiguous()
    return tensors


def prune(root: Path, keep: int) -> list[Path]:
    """Every checkpoint under ``root`` but the newest ``keep`` removed; what was removed."""
    found = sorted(p for p in root.glob("v" + "[0-9]" * VERSION_DIGITS) if p.is_dir())
    gone = found[:-keep] if keep > 0 else []
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    return gone


def _is_weights(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES) or name in WEIGHT_INDEXES
