"""Durations as people type them: ``90``, ``90s``, ``10m``, ``2h``, ``1d``, ``1h30m``."""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> float:
    """Seconds; ValueError for anything else."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{text!r} is not a duration (e.g. 90, 90s, 10m, 2h, 1d, 1h30m)")
    return sum(float(number) * UNITS[unit] for number, unit in parts)
