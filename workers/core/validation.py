"""Range checks for config fields, with messages that name the field and its valid range."""

from __future__ import annotations


def check_range(name: str, value: float, low: float, high: float) -> None:
    """Raise ValueError unless ``low <= value <= high``."""
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
