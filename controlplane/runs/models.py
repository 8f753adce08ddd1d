"""Runs and what they leave behind: decisions, engine samples, steps, evaluation waves and
operator overrides; and the engines a run can name.

Time-series rows (decisions, samples) are written by the run's worker in batches and read by
the API and the dashboard by run and time, so each has an index on (run, time). A run's live
figures (cap, in-flight) are kept on the run itself as well, so a list of runs needs no
join over millions of samples.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import DurationField, ExpressionWrapper, F
from django.db.models.functions import Now

from controlplane.runs.consumers import run_group_name
from workers.core.sharing import CLAIM_TTL_S, Claim

# An Idempotency-Key is a client's token for one create (a UUID, say); payment APIs take up
# to 255 characters (Stripe's limit), and so does Pacer.
IDEMPOTENCY_KEY_MAX_LENGTH = 255


class EngineRoleChoice(models.TextChoices):
    UNIFIED = "unified", "Unified"
    PREFILL = "prefill", "Prefill"
    DECODE = "decode", "Decode"


class Engine(models.Model):
    """An inference engine registered by name, so configs can name it instead of its URL."""

    name = models.CharField(
        max_length=100,
        unique=True,
        validators=[RegexValidator(r"^[^/\s]+$", "an engine name has no '/' and no spaces")],
    )
    url = models.URLField(max_length=500)
    role = models.CharField(
        max_length=16, choices=EngineRoleChoice.choices, default=EngineRoleChoice.UNIFIED
    )
    max_num_seqs = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    # The last poll of any run that uses it: health, age of its numbers, the last error.
    last_health = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.url})"


class RunState(models.TextChoices):
    QUEUED = "queued", "Queued"  # stored, waiting for a worker to take its lease
    RUNNING = "running", "Running"  # a worker holds its lease and drives it
    PAUSED = "paused", "Paused"  # state stored, no worker; resume queues it again
    STOPPING = "stopping", "Stopping"  # asked to stop; its worker is winding it down
    COMPLETED = "completed", "Completed"  # every step was written
    FAILED = "failed", "Failed"  # it cannot go on; ``error`` says why
    CANCELLED = "cancelled", "Cancelled"  # stopped by an operator before its last step

    @classmethod
    def ended(cls) -> tuple[str, ...]:
        return (cls.COMPLETED, cls.FAILED, cls.CANCELLED)


class Run(models.Model):
    name = models.CharField(max_length=200)
    config = models.JSONField(default=dict)  # the document as given (TOML read into JSON)
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    error = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="runs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Where it stands, for resuming on another worker.
    step = models.PositiveIntegerField(default=0)  # the last step written
    policy_version = models.PositiveIntegerField(default=0)
    eval_waves = models.PositiveIntegerField(default=0)
    controller_state = models.JSONField(null=True, blank=True)
    # When controller_state was saved (wall clock): a restore ages its pin by the time away.
    controller_state_at = models.DateTimeField(null=True, blank=True)
    model_name = models.CharField(max_length=300, blank=True, default="")  # as served
    output_dir = models.CharField(max_length=1000, blank=True, default="")
    # When its task was last sent: a run queued long ago and never leased lost its task (a
    # broker restart), and the sweep sends another.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # One host at a time: a worker drives the run only while its lease is unexpired.
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Hostings in a row that ended in an unexpected error; a step written starts it afresh.
    host_failures = models.PositiveSmallIntegerField(default=0)
    # Live figures, kept by the worker for lists and detail pages.
    cap = models.PositiveIntegerField(null=True, blank=True)
    policy_cap = models.PositiveIntegerField(null=True, blank=True)  # differs while pinned
    inflight_train = models.PositiveIntegerField(default=0)
    inflight_eval = models.PositiveIntegerField(default=0)
    generation_tokens_per_s = models.FloatField(default=0.0)
    # Raw engine samples before this were deleted by retention (runs.rollups); its rollups
    # hold them still, at 60 s and coarser.
    samples_pruned_before = models.DateTimeField(null=True, blank=True)
    # The client's Idempotency-Key of the create that stored it: a retried create with the
    # same key answers with this run rather than storing a second (services.run_create_once).
    idempotency_key = models.CharField(max_length=IDEMPOTENCY_KEY_MAX_LENGTH, null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "lease_expires_at"], name="run_state_lease"),
            models.Index(fields=["-created_at", "-id"], name="run_newest"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="one_run_per_idempotency_key",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.name}, {self.state})"

    @property
    def group_name(self) -> str:
        """The Channels group that carries this run's live events."""
        return run_group_name(self.pk)

    @property
    def is_ended(self) -> bool:
        return self.state in RunState.ended()


