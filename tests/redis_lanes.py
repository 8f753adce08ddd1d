"""A Redis database of its own for each pytest process: loaded before Django's settings are
(``scripts/test`` passes ``-p tests.redis_lanes``), it points ``REDIS_URL`` at database 1,
or at 2, 3, ... for pytest-xdist's workers, before anything reads it.

Runs are numbered from 1 in every test database, and the keys a run keeps in Redis (its
control channel, its lease, its commands) are named by that number: two workers sharing a
Redis database would read each other's runs. Database 0 stays the quick start's, so a stack
left running by ``./scripts/run`` and the suite never meet either. Worker processes the
tests start inherit the variable.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

FIRST_DATABASE = 1  # 0 is ./scripts/run's
DATABASES = 16  # redis-server's default number of databases


def lane_url(url: str, worker: str) -> str:
    """``url`` on this process's database: ``worker`` is xdist's name for it (gw0, gw1, ...),
    empty outside xdist."""
    index = FIRST_DATABASE + (int(worker.removeprefix("gw")) + 1 if worker else 0)
    if index >= DATABASES:
        raise RuntimeError(f"{worker}: Redis has {DATABASES} databases; run fewer workers")
    return urlunsplit(urlsplit(url)._replace(path=f"/{index}"))


os.environ["REDIS_URL"] = lane_url(
    os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    os.environ.get("PYTEST_XDIST_WORKER", ""),
)
