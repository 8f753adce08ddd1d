"""Whether a ``.safetensors`` file is whole, from its header alone.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each
tensor's byte range in the data that follows, then the data. A trainer killed while saving
leaves a file cut short; vLLM finds that only when it reloads, mid-update. Reading the header
and comparing the ranges with the file's size catches it in microseconds, whatever the
file's size: the control plane refuses such a checkpoint before any engine is touched, and
the simulator's reload fails on it as vLLM's does.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

LENGTH_BYTES = 8  # the header's length, a little-endian u64
# The format's own bound on a header (safetensors refuses longer ones: 100 MB).
MAX_HEADER_BYTES = 100_000_000
METADATA = "__metadata__"  # the header's one entry that is not a tensor


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file, or None when it is."""
    size = path.stat().st_size
    with path.open("rb") as file:
        head = file.read(LENGTH_BYTES)
        if len(head) < LENGTH_BYTES:
            return f"{path.name} is {size} bytes: too short for a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if not 2 <= length <= MAX_HEADER_BYTES:
            return f"{path.name} is not safetensors (a header of {length} bytes)"
        if length > size - LENGTH_BYTES:
            return f"{path.name} is cut short: {size} of its {LENGTH_BYTES + length}+ bytes"
        try:
            header = json.loads(file.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return f"{path.name} is not safetensors (its header is not JSON)"
    if not isinstance(header, dict):
        return f"{path.name} is not safetensors (its header is not an object)"
    end = 0
    for name, tensor in header.items():
        if name == METADATA:
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]
        ):
            return f"{path.name}: tensor {name!r} has no byte range (data_offsets)"
        end = max(end, offsets[1])
    expected = LENGTH_BYTES + length + end
    if size < expected:
        return f"{path.name} is cut short: {size} of its {expected} bytes (a save not finished?)"
    return None