class Decision(models.Model):
    """One decision of a run's controller (or its orchestrator), every field of the core's."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="decisions")
    at = models.DateTimeField()  # wall time, from the worker's clock at the decision
    step = models.PositiveIntegerField()  # the last step written when it was made
    kind = models.CharField(max_length=32)
    cause = models.CharField(max_length=48)
    signal = models.CharField(max_length=16)
    cap_before = models.PositiveIntegerField()
    cap_after = models.PositiveIntegerField()
    reason = models.TextField()
    shed = models.PositiveIntegerField(default=0)
    shadow_before = models.PositiveIntegerField(null=True, blank=True)
    shadow_after = models.PositiveIntegerField(null=True, blank=True)
    alert = models.BooleanField(default=False)
    applied = models.BooleanField(default=True)
    figures = models.JSONField(default=dict)
    # The lease owner that made it (worker/task): a run's timeline shows each host's tenure,
    # and a write by a host that had lost its lease would show as one out of place.
    host = models.CharField(max_length=200, blank=True, default="")
    # The engine the decision is about (a weight update, an engine out of routing or back).
    engine = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["run", "at", "id"], name="decision_run_at"),
            models.Index(fields=["run", "kind", "at"], name="decision_run_kind_at"),
        ]


class EngineSample(models.Model):
    """One engine's load at one poll of a run: every field of the core's LoadSample, and the
    rates the dashboard draws."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()  # wall time of the poll
    engine_id = models.CharField(max_length=200)
    role = models.CharField(max_length=16)
    health = models.CharField(max_length=16)
    kv_capacity_tokens = models.BigIntegerField(null=True)
    max_model_len = models.IntegerField(null=True)
    kv_usage = models.FloatField()
    num_running = models.IntegerField()
    num_waiting = models.IntegerField()
    num_waiting_capacity = models.IntegerField(null=True)
    num_preemptions = models.IntegerField()
    prefix_cache_hits = models.BigIntegerField()
    prefix_cache_queries = models.BigIntegerField()
    generation_tokens = models.BigIntegerField()
    restarted = models.BooleanField(default=False)
    interval_s = models.FloatField(null=True)  # since this engine's previous sample of the run
    staleness_s = models.FloatField(default=0.0)  # age of its numbers at the poll
    # The run's episodes on this engine at the poll, by kind (on an engine's first rank only:
    # episodes go to an engine, and its data-parallel ranks share them unseen).
    inflight_train = models.IntegerField(default=0)
    inflight_eval = models.IntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["run", "at"], name="sample_run_at"),
            models.Index(fields=["run", "engine_id", "at"], name="sample_run_engine_at"),
        ]


