"""The dashboard's pages, included at the site's root with the namespace ``dashboard``."""

from __future__ import annotations

from django.urls import path

from controlplane.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.runs_list, name="runs"),
    path("signin/", views.SignIn.as_view(), name="signin"),
    path("signout/", views.SignOut.as_view(), name="signout"),
    path("runs/new/", views.run_new, name="run-new"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("compare/", views.compare, name="compare"),
    path("alerts/", views.alerts, name="alerts"),
    path("pools/", views.pools, name="pools"),
]
