"""Real vLLM engines for the tests of this folder.

vLLM pins its own torch and transformers, so it lives in a virtualenv of its own, made by
scripts/vllm-env.sh; the engines run there, and the tests drive them over HTTP from the main
virtualenv. Each engine runs in its own process group, so that teardown ends the API server and
its engine-core process together and leaves nothing running.
"""

import contextlib
import itertools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO_ROOT, free_port, stop_process_group

VLLM_VENV = Path(os.environ.get("PACER_VLLM_VENV") or Path.home() / ".cache/pacer/vllm-venv")
SERVED_MODEL = "pacer-tiny"
# Ready in about 30 s on a 2-core machine; the slack covers a machine shared with other work.
STARTUP_TIMEOUT_S = 240.0
HEALTH_POLL_S = 0.5
# What the plugin prints in each vLLM process it patches (inference/vllm_plugin/detokenizer.py).
PATCH_ACTIVE = "detokenizer patch active"


@dataclass(frozen=True)
class Engine:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


EngineFactory = Callable[..., Engine]


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    python = VLLM_VENV / "bin/python"
    if not (VLLM_VENV / ".pacer-engine-stamp").is_file() or not python.is_file():
        pytest.fail(
            f"no vLLM virtualenv at {VLLM_VENV}: run scripts/vllm-env.sh first "
            "(or point PACER_VLLM_VENV at one it made)",
            pytrace=False,
        )
    return python


@pytest.fixture(scope="session")
def tiny_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("tiny-model") / "model"
    build = subprocess.run(
        [str(vllm_python), "-m", "inference.tinymodel", str(model)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        pytest.fail(f"inference.tinymodel failed:\n{build.stderr[-5000:]}")
    return model


@contextlib.contextmanager
def running_engine(
    vllm_python: Path, model: Path, log_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> Iterator[Engine]:
    """An engine launched by inference.serve, healthy on entry, gone (with its group) on exit."""
    port = free_port()
    # PYTHONPATH makes the engine import this checkout's plugin, whichever checkout the vLLM
    # venv was linked from; VLLM_PLUGINS from the caller's shell must not decide the patch.
    engine_env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    engine_env |= {"PYTHONPATH": str(REPO_ROOT), **env}
    command = [str(vllm_python), "-m", "inference.serve", "--model", str(model), "--cpu"]
    command += ["--port", str(port), "--served-model-name", SERVED_MODEL, *args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=engine_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engine = Engine(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_until_healthy(engine)
        yield engine
    finally:
        stop_process_group(process)


def wait_until_healthy(engine: Engine) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            pytest.fail(f"vLLM exited with {engine.process.returncode}:\n{engine.log()[-5000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{engine.url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(HEALTH_POLL_S)
    pytest.fail(f"vLLM not healthy after {STARTUP_TIMEOUT_S} s:\n{engine.log()[-5000:]}")


@pytest.fixture(scope="session")
def engine(
    vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """The patched engine, started once per session with Pacer's default flags."""
    log_path = tmp_path_factory.mktemp("engine") / "vllm.log"
    with running_engine(vllm_python, tiny_model, log_path, (), {}) as started:
        yield started


@pytest.fixture
def engine_factory(vllm_python: Path, tiny_model: Path, tmp_path: Path) -> Iterator[EngineFactory]:
    """Starts engines with other flags or environment for one test; stops them after it."""
    numbers = itertools.count()
    with contextlib.ExitStack() as stack:

        def start(*args: str, env: dict[str, str] | None = None) -> Engine:
            log_path = tmp_path / f"vllm-{next(numbers)}.log"
            return stack.enter_context(
                running_engine(vllm_python, tiny_model, log_path, args, env or {})
            )

        yield start


@pytest.fixture(scope="session")
def first_unknown_id(tiny_model: Path) -> int:
    """Ids from here up have an output row but no tokenizer piece."""
    return len(json.loads((tiny_model / "tokenizer.json").read_text())["model"]["vocab"])
