from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controlplane.health import HealthApi
from controlplane.metrics import metrics_view
from controlplane.signin_limits import AdminThrottledSignIn

# The admin's sign-in counts failures with the dashboard's.
admin.site.login_form = AdminThrottledSignIn

urlpatterns = [
    path("", include("controlplane.dashboard.urls")),
    path("admin/", admin.site.urls),
    path("api/health/", HealthApi.as_view(), name="health"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Its script from a URL of its own, not inline: the Content-Security-Policy allows none.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api_docs.html"),
        name="docs",
    ),
    path("api/alerts/", include("controlplane.alerts.urls")),
    path("api/", include("controlplane.runs.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Where a browser looks for an icon on a page that names none (the admin's, the API's).
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
]

handler404 = "controlplane.views.not_found"
handler500 = "controlplane.views.server_error"
