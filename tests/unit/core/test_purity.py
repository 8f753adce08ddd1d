"""The core stays plain Python: no Django, Celery, Channels or HTTP library under it, directly
or through anything it imports, so it runs in a unit test and in virtual time as it does in a
worker."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import workers.core

EDGE_LIBRARIES = (
    "django",
    "rest_framework",
    "celery",
    "kombu",
    "channels",
    "httpx",
    "httpcore",
    "aiohttp",
    "h11",
    "redis",
    "psycopg",
    "wandb",
    "prometheus_client",
)

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def core_modules() -> list[str]:
    found = pkgutil.walk_packages(workers.core.__path__, prefix="workers.core.")
    return sorted(module.name for module in found)


def test_the_core_has_the_modules_the_probe_imports() -> None:
    names = core_modules()
    assert "workers.core.controller.concurrency" in names
    assert "workers.core.dispatch.dispatcher" in names
    assert len(names) > 30


def test_importing_every_core_module_loads_no_edge_library() -> None:
    """In a fresh interpreter, so that what this test process already loaded cannot hide an
    import."""
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *core_modules()],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(json.loads(probe.stdout))
    assert sorted(loaded & set(EDGE_LIBRARIES)) == []


def test_the_probe_would_see_an_edge_library() -> None:
    """The probe itself works: a module that pulls an HTTP library in is caught."""
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, "inference.rollout_client"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "aiohttp" in json.loads(probe.stdout)
