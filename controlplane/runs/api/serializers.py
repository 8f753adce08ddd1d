"""What the API answers: runs, decisions, overrides, steps, evaluation waves, samples, engines.

Output only; request bodies and query parameters are read by ``inputs``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.reverse import reverse

from controlplane.runs.models import (
    Decision,
    EvalRecord,
    Override,
    Run,
    StepRecord,
)
from controlplane.runs.selectors import POLICIES, max_steps, policy_name


class ErrorSerializer(serializers.Serializer):
    """Every error: a sentence, and on a 400 the messages of each field at fault."""

    detail = serializers.CharField()
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class ThrottledSerializer(serializers.Serializer):
    detail = serializers.CharField()
    retry_after_s = serializers.IntegerField(help_text="seconds to wait; as Retry-After says")


def _username(user: Any) -> str | None:
    return None if user is None else user.get_username()


class RunListSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    created_by = serializers.SerializerMethodField()
    policy_cap = serializers.SerializerMethodField(
        help_text="the policy's own cap while a pin (or observe-only mode) holds the cap; "
        "null otherwise"
    )

    class Meta:
        model = Run
        fields = [
            "id",
            "url",
            "name",
            "state",
            "error",
            "step",
            "policy_version",
            "cap",
            "policy_cap",
            "inflight_train",
            "inflight_eval",
            "generation_tokens_per_s",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.URLField())
    def get_url(self, run: Run) -> str:
        return reverse("api:run-detail", args=[run.pk], request=self.context.get("request"))

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_created_by(self, run: Run) -> str | None:
        return _username(run.created_by)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_policy_cap(self, run: Run) -> int | None:
        return run.policy_cap if run.policy_cap != run.cap else None


class RunSerializer(RunListSerializer):
    model = serializers.CharField(source="model_name", help_text="as the engines serve it")
    host = serializers.CharField(source="lease_owner", help_text="the worker driving it, if any")
    links = serializers.SerializerMethodField()

    class Meta(RunListSerializer.Meta):
        fields = [
            *RunListSerializer.Meta.fields,
            "config",
            "eval_waves",
            "model",
            "output_dir",
            "host",
            "enqueued_at",
            "updated_at",
            "links",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField(child=serializers.URLField()))
    def get_links(self, run: Run) -> dict[str, str]:
        request = self.context.get("request")
        names = ("decisions", "samples", "steps", "evals", "overrides")
        links = {name: reverse(f"api:run-{name}", args=[run.pk], request=request) for name in names}
        for table in ("decisions", "steps"):
            links[f"export_{table}"] = reverse(
                "api:run-export", args=[run.pk, table], request=request
            )
        return links


class DecisionSerializer(serializers.ModelSerializer):
    """Every field of the core's Decision, and where it sits: its run, step and time, and the
    operator command it answers, if any."""

    run = serializers.IntegerField(source="run_id")
    figures = serializers.DictField(child=serializers.FloatField())
    override = serializers.SerializerMethodField(help_text="the override this decision answers")

    class Meta:
        model = Decision
        fields = [
            "id",
            "run",
            "step",
            "at",
            "kind",
            "cause",
            "signal",
            "cap_before",
            "cap_after",
            "reason",
            "shed",
            "shadow_before",
            "shadow_after",
            "alert",
            "applied",
            "figures",
            "engine",
            "override",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_override(self, decision: Decision) -> int | None:
        override = getattr(decision, "override", None)
        return None if override is None else override.pk


class OverrideSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    run = serializers.IntegerField(source="run_id")
    created_by = serializers.SerializerMethodField()
    status = serializers.SerializerMethodField(
        help_text="pending until the run acts on it; applied (with its decision, for cap "
        "commands) or error (why the run refused it)"
    )
    decision_id = serializers.IntegerField(allow_null=True)
    decision = DecisionSerializer(allow_null=True)

    class Meta:
        model = Override
        fields = [
            "id",
            "url",
            "run",
            "mode",
            "cap",
            "ttl_s",
            "engine",
            "drain_s",
            "share",
            "priority",
            "reason",
            "created_by",
            "created_at",
            "status",
            "applied_at",
            "error",
            "decision_id",
            "decision",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.URLField())
    def get_url(self, override: Override) -> str:
        return reverse(
            "api:run-override",
            args=[override.run_id, override.pk],
            request=self.context.get("request"),
        )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_created_by(self, override: Override) -> str | None:
        return _username(override.created_by)

    @extend_schema_field(serializers.ChoiceField(choices=["pending", "applied", "error"]))
    def get_status(self, override: Override) -> str:
        if override.error:
            return "error"
        return "pending" if override.applied_at is None else "applied"


class StepSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id")

    class Meta:
        model = StepRecord
        exclude = ["id"]
        read_only_fields = [f.name for f in StepRecord._meta.fields if f.name != "id"]


class AckResultSerializer(serializers.Serializer):
    acknowledged = serializers.BooleanField(
        help_text="true when this call acknowledged the step; false when it already was"
    )
    step = StepSerializer()


class EvalSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="run_id")
    episodes = serializers.DictField(child=serializers.IntegerField())
    failed = serializers.DictField(child=serializers.IntegerField())
    reward_mean = serializers.DictField(child=serializers.FloatField())

    class Meta:
        model = EvalRecord
        exclude = ["id"]
        read_only_fields = [f.name for f in EvalRecord._meta.fields if f.name != "id"]


class SamplePointSerializer(serializers.Serializer):
    """One engine's samples in one bin: means of gauges, sums of deltas, their rates."""

    engine = serializers.CharField()
    at = serializers.DateTimeField(help_text="the start of the bin")
    samples = serializers.IntegerField()
    kv_usage = serializers.FloatField(help_text="mean")
    kv_usage_max = serializers.FloatField()
    num_running = serializers.FloatField(help_text="mean")
    num_waiting = serializers.FloatField(help_text="mean")
    num_waiting_capacity = serializers.FloatField(allow_null=True, help_text="mean")
    inflight_train = serializers.FloatField(help_text="mean: the run's train episodes there")
    inflight_eval = serializers.FloatField(help_text="mean: the run's eval episodes there")
    preemptions = serializers.IntegerField(help_text="sum")
    generation_tokens = serializers.IntegerField(help_text="sum")
    prefix_cache_hits = serializers.IntegerField(help_text="sum")
    prefix_cache_queries = serializers.IntegerField(help_text="sum")
    seconds = serializers.FloatField(help_text="the time the bin's deltas cover")
    tokens_per_s = serializers.FloatField(allow_null=True)
    preemptions_per_s = serializers.FloatField(allow_null=True)
    prefix_hit_rate = serializers.FloatField(allow_null=True)
    staleness_max_s = serializers.FloatField()
    not_up = serializers.IntegerField(help_text="samples taken while the engine was not up")
    restarts = serializers.IntegerField()


