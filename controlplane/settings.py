"""Django settings for Pacer, read from the environment.

Zero-setup defaults (a SQLite file, Redis on localhost) let the quick start run on a laptop;
production and the test suite set ``DATABASE_URL`` to PostgreSQL. Core tuning defaults live
in the core's own config dataclasses, not here.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import dj_database_url

from controlplane.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PACER_VAR_DIR", str(BASE_DIR / "var")))
# Each hosted run's batches, decisions and W&B files go to <PACER_RUNS_DIR>/<run id>/, or to
# <PACER_RUNS_DIR>/<dir>/<run id>/ when its config names a folder (workers.runtime.run_folders):
# the one place web and workers on several machines must share.
PACER_RUNS_DIR = Path(env_str("PACER_RUNS_DIR", str(VAR_DIR / "runs")))
# Where a trainer's checkpoints must be for its acknowledgements to name them: the engines
# load weights from there, so it is a folder they share with web and workers (a volume in
# docker-compose). Empty: each run's own folder, which the trainer reads its batches from.
PACER_CHECKPOINTS_DIR = env_str("PACER_CHECKPOINTS_DIR", "")

# Off unless asked for: a debug page shows any signed-in user the code, the settings and the
# URLconf. scripts/run turns it on for itself only when it serves on loopback.
DEBUG = env_bool("DEBUG", False)
# Sessions and CSRF tokens are signed with SECRET_KEY. Without one, a random key is made per
# process: right for commands (which sign nothing) and a quick look, but each restart of a web
# server then signs everyone out, and two web processes cannot read each other's sessions, so
# `manage.py check --deploy` refuses it (controlplane.deploy_checks).
PACER_SECRET_KEY_GIVEN = bool(env_str("SECRET_KEY", ""))
SECRET_KEY = env_str("SECRET_KEY", "") or secrets.token_urlsafe(50)
# Error reports (the debug page, error mails) hide credentials inside URLs too: REDIS_URL and
# the broker's URL hold Redis' password, and no setting name says so.
DEFAULT_EXCEPTION_REPORTER_FILTER = "controlplane.error_reports.CredentialsFilter"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
# Served over HTTPS, behind a proxy that terminates TLS and says so in X-Forwarded-Proto
# (which it must also strip from what clients send). Then plain HTTP is redirected, browsers
# are told to use HTTPS alone (HSTS), and cookies are sent over HTTPS only.
PACER_HTTPS = env_bool("PACER_HTTPS", False)
if PACER_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    # Probes from inside the network (a load balancer's health check, Prometheus) over HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^api/health/$", r"^metrics$"]
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    # A year, with subdomains, and preload-ready: what hstspreload.org asks for. Set 0 to
    # trial HTTPS first: browsers remember the header for as long as it says.
    SECURE_HSTS_SECONDS = env_int("PACER_HSTS_SECONDS", 365 * 86400, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("PACER_HSTS_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("PACER_HSTS_PRELOAD", True)
# Pages other than the served address itself (scheme://host:port) that may use a signed-in
# user's session: open a run's websocket (controlplane.ws_origins) and write with its CSRF
# token. Empty: the served address only.
PACER_ALLOWED_ORIGINS = env_list("PACER_ALLOWED_ORIGINS", [])
CSRF_TRUSTED_ORIGINS = PACER_ALLOWED_ORIGINS

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served locally: no CDN is reachable
    "channels",
    "controlplane.runs",
    "controlplane.alerts",
    "controlplane.dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "controlplane.content_security.ContentSecurityPolicyMiddleware",
    # With DEBUG off, whitenoise serves the collected static files (the dashboard's scripts,
    # uPlot, the admin's styles) from STATIC_ROOT; with DEBUG on, asgi.py's static handler
    # serves them from the apps' folders, so no collectstatic is needed while developing.
    *([] if DEBUG else ["whitenoise.middleware.WhiteNoiseMiddleware"]),
    # Before anything reads the body: a request larger than DATA_UPLOAD_MAX_MEMORY_SIZE is a
    # JSON 413, never read, never a 500.
    "controlplane.runs.api.errors.BodySizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# What a page may load and run: its own site's scripts, styles, images and connections
# (the websocket included) and nothing else; no inline script or style, no framing.
PACER_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The site-wide templates (base page, sign-in, error pages); each app keeps its own.
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'pacer.sqlite3'}"),
        conn_max_age=0,  # Django's advice under ASGI: persistent connections leak there
    )
}
# SQLite, the quick start's database, is shared by the web process and every worker: without
# this a write that meets another one fails at once with "database is locked" (a 500).
# How long a transaction waits for another's write lock before it fails: far longer than any
# write Pacer makes (a poll's rows take ~10 ms; the compactions that take seconds run on
# PostgreSQL only), and within a client's patience.
PACER_SQLITE_BUSY_TIMEOUT_S = env_float("PACER_SQLITE_BUSY_TIMEOUT_S", 20.0, above=0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # A transaction takes the write lock when it begins, and so waits its turn: one that
        # began reading and then writes would meet SQLITE_BUSY at once, whatever the timeout.
        "transaction_mode": "IMMEDIATE",
        "timeout": PACER_SQLITE_BUSY_TIMEOUT_S,
        # Readers and the writer do not block each other in WAL; NORMAL syncs at checkpoints,
        # which in WAL may lose the last commits on a power cut but never corrupts the file.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
    # Tests on SQLite share their database with the servers and workers they start, so it is
    # a file (Django's default for tests is one in memory, seen by one process only).
    database_file = Path(DATABASES["default"]["NAME"])
    DATABASES["default"]["TEST"] = {
        "NAME": str(database_file.with_name(f"test_{database_file.name}"))
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A connection attempt to an unreachable server gives up after this long (libpq's
    # default is to wait for the operating system, minutes).
    PACER_PG_CONNECT_TIMEOUT_S = env_int("PACER_PG_CONNECT_TIMEOUT_S", 10, minimum=1)
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = PACER_PG_CONNECT_TIMEOUT_S
# A host's transaction that locks its run's row (workers/runtime/store.py) and then hangs (a
# partition that resets nothing) is ended by PostgreSQL after this long idle, so the lock
# cannot keep the next host out. Far above any pause inside those transactions
# (milliseconds), and well inside the lease's TTL (20 s): the next host takes over within a
# lease and a sweep.
PACER_LOCK_IDLE_TIMEOUT_S = env_int("PACER_LOCK_IDLE_TIMEOUT_S", 10, minimum=1)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# How long a websocket's wait for its next event may go without a word from Redis before the
# connection counts as lost. channels_redis waits for an event in a read that Redis answers
# after 5 s when none came (BZPOPMIN's timeout); redis-py 8 gives up on any read after 5 s
# unless told otherwise, so that race closed every websocket left quiet for five seconds.
CHANNELS_EVENT_WAIT_S = 5.0  # channels_redis's RedisChannelLayer.brpop_timeout
PACER_CHANNELS_READ_TIMEOUT_S = env_float(
    "PACER_CHANNELS_READ_TIMEOUT_S", 15.0, above=CHANNELS_EVENT_WAIT_S
)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # Group names hold run ids, which restart with every database: deployments (or test
        # sessions) sharing one Redis keep their live events apart by prefix.
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": PACER_CHANNELS_READ_TIMEOUT_S}],
            "prefix": env_str("PACER_CHANNELS_PREFIX", "asgi"),
            # Events a browser may fall behind by before Channels drops them (its default is
            # 100): a poll's engine health and its decisions for a minute of 0.5 s polls.
            # Pages re-read the API besides, so a drop delays an event, never loses it.
            "capacity": 1000,
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
# Run tasks go here; tests give their workers a queue of their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("PACER_CELERY_QUEUE", "celery")
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# A run's task lives as long as the run, and its redelivery is the run's lease's business
# (workers/runtime/lease.py), not the broker's: the message is acknowledged when the task
# starts. Held unacknowledged for days, it would come back on every broker reconnect as a
# duplicate, and kombu fails restoring it while Redis is away (the consumer then dies).
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Each worker also consumes a queue of its own: the sweep sends the runs it claims there, to
# its own healthy worker rather than to whichever takes the shared queue (runtime/sweep.py).
CELERY_WORKER_DIRECT = True
# Threads, not processes: a run's host lives in a task for the whole run, and on a warm
# shutdown (SIGTERM) each host must hear of it to hand its run back, which a thread does.
CELERY_WORKER_POOL = "threads"
# Keep LOGGING's handlers in the worker too: Celery's own would drop the run id from each line.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Alerts: each alerts worker (celery ... -Q pacer-alerts, see scripts/run) looks at every
# rule's conditions this often and delivers notifications from a queue of its own, so a
# webhook that hangs takes no slot a run is hosted in.
PACER_ALERTS_QUEUE = env_str("PACER_ALERTS_QUEUE", "pacer-alerts")
PACER_ALERTS_EVERY_S = 5.0  # a poll period: a condition is seen within a poll of holding
# The dashboard's address as people reach it, for the link to the run in each notification.
PACER_PUBLIC_URL = env_str("PACER_PUBLIC_URL", "http://127.0.0.1:8000")

# A run config is a few KB; 1 MiB leaves room for hundreds of environments and is far below
# what would tie a web process up. Larger bodies are answered 413 (Django's default is 2.5 MB).
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Rate limits are counted across every web process, in Redis (controlplane.rate_limits),
# under this prefix.
PACER_THROTTLE_PREFIX = env_str("PACER_THROTTLE_PREFIX", "pacer-throttle")

# Operator commands (override, stop, pause, resume) per user. A person steering by hand sends a
# few a minute and the controller acts on one poll every few seconds; one a second on average
# still lets a script sweep caps, and stops a runaway loop from flooding a run's control channel.
PACER_OVERRIDE_RATE = env_str("PACER_OVERRIDE_RATE", "60/minute")

REST_FRAMEWORK = {
    # Token first: its scheme goes into WWW-Authenticate, which makes "not signed in" a 401.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.runs.api.permissions.OperatorOrReadOnly"],
    "DEFAULT_PARSER_CLASSES": ["controlplane.runs.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.runs.api.errors.exception_handler",
    "DEFAULT_THROTTLE_RATES": {"override": PACER_OVERRIDE_RATE},
    # ?format= belongs to the export endpoint (csv or json), not to content negotiation.
    "URL_FORMAT_OVERRIDE": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Pacer API",
    "DESCRIPTION": (
        "Runs, their decisions, engine samples, steps and evaluation waves; operator commands; "
        "engines; alert rules and their deliveries. Authenticate with "
        "`Authorization: Token <key>` (or the dashboard's session). Viewers read; operators "
        "also write."
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request and response bodies as separate components: read-only fields are not inputs.
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Choice sets that several fields share, under one name each.
    "ENUM_NAME_OVERRIDES": {
        "AlertKindEnum": "controlplane.alerts.models.KIND_CHOICES",
        "RunStateEnum": "controlplane.runs.models.RunState",
        "DeliveryStateEnum": "controlplane.alerts.models.DeliveryState",
    },
}

# Failed sign-ins (dashboard and admin) before more are refused for a while, per user name and
# per client address (controlplane.signin_limits). Per user: OWASP's advice is a lockout after
# a handful of failures, for a time; a person mistyping gets ten tries an hour. Per address:
# more, since an office or a VPN signs many people in from one.
PACER_SIGNIN_FAILURES_PER_USER = env_str("PACER_SIGNIN_FAILURES_PER_USER", "10/hour")
PACER_SIGNIN_FAILURES_PER_ADDRESS = env_str("PACER_SIGNIN_FAILURES_PER_ADDRESS", "50/hour")
# Django's password rules, for every way a password is set: the admin's forms, createsuperuser,
# changepassword, pacer_user and ensure_admin. The length is OWASP ASVS 4.0's (2.1.1: at least
# 12 characters).
PACER_PASSWORD_MIN_LENGTH = env_int("PACER_PASSWORD_MIN_LENGTH", 12, minimum=1)
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": PACER_PASSWORD_MIN_LENGTH},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Pages of runs, decisions, steps and overrides: 100 rows by default, up to 1,000 when asked.
PACER_PAGE_SIZE = 100
PACER_MAX_PAGE_SIZE = 1000
# An engine whose last poll is older than this is stale: six 5 s polls missed.
PACER_ENGINE_STALE_S = 30.0
# Engine samples come back downsampled to at most this many points per engine: a week of 5 s
# polls (120,960 per engine) becomes 10-minute points, enough to draw and one fast page.
PACER_SAMPLES_MAX_POINTS = 1000
# Engine samples are rolled up (runs.rollups) into bins of 60 s, 10 min and 1 h once they are
# this old: a bin is rolled up once, and a reporter holds up to ~10 min of samples while the
# database is away (workers.runtime.reporter.MAX_BUFFERED_ROWS), written late with their times.
PACER_ROLLUP_LAG_S = 600.0
# Raw samples (one per engine per 5 s poll) are kept a week, then only their rollups: a chart
# of the last week at any step, or of a debugging session at 5 s, still reads raw polls.
PACER_SAMPLE_RETENTION_S = 7 * 86400.0
# How often each worker's sweep compacts: one 60 s bin of new samples per run each time.
PACER_ROLLUP_EVERY_S = 60.0
# One compaction (or deletion) statement covers at most this much of a run's time: an hour of
# 5 s polls of 100 engines is 72,000 rows, a transaction of about a second on one core.
PACER_ROLLUP_CHUNK_S = 3600.0
# A sweep compacts for at most this long before it looks for orphaned runs again (every 5 s):
# a backlog is caught up over several sweeps, or at once by `manage.py compact_samples`.
PACER_ROLLUP_SWEEP_BUDGET_S = 2.0
# /metrics reports the decision counts of ended runs this long after they ended, so the last
# increments are scraped before their series go away.
PACER_METRICS_ENDED_RUNS_S = 3600.0
# The only hosts engines may be on (`host`, `host:port`, `*.domain`); empty: any. The web
# process asks every engine of a new run for its models, so without a list an operator's
# config can make it knock on any address inside the network.
PACER_ENGINE_HOSTS = env_list("PACER_ENGINE_HOSTS", [])
# When set, /metrics asks for `Authorization: Bearer <this>`; empty: open, as Prometheus
# targets usually are on an internal network (it shows run ids and figures, not configs).
PACER_METRICS_TOKEN = env_str("PACER_METRICS_TOKEN", "")

LOGIN_URL = "dashboard:signin"
LOGIN_REDIRECT_URL = "dashboard:runs"
LOGOUT_REDIRECT_URL = "dashboard:signin"
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"run_context": {"()": "workers.logcontext.RunContextFilter"}},
    "formatters": {
        "line": {
            "format": "%(asctime)s %(levelname)s %(name)s run=%(run_id)s %(message)s",
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "line",
            "filters": ["run_context"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("PACER_LOG_LEVEL", "INFO")},
    # A line per rollout turn and per scrape would bury everything else.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
