"""Management commands as an operator runs them: ``python manage.py ...`` in a process of
its own, on this session's test database."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import REPO_ROOT, VENV_BIN
from tests.integration.hosting import session_database_url


def manage(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", *argv],
        cwd=REPO_ROOT,
        env={**os.environ, "DATABASE_URL": session_database_url()},
        capture_output=True,
        text=True,
    )
