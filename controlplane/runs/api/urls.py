"""The API's routes, included under /api/ with the namespace ``api``."""

from __future__ import annotations

from django.urls import path

from controlplane.runs.api import compare, engines, pools, records, run_engines, runs

app_name = "api"

urlpatterns = [
    path("runs/", runs.RunListApi.as_view(), name="run-list"),
    path("runs/compare/", compare.RunCompareApi.as_view(), name="run-compare"),
    path("runs/<int:run_id>/", runs.RunDetailApi.as_view(), name="run-detail"),
    path("runs/<int:run_id>/stop/", runs.RunStopApi.as_view(), name="run-stop"),
    path("runs/<int:run_id>/pause/", runs.RunPauseApi.as_view(), name="run-pause"),
    path("runs/<int:run_id>/resume/", runs.RunResumeApi.as_view(), name="run-resume"),
    path("runs/<int:run_id>/override/", runs.RunOverrideApi.as_view(), name="run-override-create"),
    path("runs/<int:run_id>/overrides/", runs.OverrideListApi.as_view(), name="run-overrides"),
    path(
        "runs/<int:run_id>/overrides/<int:override_id>/",
        runs.OverrideDetailApi.as_view(),
        name="run-override",
    ),
    path("runs/<int:run_id>/engines/", run_engines.RunEnginesApi.as_view(), name="run-engines"),
    path(
        "runs/<int:run_id>/engines/<str:name>/remove/",
        run_engines.RunEngineRemoveApi.as_view(),
        name="run-engine-remove",
    ),
    path("runs/<int:run_id>/share/", run_engines.RunShareApi.as_view(), name="run-share"),
    path("runs/<int:run_id>/decisions/", records.DecisionListApi.as_view(), name="run-decisions"),
    path("runs/<int:run_id>/samples/", records.SampleSeriesApi.as_view(), name="run-samples"),
    path("runs/<int:run_id>/steps/", records.StepListApi.as_view(), name="run-steps"),
    path("runs/<int:run_id>/steps/<int:step>/ack/", records.StepAckApi.as_view(), name="run-ack"),
    path("runs/<int:run_id>/steps/<int:step>/ack", records.StepAckNoSlashApi.as_view()),
    path("runs/<int:run_id>/evals/", records.EvalListApi.as_view(), name="run-evals"),
    path("runs/<int:run_id>/export/<str:table>/", records.ExportApi.as_view(), name="run-export"),
    path("pools/", pools.PoolListApi.as_view(), name="pool-list"),
    path("engines/", engines.EngineListApi.as_view(), name="engine-list"),
    path("engines/<str:name>/", engines.EngineDetailApi.as_view(), name="engine-detail"),
]