class SampleRollup(models.Model):
    """One engine's samples of a run in one bin of ``tier_s`` seconds starting at ``start``,
    as sums and counts (not means), so bins add up to coarser ones and merge with raw samples
    to give exactly what the samples endpoint computes from raw rows (runs.rollups)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rollups")
    engine_id = models.CharField(max_length=200)
    tier_s = models.PositiveIntegerField()
    start = models.DateTimeField()  # a whole multiple of tier_s seconds after the epoch
    samples = models.PositiveIntegerField()
    kv_usage_sum = models.FloatField()
    kv_usage_max = models.FloatField()
    num_running_sum = models.BigIntegerField()
    num_waiting_sum = models.BigIntegerField()
    # num_waiting_capacity is null where an engine does not report it; its mean skips those.
    num_waiting_capacity_sum = models.BigIntegerField()
    num_waiting_capacity_count = models.PositiveIntegerField()
    inflight_train_sum = models.BigIntegerField()
    inflight_eval_sum = models.BigIntegerField()
    num_preemptions_sum = models.BigIntegerField()
    generation_tokens_sum = models.BigIntegerField()
    prefix_cache_hits_sum = models.BigIntegerField()
    prefix_cache_queries_sum = models.BigIntegerField()
    interval_s_sum = models.FloatField()
    staleness_s_max = models.FloatField()
    not_up = models.PositiveIntegerField()
    restarts = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "engine_id", "tier_s", "start"], name="one_rollup_per_bin"
            )
        ]
        indexes = [models.Index(fields=["run", "tier_s", "start"], name="rollup_run_tier_start")]


class RollupWatermark(models.Model):
    """How far a run's samples are rolled up at one tier: every bin starting before ``until``
    is complete in SampleRollup; samples from ``until`` on are read raw."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rollup_watermarks")
    tier_s = models.PositiveIntegerField()
    until = models.DateTimeField(null=True, blank=True)  # null: nothing rolled up yet

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "tier_s"], name="one_watermark_per_tier")
        ]


class StepRecord(models.Model):
    """One written step: its timing, counts, tokens and rewards."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    step = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    written_at = models.DateTimeField()
    seconds = models.FloatField()
    policy_version = models.PositiveIntegerField()
    episodes = models.PositiveIntegerField()
    tokens = models.BigIntegerField()
    reward_mean = models.FloatField()
    reward_std = models.FloatField()
    generated_tokens = models.BigIntegerField()
    finished_train = models.PositiveIntegerField()
    finished_eval = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()
    cancelled = models.PositiveIntegerField()
    dropped_groups = models.PositiveIntegerField()
    cap = models.PositiveIntegerField()
    inflight = models.PositiveIntegerField()
    path = models.CharField(max_length=1000)
    # Samples per policy version their oldest turn was sampled under, as the engines served
    # it ({"3": 48, "2": 16}); in rolling weight updates part of a batch is a version behind.
    sampled_versions = models.JSONField(default=dict, blank=True)
    # With trainer mode "external": when the trainer acknowledged it, its new version, and
    # the folder of that version's weights (resolved, checked loadable; empty: none sent).
    acked_at = models.DateTimeField(null=True, blank=True)
    acked_version = models.PositiveIntegerField(null=True, blank=True)
    acked_checkpoint = models.CharField(
        max_length=1000,
        blank=True,
        default="",
        help_text="the folder of the acknowledged version's weights; empty when none was sent",
    )

    class Meta:
        ordering = ["step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="one_record_per_step")]


class EvalRecord(models.Model):
    """One evaluation wave, per environment: recorded as it starts (``finished_at`` empty),
    completed as it ends; one still unfinished when its run is restored is run again."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="evals")
    wave = models.PositiveIntegerField()
    after_step = models.PositiveIntegerField()
    policy_version = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    episodes = models.JSONField(default=dict)  # completed, per environment
    failed = models.JSONField(default=dict)
    reward_mean = models.JSONField(default=dict)

    class Meta:
        ordering = ["wave"]
        constraints = [models.UniqueConstraint(fields=["run", "wave"], name="one_record_per_wave")]


class OverrideMode(models.TextChoices):
    PIN = "pin", "Pin"  # hold the cap at ``cap`` for ``ttl_s`` seconds
    SET = "set", "Set"  # move the cap once; adaptation goes on from there
    RELEASE = "release", "Release"  # end a pin
    PAUSE = "pause", "Pause"  # store the run's state and free its worker
    RESUME = "resume", "Resume"  # queue a paused run again
    STOP = "stop", "Stop"  # end the run after the step being written
    ENGINE_ADD = "engine-add", "Add engine"  # ``engine`` joins the run's pool
    ENGINE_REMOVE = "engine-remove", "Remove engine"  # ``engine`` drains out within ``drain_s``
    SHARE = "share", "Share"  # the run's ``share`` and ``priority`` in a pool of shared engines

    @classmethod
    def cap_commands(cls) -> tuple[str, ...]:
        return (cls.PIN, cls.SET, cls.RELEASE)


