"""The concurrency controller: one pure state machine around a pluggable policy.

Facts in (each poll's load samples, each completed episode, the in-flight count, operator
commands), decisions out (the cap, how many episodes to shed, and why). No I/O, no tasks: the
caller passes the time with every input, so the same controller runs in a Celery worker, in
tests and in the simulator's virtual time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from workers.core.controller.capacity import PoolCapacity
from workers.core.controller.decision_records import GrowthLog, Moment
from workers.core.controller.latches import DrainLatch, Freshness, RequestWatch
from workers.core.controller.overrides import Overrides
from workers.core.controller.policies.base import (
    Policy,
    PoolView,
    Proposal,
    Reading,
    whole_episodes,
)
from workers.core.controller.polls import PollSummary
from workers.core.controller.pool_part import PoolPart
from workers.core.controller.records import (
    ControllerConfig,
    ControllerStats,
    EpisodeCompletion,
    check_inflight,
)
from workers.core.controller.start_cap import StartCap
from workers.core.controller.state import Kept, resume, save
from workers.core.decisions import Cause, Decision, DecisionKind, Signal
from workers.core.samples import LoadSample


class Controller:
    """Sizes the in-flight cap; a policy decides how, this class decides when.

    Rules shared by every policy:

    - Bounds: the cap always lies in [min_inflight, max_inflight]; min = max fixes it.
    - Start: ``initial_inflight``, or derived once from the engines' KV capacity (``StartCap``).
    - Growth per completed episode: with n the pool including it, the cap is multiplied by
      g ** (1 / n), g being what the last poll allows, so one replacement of the pool grows it
      by g at any scale. Only after a complete poll younger than ``poll_ttl``, outside a drain,
      with the cap binding (n >= ``binding_fraction`` x cap: raising an unused cap inflates
      it), for an episode that produced tokens (a failing engine must not look idle), and
      never past the reading's ceiling. The cap is kept unrounded so that small caps grow too,
      and recorded at most once per poll.
    - A cut sets the drain latch: no cut, trim or growth until it releases (``DrainLatch``).
      A cut or a trim never raises the cap.
    - Stale metrics (``Freshness``): with no fresh engine nothing is decided; with a stale one
      the poll is incomplete: it never reads clear, grows nothing and releases no drain; with
      no complete poll for ``poll_ttl`` seconds, growth freezes. Alerts.
    - Weight updates (``LoadSample.updating``): an engine paused by the run's relay, or just
      resumed, gives no numbers and is not stale; a poll whose only silent engines are
      updating decides nothing and restarts the stall clock instead of freezing, and the
      policy hears of it (``Policy.paused``): what it measures over time spans the pause.
    - Engines lost and back (``PoolCapacity``): an engine down for ``engine_lost_s`` no
      longer counts in the pool's KV capacity, and the cap is rescaled in proportion to what
      is left (a ``rescale`` decision); when it is up again the cap is rescaled back. An
      engine that joins the run's pool, or leaves it, is rescaled for the same way. The
      policy is told by how much (``Policy.pool_changed``).
    - Engines other runs share (``share``): the level is the pool's, in the pool's
      episodes, and the run's cap is its part of it. The pool's leader reads the poll with
      every run's episodes (its policy sees the pool as it would see a run alone), grows the
      level on its own completions when the pool binds, trims and cuts it, and sheds its own
      part of a cut's excess; a run that follows only reads, and takes the leader's level at
      every look.
    - Operator commands: ``pin(cap, ttl)`` holds the real cap until ``release`` or the TTL
      while the policy runs on in the shadow, which grows only on evidence; ``set(cap)`` moves
      the cap once and ends a pin.

    A hard signal does not pierce a pin: a controller that overrides the operator in the very
    case where the operator is most likely looking cannot be trusted with a pin at all. The
    shadow takes the cut (so the policy's state stays true), nothing is shed, and the decision
    is an alert. Since a shadow's sheds are not carried out, its drain is judged on the pool
    it would have had, at most its cap: the real pool would hold the latch forever.
    """

    def __init__(self, config: ControllerConfig, policy: Policy) -> None:
        self.config = config
        self.policy = policy
        self._part: PoolPart | None = None  # its part of a pool other runs share
        self._completed = 0  # episodes completed with tokens, since it was made
        self._level = self._bounded(float(config.initial_inflight or config.min_inflight))
        self._bootstrapped = False
        self._start = StartCap(config)
        self._drain = DrainLatch()
        self._freshness = Freshness(config.poll_ttl)
        self._requests = RequestWatch(config.over_permit_polls)
        self._capacity = PoolCapacity(config.engine_lost_s)
        self._grow_log = GrowthLog()
        self._turnover = 0.0
        self._overrides = Overrides(config.min_inflight, config.max_inflight)
        self._observed = False  # an observe-only wrapper keeps the real cap
        self._growth = 1.0  # multiplier per turnover that the last poll allows
        self._poll_turnovers = 0.0  # turnovers since the last poll read
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
    def ceiling(self) -> int | None:
        """Its part of the pool of engines other runs share (the policy's cap there, once
        the runs it displaces have freed it: ``PoolPart.held_back``); None while no other run
        shares them."""
        return None if self._part is None else self._within(self._part.of(self._level))

    @property
    def level(self) -> float:
        """The level the policy holds, unrounded: the run's own cap alone, the pool's in-flight
        level in a pool of shared engines (the leader's, as this run last took it)."""
        return self._level

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
            engine_waiting=0 if poll is None else poll.waiting,
            engine_requests_over_permits=max(0, engine_requests - self._inflight),
            cuts=self._cuts,
            trims=self._trims,
            suppressed_cuts=self._drain.suppressed,
        )

    def observe_only(self) -> None:
        """For the observe-only wrapper: from now on the cap is a shadow and sheds are moot."""
        self._observed = True

    # -- inputs ----------------------------------------------------------------------------

    def on_poll(
        self, samples: Iterable[LoadSample], *, inflight: int, now: float
    ) -> tuple[Decision, ...]:
        """One poll of every engine. Bad samples raise ValueError and change nothing."""
        check_inflight(inflight)
        samples = tuple(samples)
        poll = PollSummary.from_samples(samples, now)
        self._freshness.start(now)
        self._grow_log.new_interval()
        out = self._record_growth(now)
        self._inflight = inflight
        self._poll = poll
        out += self._expire_pin(now)
        if not self._bootstrapped:
            out += self._bootstrap(poll, now)
        out += self._rescale(samples, now)
        if poll.blind:
            self._reading, self._growth = None, 1.0
            if poll.paused:
                self._freshness.paused(now)
                self.policy.paused()
                return out
            if not self._freshness.freeze():
                return out
            detail = f"no engine gave fresh metrics ({poll.stale} stale, {poll.down} down)"
            return (*out, self._stale_freeze(now, detail))
        self._drain.count_poll()
        view = self._view()
        reading = self._reading = _incomplete_not_clear(self.policy.read(poll, view), poll)
        self._growth = reading.growth
        self._poll_turnovers = 0.0
        if poll.complete and self._freshness.complete(now):
            out += (self._moment(now).policy_record(DecisionKind.STALE_THAW, Cause.FRESH, ""),)
        out += self._check_stall(now) + self._check_requests(poll, now)
        if self._drain.holding:
            return out + self._release_drain(reading, poll, now)
        if self._following:
            return out
        proposal = self.policy.propose(reading, view)
        if proposal is not None:
            out += (self._apply(proposal, now),)
        return out

    def set_pool(self, engines: Iterable[str]) -> None:
        """The run's engines changed (an operator added or took one out): the next poll
        rescales the cap for the pool's new KV capacity (``PoolCapacity.declare``)."""
        self._capacity.declare(engines)

    def share(self, part: PoolPart | None, *, now: float, detail: str) -> tuple[Decision, ...]:
        """Its part of the pool of engines other runs share (``workers.core.sharing``), None
        when no other run shares them. A run that follows the pool's leader takes the
        leader's level as its own (it starts there, and that is its ``bootstrap``: it derives
        no start cap of its own); the leader keeps
        sizing the level itself. A fraction within ``SHARE_CHANGE`` of the one in force is not
        taken while the pool's runs, terms and leader stay the same (``PoolPart.after``). The
        cap becomes the part at once: a run whose part fell stops admitting and lets its
        excess complete, unless its own last poll read the engines overloaded, when the excess
        is shed as the leader's cut shed its own. A change of the cap, of the pool's
        membership or of who leads is a decision (``share``, with ``detail``; while in a pool
        every decision's figures carry the part, ``ceiling``), and growth not yet on record
        is recorded just before it: a later growth record would start from the cap before
        the part changed ("grow 191 -> 104: Decreased concurrency")."""
        unchanged = self._moment(now)  # where growth not yet on record ended
        before, was = self._policy_cap(), self._part
        if part is not None and was is not None:
            part = was.after(part)
        self._part = part
        starts = part is not None and not part.leads and not self._bootstrapped
        if part is not None and not part.leads:
            self._level, self._bootstrapped = part.level, True
        self._level = self._bounded(self._level)
        after = self._policy_cap()
        joined_or_left = (was is None) != (part is None)
        took_the_lead = was is not None and part is not None and was.leads != part.leads
        if after == before and not joined_or_left and not took_the_lead:
            return ()
        hard = self._reading is not None and self._reading.hard
        acting = not self._observed and self._overrides.pin is None
        shed = max(0, self._inflight - after) if hard and acting else 0
        text = f"{detail}: ceiling {_said(None if was is None else before)} -> "
        text += _said(None if part is None else after)
        if part is not None and part.held_back:
            text += f" of its part {self.ceiling}, the rest as the runs it displaces free it"
        kind, cause = DecisionKind.SHARE, Cause.SHARE
        if starts:  # its start, as a run alone starts with the cap it derives
            kind, cause = DecisionKind.BOOTSTRAP, Cause.START
            text = f"started at its part of the pool: {text}"
        growth = self._grow_log.record(unchanged)
        return (
            *growth,
            self._moment(now).policy_record(kind, cause, text, before=before, shed=shed),
        )

    def on_completion(self, completion: EpisodeCompletion, *, now: float) -> tuple[Decision, ...]:
        """One episode finished; it may grow the cap. The pool's leader counts it as one of
        the pool's episodes (``others_completed`` brings the other runs')."""
        self._freshness.start(now)
        self._inflight = completion.pool - 1
        ok = completion.ok and completion.tokens > 0
        self._completed += ok
        out: tuple[Decision, ...] = ()
        if self._overrides.due(now) or self._freshness.stalled(now):
            out = self._record_growth(now) + self._expire_pin(now) + self._check_stall(now)
        others = self._others_counted()
        demand = max(completion.pool, completion.demand) + others
        return out + self._turn(1, completion.pool + others, now, grows=ok, demand=demand)

    def others_completed(self, count: int, *, now: float) -> tuple[Decision, ...]:
        """``count`` episodes the other runs sharing the engines completed since the last look
        (their claims say): for the pool's leader, part of the pool's turnover, and of its
        growth as its own are, however few of the pool's episodes it holds itself."""
        check_inflight(count)
        if not count or self._part is None or not self._part.leads:
            return ()
        pool = self._inflight + self._part.others_inflight
        return self._turn(count, pool, now, grows=True, demand=pool)

    @property
    def completed(self) -> int:
        """Episodes it completed with tokens, since it was made: its claim says so."""
        return self._completed

    def _turn(
        self, count: int, pool: int, now: float, *, grows: bool, demand: int
    ) -> tuple[Decision, ...]:
        """``count`` completions out of a pool of ``pool`` episodes: the turnover advances by
        their part of it, and the level grows by the policy's rate for that part when the
        ``demand`` (the pool with the queued work pacing lets in next) binds the cap."""
        turnovers = count / max(1, pool)
        self._turnover += turnovers
        if not (grows and self._may_grow(demand, now)):
            return ()
        before = self._policy_cap()
        grown = self._level * self._growth ** self._licensed(turnovers)
        ceiling = None if self._reading is None else self._reading.ceiling
        if ceiling is not None:
            grown = min(grown, max(self._level, ceiling))
        self._level = self._bounded(grown)
        if self._policy_cap() != before and self._grow_log.grew(before):
            return self._record_growth(now)
        return ()

    def _others_counted(self) -> int:
        """The other runs' episodes in the pool the leader turns over; none for the others,
        whose turnover is their own episodes' (a follower's level is the leader's)."""
        part = self._part
        return part.others_inflight if part is not None and part.leads else 0

    def _licensed(self, turnovers: float) -> float:
        """The part of these turnovers that the last poll's evidence still covers."""
        limit = self.config.turnovers_per_poll
        used, self._poll_turnovers = self._poll_turnovers, self._poll_turnovers + turnovers
        return turnovers if not limit else max(0.0, min(turnovers, limit - used))

    def pin(self, cap: int, ttl: float, *, now: float) -> Decision:
        """Hold the cap at ``cap`` for ``ttl`` seconds or until ``release``."""
        before = self.cap
        self._overrides.hold(cap, ttl, now)
        reason = f"Pinned concurrency {before} -> {cap} for {ttl:g} s (operator)"
        return self._command(DecisionKind.PIN, now, before, reason)

    def set(self, cap: int, *, now: float) -> Decision:
        """Move the cap once; adaptation continues from the new value. Ends any pin. A run
        that leads a pool of shared engines moves the pool's level so that its part is
        ``cap``; one that follows is refused: its level is the leader's."""
        self._overrides.check_cap(cap)
        part = self._part
        if part is not None and not part.leads:
            raise ValueError(
                "another run's controller sizes the pool of engines this run shares: pin "
                "this run's cap, or change its share"
            )
        before = self.cap
        ended = "; pin released" if self._overrides.drop() is not None else ""
        level = float(cap) if part is None else cap / part.fraction
        self._level, self._bootstrapped = self._bounded(level), True
        reason = f"Set concurrency {before} -> {cap} (operator){ended}"
        return self._command(DecisionKind.SET, now, before, reason)

    def release(self, *, now: float) -> Decision:
        """End a pin: the policy's cap, kept in the shadow, takes over."""
        before = self.cap
        if self._overrides.drop() is None:
            reason = f"Release: no pin was held, concurrency stays {before} (operator)"
        else:
            reason = f"Released pin: concurrency {before} -> {self.cap} (operator)"
        return self._command(DecisionKind.RELEASE, now, before, reason)

    # -- persistence (the format and its checks live in ``control_state``) ------------------

    def to_json(self, now: float) -> dict[str, Any]:
        """State for a restarted worker."""
        pin = self._overrides.pin
        kept = Kept(
            self._level,
            self._bootstrapped,
            self._turnover,
            self._drain,
            pin,
            cuts=self._cuts,
            trims=self._trims,
        )
        return save(self.policy, kept, now=now)

    @classmethod
    def restore(
        cls,
        config: ControllerConfig,
        policy: Policy,
        data: Mapping[str, Any],
        *,
        now: float,
        away: float = 0.0,
    ) -> tuple[Controller, Decision]:
        """Continue from ``to_json`` output saved ``away`` seconds ago (the rules are
        ``control_state.resume``'s); the stall clock starts now."""
        kept, note = resume(config, policy, data, now=now, away=away)
        ctl = cls(config, policy)
        ctl._level, ctl._bootstrapped, ctl._turnover = kept.level, kept.bootstrapped, kept.turnover
        ctl._drain, ctl._overrides.pin = kept.drain, kept.pin
        ctl._cuts, ctl._trims = kept.cuts, kept.trims
        ctl._freshness = Freshness(config.poll_ttl, since=now)
        reason = f"Continued at concurrency {ctl.cap} from stored state{note}"
        return ctl, ctl._moment(now).record(DecisionKind.RESTORE, Cause.RESTORED, ctl.cap, reason)

    # -- rules -----------------------------------------------------------------------------

    def _bootstrap(self, poll: PollSummary, now: float) -> tuple[Decision, ...]:
        start = self._start.derive(poll, now)
        if start is None:
            return ()
        before, (level, detail) = self._policy_cap(), start
        self._level, self._bootstrapped = self._bounded(level), True
        moment = self._moment(now)
        return (moment.policy_record(DecisionKind.BOOTSTRAP, Cause.START, detail, before=before),)

    def _rescale(self, samples: tuple[LoadSample, ...], now: float) -> tuple[Decision, ...]:
        change = self._capacity.observe(samples, now, self._level)
        if change is None or not self._bootstrapped or not self.policy.rescaled or self._following:
            return ()
        before = self._policy_cap()
        self._level = self._bounded(change.scaled(self._level))
        self.policy.pool_changed(change.factor)
        moment = self._moment(now)
        return (
            moment.policy_record(DecisionKind.RESCALE, change.cause, change.detail, before=before),
        )

    def _release_drain(
        self, reading: Reading, poll: PollSummary, now: float
    ) -> tuple[Decision, ...]:
        acting = not self._observed and self._overrides.pin is None
        detail = self._drain.release(
            hard=reading.hard,
            complete=poll.complete,
            inflight=self._inflight,
            cap=self._policy_cap(),
            stuck_polls=self.config.drain_stuck_polls,
            shadow=not acting,
        )
        if detail is None:
            return ()
        return (self._moment(now).policy_record(DecisionKind.DRAIN_RELEASE, Cause.DRAINED, detail),)

    def _check_stall(self, now: float) -> tuple[Decision, ...]:
        detail = self._freshness.freeze_if_stalled(now)
        return () if detail is None else (self._stale_freeze(now, detail),)

    def _check_requests(self, poll: PollSummary, now: float) -> tuple[Decision, ...]:
        others = 0 if self._part is None else self._part.others_may_hold
        reason = self._requests.observe(poll.engine_requests, self._inflight + others)
        if reason is None:
            return ()
        kind, cause = DecisionKind.RECONCILE, Cause.REQUESTS_OVER_PERMITS
        return (self._moment(now).record(kind, cause, self.cap, reason, alert=True),)

    def _stale_freeze(self, now: float, detail: str) -> Decision:
        kind, cause = DecisionKind.STALE_FREEZE, Cause.STALE
        return self._moment(now).policy_record(kind, cause, detail, alert=True)

    def _apply(self, proposal: Proposal, now: float) -> Decision:
        before = self._policy_cap()
        self._level = self._bounded(min(self._level, proposal.level))
        cut = proposal.kind is DecisionKind.CUT
        self._cuts, self._trims = self._cuts + cut, self._trims + (not cut)
        if cut:
            self._drain.set()
        pinned = self._overrides.pin is not None
        acted = proposal.shed and not pinned and not self._observed
        shed = max(0, self._inflight - self._policy_cap()) if acted else 0
        kind, cause, detail = proposal.kind, proposal.cause, proposal.detail
        moment = self._moment(now)
        return moment.policy_record(
            kind, cause, detail, before=before, shed=shed, alert=pinned and cut
        )

    def _may_grow(self, pool: int, now: float) -> bool:
        """The binding check reads the pool: a leader whose own part is idle still grows the
        level the other runs fill. Not while a run sharing the engines is overdue: its host
        may be dead and its episodes aborted, and growth on engines they emptied would hand
        the pool a level its load never earned when the claim goes stale and the freed part
        comes back."""
        return (
            self._bootstrapped
            and not self._following
            and (self._part is None or self._part.counted)
            and not self._drain.holding
            and self._freshness.fresh(now)
            and self._growth > 1.0
            and pool >= self.config.binding_fraction * self._level_cap()
        )

    def _expire_pin(self, now: float) -> tuple[Decision, ...]:
        lapsed = self._overrides.lapse(now)
        if lapsed is None:
            return ()
        reason = f"Pin expired: concurrency {lapsed.cap} -> {self.cap}"
        kind, cause = DecisionKind.PIN_EXPIRED, Cause.PIN_EXPIRED
        return (self._moment(now).record(kind, cause, lapsed.cap, reason),)

    # -- records ---------------------------------------------------------------------------

    def _record_growth(self, now: float) -> tuple[Decision, ...]:
        return self._grow_log.record(self._moment(now))

    def _command(self, kind: DecisionKind, now: float, before: int, reason: str) -> Decision:
        """An operator's decision; it takes in growth not yet on record, and says so."""
        start = self._grow_log.take()
        grown = (
            "" if start is None else f"; the policy had grown it from {start} since its last record"
        )
        return self._moment(now).record(kind, Cause.OPERATOR, before, reason + grown)

    def _moment(self, now: float) -> Moment:
        pin = self._overrides.pin
        return Moment(
            at=now,
            reading=self._reading,
            inflight=self._inflight,
            turnover=self._turnover,
            growth=self._growth,
            policy_cap=self._policy_cap(),
            pin_cap=None if pin is None else pin.cap,
            ceiling=self.ceiling,
        )

    # -- helpers ---------------------------------------------------------------------------

    @property
    def _following(self) -> bool:
        """Another run's policy sizes the pool this one shares; this one holds its part."""
        return self._part is not None and not self._part.leads

    def _view(self) -> PoolView:
        """What the policy reads: the pool's episodes, its own with the other runs'."""
        since = self._drain.polls_since_release
        part = self._part
        inflight = self._inflight + (0 if part is None else part.others_inflight)
        counted = part is None or part.counted
        return PoolView(
            self._level, inflight, since, self._turnover, self._drain.holding, counted=counted
        )

    def _level_cap(self) -> int:
        """The level in whole episodes: the run's cap alone, the pool's in a pool."""
        return int(self._bounded(whole_episodes(self._level)))

    def _policy_cap(self) -> int:
        part = self._part
        if part is None:
            return self._level_cap()
        return self._within(part.cap(self._level))

    def _within(self, cap: int) -> int:
        return min(self.config.max_inflight, max(self.config.min_inflight, cap))

    def _bounded(self, level: float) -> float:
        low = float(self.config.min_inflight)
        most = self.config.max_inflight if self._part is None else self._part.most
        return min(max(low, float(most)), max(low, level))


def _said(cap: int | None) -> str:
    return "none" if cap is None else str(cap)


def _incomplete_not_clear(reading: Reading, poll: PollSummary) -> Reading:
    """A poll missing a stale engine's numbers may hide the overload on that engine, so it
    never reads clear, whatever the fresh engines say; worse readings stand as they are."""
    if poll.complete or reading.signal is not Signal.CLEAR:
        return reading
    return replace(reading, signal=Signal.SOFT, cause=Cause.STALE, growth=1.0)
