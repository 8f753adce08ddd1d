"""The concurrency controller: one pure state machine around a pluggable policy.

Facts in (each poll's load samples, each completed episode, the in-flight count, operator
commands), decisions out (the cap, how many episodes to shed, and why). No I/O, no tasks: the
caller passes the time with every input, so the same controller runs in a Celery worker, in
tests and in the simulator's virtual time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from workers.core.control_records import (
    ControllerConfig,
    ControllerStats,
    EpisodeCompletion,
    check_inflight,
)
from workers.core.control_state import ControllerState, StoredPin
from workers.core.decisions import Cause, Decision, DecisionKind, Signal, change_reason
from workers.core.latches import DrainLatch, Freshness
from workers.core.overrides import Overrides, Pin
from workers.core.policies.base import Policy, PoolView, Proposal, Reading
from workers.core.polls import PollSummary
from workers.core.samples import LoadSample


class Controller:
    """Sizes the in-flight cap; a policy decides how, this class decides when.

    Rules shared by every policy:

    - Bounds: the cap always lies in [min_inflight, max_inflight]; min = max fixes it.
    - Start: ``initial_inflight`` when given, else derived once, on the first poll that reports
      capacity, as the pool's KV tokens / max model length (bounded by the per-episode token
      budget when set). It is never derived again, not even after a restore.
    - Growth is per completed episode: with n the in-flight count including that episode, the
      cap is multiplied by g ** (1 / n), g being what the last poll allows, so one full
      replacement of the pool multiplies it by g at any scale. Only when the last poll was
      complete (every engine fresh), allowed growth and is younger than ``poll_ttl``; no drain
      is in progress; n >= ``binding_fraction`` x cap (raising an unused cap inflates it); and
      the episode succeeded with tokens (a failing engine must not look idle). The cap is kept
      unrounded, so that small caps grow too.
    - A cut sets the drain latch. While it holds, no cut, no trim, no growth: signals in the
      pipeline from before the cut must not cut again. It releases when inflight <= cap and a
      poll is not hard. A cut or a trim never raises the cap.
    - Stale metrics: a poll with no fresh engine decides nothing and freezes the controller; a
      poll with a stale engine is incomplete and allows no growth; when no complete poll came
      for ``poll_ttl`` seconds, growth freezes and a decision says so.
    - Operator commands. ``pin(cap, ttl)`` holds the cap until ``release`` or the TTL; the
      policy keeps running on its own cap in the shadow, and decisions show both. ``set(cap)``
      moves the cap once (and ends a pin); adaptation continues from there. The shadow only
      grows on evidence: under a pin below it, the pool cannot bind the shadow cap.

    A hard signal does not pierce a pin. The operator chose that number, and a controller that
    overrides the operator in the very case where the operator is most likely looking cannot be
    trusted with a pin at all. Instead the shadow cap takes the cut (so the policy's state stays
    true), nothing is shed, and the decision is raised as an alert for the operator to act on.
    """

    def __init__(self, config: ControllerConfig, policy: Policy) -> None:
        self.config = config
        self.policy = policy
        self._level = self._bounded(float(config.initial_inflight or config.min_inflight))
        self._bootstrapped = False
        self._drain = DrainLatch()
        self._freshness = Freshness(config.poll_ttl)
        self._turnover = 0.0
        self._overrides = Overrides(config.min_inflight, config.max_inflight)
        self._growth = 1.0  # multiplier per turnover that the last poll allows
        self._reading: Reading | None = None
        self._poll: PollSummary | None = None
        self._inflight = 0
        self._cuts = 0
        self._trims = 0

    # -- what the caller reads -------------------------------------------------------------

    @property
    def cap(self) -> int:
        """The cap in force: the pin's while one holds, else the policy's."""
        pin = self._overrides.pin
        return pin.cap if pin is not None else self._policy_cap()

    @property
    def draining(self) -> bool:
        return self._drain.holding

    def make_stats(self, now: float) -> ControllerStats:
        poll, reading = self._poll, self._reading
        engine_requests = poll.engine_requests if poll is not None else 0
        return ControllerStats(
            at=now,
            policy=self.policy.name,
            cap=self.cap,
            policy_cap=self._policy_cap(),
            pinned_for=self._overrides.seconds_left(now),
            inflight=self._inflight,
            turnover=self._turnover,
            signal=Signal.UNKNOWN if reading is None else reading.signal,
            cause=Cause.STALE if reading is None else reading.cause,
            growth=self._growth,
            kv_capacity_tokens=None if poll is None else poll.kv_capacity_tokens,
            draining=self._drain.holding,
            frozen=self._freshness.frozen,
            engine_requests=engine_requests,
            untracked_requests=max(0, engine_requests - self._inflight),
            cuts=self._cuts,
            trims=self._trims,
            suppressed_cuts=self._drain.suppressed,
        )

    # -- inputs ----------------------------------------------------------------------------

    def on_poll(
        self, samples: Iterable[LoadSample], *, inflight: int, now: float
    ) -> tuple[Decision, ...]:
        """One poll of every engine. Bad samples raise ValueError and change nothing."""
        check_inflight(inflight)
        poll = PollSummary.from_samples(samples, now)
        self._inflight = inflight
        self._poll = poll
        out = self._expire_pin(now)
        if not self._bootstrapped:
            out += self._bootstrap(poll, now)
        if poll.blind:
            self._reading, self._growth = None, 1.0
            if not self._freshness.freeze():
                return out
            detail = f"no engine gave fresh metrics ({poll.stale} stale, {poll.down} down)"
            return (*out, self._stale_freeze(now, detail))
        self._drain.count_poll()
        view = self._view()
        reading = self._reading = self.policy.read(poll, view)
        self._growth = reading.growth if poll.complete else 1.0
        if poll.complete and self._freshness.complete(now):
            out += (self._decide(DecisionKind.STALE_THAW, Cause.FRESH, now, ""),)
        out += self._check_stall(now)
        if self._drain.holding:
            cap = self._policy_cap()
            if self._drain.release_if(hard=reading.hard, inflight=inflight, cap=cap):
                detail = f"inflight {inflight} <= cap {cap}, no overload"
                out += (self._decide(DecisionKind.DRAIN_RELEASE, Cause.DRAINED, now, detail),)
            return out
        proposal = self.policy.propose(reading, view)
        if proposal is not None:
            out += (self._apply(proposal, now),)
        return out

    def on_completion(self, completion: EpisodeCompletion, *, now: float) -> tuple[Decision, ...]:
        """One episode finished; it may grow the cap."""
        n = completion.pool
        self._inflight = n - 1
        self._turnover += 1.0 / n
        out = self._expire_pin(now) + self._check_stall(now)
        if not self._may_grow(completion, now):
            return out
        before = self._policy_cap()
        self._level = self._bounded(self._level * self._growth ** (1.0 / n))
        if self._policy_cap() == before:
            return out
        detail = f"x{self._growth:.3f} per turnover, {n} in flight"
        return (*out, self._decide(DecisionKind.GROW, Cause.CLEAR, now, detail, before=before))

    def pin(self, cap: int, ttl: float, *, now: float) -> Decision:
        """Hold the cap at ``cap`` for ``ttl`` seconds or until ``release``."""
        before = self.cap
        self._overrides.hold(cap, ttl, now)
        reason = f"Pinned concurrency {before} -> {cap} for {ttl:g} s (operator)"
        return self._record(DecisionKind.PIN, Cause.OPERATOR, now, before, reason)

    def set(self, cap: int, *, now: float) -> Decision:
        """Move the cap once; adaptation continues from the new value. Ends any pin."""
        self._overrides.check_cap(cap)
        before = self.cap
        ended = "; pin released" if self._overrides.drop() is not None else ""
        self._level = float(cap)
        self._bootstrapped = True
        reason = f"Set concurrency {before} -> {cap} (operator){ended}"
        return self._record(DecisionKind.SET, Cause.OPERATOR, now, before, reason)

    def release(self, *, now: float) -> Decision:
        """End a pin: the policy's cap, kept in the shadow, takes over."""
        before = self.cap
        if self._overrides.drop() is None:
            reason = f"Release: no pin was held, concurrency stays {before} (operator)"
        else:
            reason = f"Released pin: concurrency {before} -> {self.cap} (operator)"
        return self._record(DecisionKind.RELEASE, Cause.OPERATOR, now, before, reason)

    # -- persistence -----------------------------------------------------------------------

    def to_json(self, now: float) -> dict[str, Any]:
        """State for a restarted worker (see ``control_state``)."""
        held = self._overrides.pin
        pin = None if held is None else StoredPin(held.cap, held.until - now)
        return ControllerState(
            policy=self.policy.name,
            level=self._level,
            bootstrapped=self._bootstrapped,
            draining=self._drain.holding,
            polls_since_release=self._drain.polls_since_release,
            turnover=self._turnover,
            pin=pin,
            policy_state=self.policy.to_json(),
        ).to_json()

    @classmethod
    def restore(
        cls, config: ControllerConfig, policy: Policy, data: Mapping[str, Any], *, now: float
    ) -> tuple[Controller, Decision]:
        """Continue from ``to_json`` output; malformed data raises ValueError naming the fault.

        A stored cap outside the current bounds is brought inside them, and the decision says
        so. A pin that lapsed unnoticed is kept until the next input, which reports its expiry
        exactly as the stored controller would have.
        """
        state = ControllerState.from_json(data)
        if state.policy != policy.name:
            raise ValueError(f"stored state is policy {state.policy!r}, not {policy.name!r}")
        try:
            policy.load_json(state.policy_state)
        except KeyError as missing:
            raise ValueError(f"stored policy state lacks field {missing}") from None
        except (TypeError, ValueError) as bad:
            raise ValueError(f"stored policy state is malformed: {bad}") from None
        ctl = cls(config, policy)
        ctl._level = ctl._bounded(state.level)
        ctl._bootstrapped = state.bootstrapped
        ctl._drain = DrainLatch(
            holding=state.draining, polls_since_release=state.polls_since_release
        )
        ctl._turnover = state.turnover
        if state.pin is not None:
            until = now + max(0.0, state.pin.remaining)
            ctl._overrides.pin = Pin(int(ctl._bounded(state.pin.cap)), until)
        note = "" if ctl._level == state.level else f" (stored level {state.level:g} out of bounds)"
        reason = f"Continued at concurrency {ctl.cap} from stored state{note}"
        return ctl, ctl._record(DecisionKind.RESTORE, Cause.RESTORED, now, ctl.cap, reason)

    # -- rules -----------------------------------------------------------------------------

    def _bootstrap(self, poll: PollSummary, now: float) -> tuple[Decision, ...]:
        cfg = self.config
        before = self._policy_cap()
        if cfg.initial_inflight is not None:
            detail = f"initial_inflight {cfg.initial_inflight}"
        elif poll.kv_capacity_tokens and poll.max_model_len:
            episode = poll.max_model_len
            if cfg.episode_token_budget is not None:
                episode = min(episode, cfg.episode_token_budget)
            self._level = self._bounded(float(poll.kv_capacity_tokens // episode))
            detail = f"KV {poll.kv_capacity_tokens} tokens / {episode} tokens per episode"
        else:
            return ()
        self._bootstrapped = True
        return (self._decide(DecisionKind.BOOTSTRAP, Cause.START, now, detail, before=before),)

    def _check_stall(self, now: float) -> tuple[Decision, ...]:
        age = self._freshness.stalled_for(now)
        if age is None:
            return ()
        return (
            self._stale_freeze(
                now, f"no complete poll for {age:.1f} s (ttl {self.config.poll_ttl:g} s)"
            ),
        )

    def _stale_freeze(self, now: float, detail: str) -> Decision:
        return self._decide(DecisionKind.STALE_FREEZE, Cause.STALE, now, detail, alert=True)

    def _apply(self, proposal: Proposal, now: float) -> Decision:
        before = self._policy_cap()
        self._level = self._bounded(min(self._level, proposal.level))
        cut = proposal.kind is DecisionKind.CUT
        if cut:
            self._drain.set()
            self._cuts += 1
        else:
            self._trims += 1
        pinned = self._overrides.pin is not None
        shed = 0
        if proposal.shed and not pinned:
            shed = max(0, self._inflight - self._policy_cap())
        return self._decide(
            proposal.kind,
            proposal.cause,
            now,
            proposal.detail,
            before=before,
            shed=shed,
            alert=pinned and cut,
        )

    def _may_grow(self, completion: EpisodeCompletion, now: float) -> bool:
        return (
            self._bootstrapped
            and not self._drain.holding
            and self._freshness.fresh(now)
            and self._growth > 1.0
            and completion.ok
            and completion.tokens > 0
            and completion.pool >= self.config.binding_fraction * self._policy_cap()
        )

    def _expire_pin(self, now: float) -> tuple[Decision, ...]:
        lapsed = self._overrides.lapse(now)
        if lapsed is None:
            return ()
        reason = f"Pin expired: concurrency {lapsed.cap} -> {self.cap}"
        return (self._record(DecisionKind.PIN_EXPIRED, Cause.PIN_EXPIRED, now, lapsed.cap, reason),)

    # -- helpers ---------------------------------------------------------------------------

    def _view(self) -> PoolView:
        since = self._drain.polls_since_release
        return PoolView(self._level, self._inflight, since, self._turnover)

    def _policy_cap(self) -> int:
        return int(self._bounded(math.floor(self._level + 1e-9)))

    def _bounded(self, level: float) -> float:
        return min(float(self.config.max_inflight), max(float(self.config.min_inflight), level))

    def _decide(
        self,
        kind: DecisionKind,
        cause: Cause,
        now: float,
        detail: str,
        *,
        before: int | None = None,
        shed: int = 0,
        alert: bool = False,
    ) -> Decision:
        """A decision of the policy's: the reason speaks of the policy's cap ``before`` ->
        now, and names the pin when one holds the real cap."""
        policy_before = self._policy_cap() if before is None else before
        reason = change_reason(policy_before, self._policy_cap(), cause, detail)
        pin = self._overrides.pin
        if pin is None:
            return self._record(kind, cause, now, policy_before, reason, shed=shed, alert=alert)
        reason = f"Pinned at {pin.cap} by operator; policy: {reason}"
        return self._record(
            kind, cause, now, pin.cap, reason, shed=shed, alert=alert, shadow=policy_before
        )

    def _record(
        self,
        kind: DecisionKind,
        cause: Cause,
        now: float,
        cap_before: int,
        reason: str,
        *,
        shed: int = 0,
        alert: bool = False,
        shadow: int | None = None,
    ) -> Decision:
        """Any decision; while pinned, the shadow fields carry the policy's cap (``shadow`` is
        its value before, when it changed)."""
        pinned = self._overrides.pin is not None
        reading = self._reading
        figures: dict[str, float] = dict(reading.figures) if reading is not None else {}
        figures.update(inflight=self._inflight, turnover=self._turnover, growth=self._growth)
        return Decision(
            at=now,
            kind=kind,
            cause=cause,
            signal=Signal.UNKNOWN if reading is None else reading.signal,
            cap_before=cap_before,
            cap_after=self.cap,
            reason=reason,
            shed=shed,
            shadow_before=(self._policy_cap() if shadow is None else shadow) if pinned else None,
            shadow_after=self._policy_cap() if pinned else None,
            alert=alert,
            figures=figures,
        )
