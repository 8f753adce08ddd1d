"""The fixed policy: the cap never moves on its own.

A fixed run sets ``min_inflight == max_inflight`` so the controller's bounds hold the cap; the
policy still reads every poll with the reference's signal so that dashboards show the same load
picture for a fixed run as for an adaptive one, which is what makes them comparable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from workers.core.controller.policies.base import PoolView, Proposal, Reading
from workers.core.controller.policies.reference import ReferenceConfig
from workers.core.controller.policies.signals import OverloadTracker, classify, overload_figures
from workers.core.controller.polls import PollSummary


class FixedPolicy:
    """Reads like the reference, never proposes, never grows."""

    name: ClassVar[str] = "fixed"
    rescaled: ClassVar[bool] = True

    def __init__(self, signals: ReferenceConfig | None = None) -> None:
        self._signals = signals or ReferenceConfig()
        self._overload = OverloadTracker(
            queue_ratio=self._signals.queue_ratio, queue_polls=self._signals.queue_polls
        )

    def read(self, poll: PollSummary, pool: PoolView) -> Reading:
        overload = self._overload.update(poll, draining=pool.draining)
        signal, cause = classify(overload, poll, self._signals.soft_kv_usage)
        return Reading(signal, cause, 1.0, overload_figures(overload, poll))

    def propose(self, reading: Reading, pool: PoolView) -> Proposal | None:
        return None

    def pool_changed(self, factor: float) -> None:
        """A fixed cap is held by the bounds; the rescale cannot move it either."""

    def paused(self) -> None:
        """It measures nothing over time."""

    def to_json(self) -> dict[str, Any]:
        return {"overload": self._overload.to_json()}

    def load_json(self, data: Mapping[str, Any]) -> None:
        self._overload.load_json(data["overload"])
