"""The project's top-level layout, as it was asked for: manage.py, controlplane/, workers/,
inference/, templates/, tests/, docker-compose.yml; the site-wide templates in templates/,
each app's own in the app."""

from __future__ import annotations

from tests.conftest import REPO_ROOT

SITE_TEMPLATES = ("base.html", "signin.html", "400.html", "403.html", "404.html", "500.html")


def test_the_top_level_holds_the_asked_for_layout() -> None:
    for name in ("controlplane", "workers", "inference", "templates", "tests"):
        assert (REPO_ROOT / name).is_dir(), name
    for name in ("manage.py", "docker-compose.yml"):
        assert (REPO_ROOT / name).is_file(), name


def test_the_site_wide_templates_live_in_templates_and_no_app_keeps_a_copy() -> None:
    for name in SITE_TEMPLATES:
        assert (REPO_ROOT / "templates" / name).is_file(), name
    in_apps = {path.name for path in (REPO_ROOT / "controlplane").rglob("templates/**/*.html")}
    assert in_apps.isdisjoint(SITE_TEMPLATES), in_apps & set(SITE_TEMPLATES)


def test_the_image_copies_the_templates() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "COPY templates ./templates" in dockerfile
