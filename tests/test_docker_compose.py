"""docker-compose.yml describes the whole stack, each service with the command it needs."""

from __future__ import annotations

import os
import shutil
import subprocess

import yaml

from tests.conftest import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"


def command_text(service: dict[str, object]) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else str(command)


def docker_compose_available() -> bool:
    docker = shutil.which("docker")
    return (
        bool(docker)
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    )


def test_compose_file_has_the_stack_and_commands() -> None:
    """``docker compose config`` where the plugin exists; the YAML checks run everywhere."""
    if docker_compose_available():
        result = subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
            capture_output=True,
            text=True,
            env={**os.environ, "SECRET_KEY": "test-only"},
        )
        assert result.returncode == 0, result.stderr
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    services = compose["services"]
    # What `docker compose config` would reject, checked here too (this machine has docker
    # without the compose plugin): references to services and volumes that do not exist.
    for name, service in services.items():
        assert set(service.get("depends_on", ())) <= services.keys(), name
        for volume in service.get("volumes", ()):
            source = volume.split(":", 1)[0]
            assert source.startswith((".", "/")) or source in compose.get("volumes", {}), volume

    assert {"redis", "postgres", "web", "worker"} <= services.keys()
    assert "daphne" in command_text(services["web"])
    assert "controlplane.asgi:application" in command_text(services["web"])
    assert "migrate" in command_text(services["web"])
    assert "workers.celery worker" in command_text(services["worker"])
    for name in ("web", "worker"):
        environment = services[name]["environment"]
        assert environment["SECRET_KEY"].startswith("${SECRET_KEY:?")  # no shared default key
        assert environment["DATABASE_URL"].startswith("postgres://")
        assert environment["REDIS_URL"].startswith("redis://redis:")
        assert set(services[name]["depends_on"]) == {"redis", "postgres"}
    for name in ("sim-a", "sim-b"):
        assert command_text(services[name]).startswith("python -m inference.sim --host 0.0.0.0")
    # Only the web server is reached from outside: the engines, Redis and PostgreSQL take
    # requests without credentials of the deployment's own, on the compose network alone.
    assert [name for name, service in services.items() if service.get("ports")] == ["web"]
    assert services["vllm"]["profiles"] == ["gpu"]
    assert "inference.serve" in command_text(services["vllm"])
