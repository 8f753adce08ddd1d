from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from controlplane.health import HealthApi
from controlplane.views import home

urlpatterns = [
    path("", home, name="home"),
    path("admin/", admin.site.urls),
    path("api/health/", HealthApi.as_view(), name="health"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
]