class SampleSeriesSerializer(serializers.Serializer):
    step_s = serializers.FloatField()
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    points = SamplePointSerializer(many=True)


class EngineSerializer(serializers.Serializer):
    name = serializers.CharField(source="engine.name")
    url = serializers.URLField(source="engine.url")
    role = serializers.CharField(source="engine.role")
    max_num_seqs = serializers.IntegerField(source="engine.max_num_seqs", allow_null=True)
    status = serializers.ChoiceField(
        choices=["up", "stale", "down", "unknown"],
        help_text="from the last poll of any run; stale when that is older than "
        "PACER_ENGINE_STALE_S; unknown when no run has polled it",
    )
    last_health = serializers.JSONField(source="engine.last_health")
    last_seen_at = serializers.DateTimeField(source="engine.last_seen_at", allow_null=True)
    staleness_s = serializers.FloatField(allow_null=True)
    runs = serializers.ListField(child=serializers.IntegerField(), help_text="active runs on it")
    warnings = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField(source="engine.created_at")
    updated_at = serializers.DateTimeField(source="engine.updated_at")


class CompareRunSerializer(serializers.ModelSerializer):
    """A compared run's summary; its series are at its ``links``."""

    url = serializers.SerializerMethodField()
    policy = serializers.SerializerMethodField(help_text="the concurrency policy its config names")
    max_steps = serializers.SerializerMethodField()
    latest_reward = serializers.FloatField(
        allow_null=True, help_text="the mean reward of its newest step; null before its first"
    )
    links = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id",
            "url",
            "name",
            "state",
            "policy",
            "step",
            "max_steps",
            "policy_version",
            "cap",
            "inflight_train",
            "inflight_eval",
            "generation_tokens_per_s",
            "latest_reward",
            "created_at",
            "started_at",
            "finished_at",
            "links",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.URLField())
    def get_url(self, run: Run) -> str:
        return reverse("api:run-detail", args=[run.pk], request=self.context.get("request"))

    @extend_schema_field(serializers.ChoiceField(choices=list(POLICIES)))
    def get_policy(self, run: Run) -> str:
        return policy_name(run.config)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_max_steps(self, run: Run) -> int | None:
        return max_steps(run.config)

    @extend_schema_field(serializers.DictField(child=serializers.URLField()))
    def get_links(self, run: Run) -> dict[str, str]:
        request = self.context.get("request")
        names = ("decisions", "samples", "steps")
        return {name: reverse(f"api:run-{name}", args=[run.pk], request=request) for name in names}


class CompareValueSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    present = serializers.BooleanField(help_text="false when the run's config lacks the field")
    value = serializers.JSONField(allow_null=True, help_text="null when absent")


class DifferenceSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="dotted, arrays by index: env[0].args.turns")
    values = CompareValueSerializer(many=True, help_text="one per run, in the runs' order")


class ComparisonSerializer(serializers.Serializer):
    runs = CompareRunSerializer(many=True, help_text="in the order asked")
    differences = DifferenceSerializer(many=True, help_text="only the fields that differ")
