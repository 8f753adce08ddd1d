"""The engines a run is configured with: where they are and what they serve."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from workers.core.samples import EngineRole


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One vLLM server as configured; data-parallel ranks behind it are found by scraping."""

    name: str  # stable id; an engine /metrics labels with engine="N" is "<name>/N"
    base_url: str  # e.g. "http://engine-0:8000", without /metrics
    role: EngineRole = EngineRole.UNIFIED
    # The engine's --max-num-seqs, per rank; vLLM does not expose it in /metrics.
    max_num_seqs: int | None = None

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"engine name must be non-empty without '/', got {self.name!r}")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL with a host, got {self.base_url!r}")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
