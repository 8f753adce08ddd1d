"""Weight updates in virtual time: a trainer that acknowledges each step after its training
time, and each engine's weight routes over the simulated engine itself.

With these the benchmark runs the orchestrator's own relay (workers/core/orchestrator/
relay.py) in the loop, so a policy is measured while updates pause its engines: sync (every
engine at once) or rolling (one at a time, the others serving). An engine pauses as vLLM's
``/pause?mode=keep`` does: its requests frozen where they are and its prefix cache emptied
(the running batch preempted, recomputed after the resume); the reload holds it for its
``reload_s`` of virtual time. An engine that has run ahead of the shared clock (the driver
lets it run to its next finish) pauses from where it is, as a real engine takes a pause
between two of its steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.virtual.engines import EngineGone, SimEngine
from inference.sim.engine import Engine, PauseMode
from workers.core.clock import Clock
from workers.core.orchestrator.ports import Ack

CHECKPOINTS = "virtual://checkpoints"  # the trainer's checkpoints: names only, nothing is read


@dataclass
class VirtualTrainer:
    """Acknowledges step N with version N and a new checkpoint ``train_s`` after the
    orchestrator starts waiting for it (a trainer that trains each step once it is written)."""

    clock: Clock
    train_s: float

    async def wait(self, step: int) -> Ack:
        await self.clock.sleep(self.train_s)
        return Ack(step, f"{CHECKPOINTS}/v{step:06d}")


@dataclass
class VirtualWeights:
    """One simulated engine's weight routes, as the relay drives them over HTTP."""

    engine: SimEngine
    clock: Clock
    version: int = 0

    async def pause(self) -> None:
        served = self._serving()
        served.pause(PauseMode.KEEP, self.clock.now())
        served.reset_prefix_cache(reset_running_requests=True)

    async def reload(self, checkpoint: str) -> None:
        await self.clock.sleep(self._serving().load_weights(checkpoint))

    async def set_version(self, version: int) -> None:
        self._serving()
        self.version = version

    async def resume(self) -> None:
        self._serving().resume()

    async def is_paused(self) -> bool:
        return self._serving().is_paused

    async def served_version(self) -> int | None:
        """What the relay reads back after an update; None (base weights) before one."""
        self._serving()
        return self.version or None

    def _serving(self) -> Engine:
        """The engine's current incarnation (a restart builds a new one)."""
        if not self.engine.up:
            raise EngineGone(f"{self.engine.name} is down")
        return self.engine.virtual.engine
