from django.contrib import admin

from controlplane.runs.models import Decision, Engine, Override, Run, StepRecord


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "state", "step", "cap", "created_by", "created_at"]
    list_filter = ["state"]
    search_fields = ["name"]


@admin.register(Engine)
class EngineAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "role", "max_num_seqs", "last_seen_at"]


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    list_display = ["run", "at", "kind", "cap_before", "cap_after", "alert"]
    list_filter = ["kind", "alert"]


@admin.register(StepRecord)
class StepRecordAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "episodes", "reward_mean", "seconds"]


@admin.register(Override)
class OverrideAdmin(admin.ModelAdmin):
    list_display = ["run", "mode", "cap", "created_by", "created_at", "applied_at", "error"]