class Override(models.Model):
    """An operator's command to a run: who, when, why, and what came of it."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="overrides")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="overrides"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    mode = models.CharField(max_length=16, choices=OverrideMode.choices)
    cap = models.PositiveIntegerField(null=True, blank=True)
    ttl_s = models.FloatField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True, default="")
    # An engine command's engine, as the run names it (its registered name, or host:port).
    engine = models.CharField(max_length=200, blank=True, default="")
    drain_s = models.FloatField(null=True, blank=True)  # an engine-remove's drain deadline
    share = models.FloatField(null=True, blank=True)  # a share command's new weight
    priority = models.IntegerField(null=True, blank=True)  # and its new priority
    applied_at = models.DateTimeField(null=True, blank=True)
    decision = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="override"
    )
    error = models.TextField(blank=True, default="")  # why the run refused it, if it did

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["run", "applied_at"], name="override_run_pending")]

    @property
    def pending(self) -> bool:
        return self.applied_at is None and not self.error


class PoolClaimQuerySet(models.QuerySet["PoolClaim"]):
    def counted(self) -> PoolClaimQuerySet:
        """The claims the arbiter counts now: renewed within ``CLAIM_TTL_S``, of hosted runs
        only (a run that ended, paused or was handed back drops out of its pool at once), each
        with its ``age``. Claims are written and aged by the database's clock, not the hosts':
        a claim two seconds late is overdue (``workers.core.sharing.OVERDUE_GRACE_S``), and
        two hosts' clocks may differ by more than that."""
        return self.filter(
            updated_at__gte=Now() - timedelta(seconds=CLAIM_TTL_S),
            run__state__in=(RunState.RUNNING, RunState.STOPPING),
        ).annotate(age=ExpressionWrapper(Now() - F("updated_at"), output_field=DurationField()))


class PoolClaim(models.Model):
    """What a hosted run states for the engines it may share with other runs
    (``workers.core.sharing``): written by its host at every look, read by every host whose
    run shares an engine with it. A claim not renewed within a lease's life is not counted."""

    run = models.OneToOneField(
        Run, on_delete=models.CASCADE, primary_key=True, related_name="pool_claim"
    )
    engines = models.JSONField(default=list)  # the engines' base URLs, sorted
    weight = models.FloatField()
    priority = models.IntegerField()
    demand = models.PositiveIntegerField()  # episodes it would run now (sharing.Claim)
    inflight = models.PositiveIntegerField()  # its episodes in flight
    max_inflight = models.PositiveIntegerField()  # the most it may hold
    level = models.FloatField()  # the pool's level as its controller holds it
    # How often its host renews it (the host's look period). A host of the release before
    # writes none while a rolling upgrade runs: the default poll period stands for it.
    renew_s = models.FloatField(db_default=5.0)
    ceiling = models.PositiveIntegerField(null=True, blank=True)  # its part; None: alone
    footprint = models.FloatField(null=True, blank=True)  # KV tokens one episode holds
    completed = models.PositiveIntegerField(default=0)  # episodes completed under this host
    owner = models.CharField(max_length=200)  # the host that wrote it (its lease's owner)
    since = models.DateTimeField()  # when that host first wrote it: the longest leads
    updated_at = models.DateTimeField()  # the database's clock, as ``since``

    objects = PoolClaimQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["updated_at"], name="pool_claim_fresh")]

    def as_claim(self) -> Claim:
        """The claim as its host stated it, of a row ``counted`` read (its ``age``)."""
        return Claim(
            run_id=self.run_id,
            engines=frozenset(self.engines),
            weight=self.weight,
            priority=self.priority,
            demand=self.demand,
            inflight=self.inflight,
            max_inflight=self.max_inflight,
            level=self.level,
            renew_s=self.renew_s,
            since=self.since.timestamp(),
            ceiling=self.ceiling,
            footprint=self.footprint,
            completed=self.completed,
            age=self.age.total_seconds(),
        )
