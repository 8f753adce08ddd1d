from django.contrib import admin

from controlplane.runs.models import Run


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "status", "created_by", "created_at"]
    list_filter = ["status"]
    search_fields = ["name"]
