# Shared by scripts/run and scripts/test: the virtualenv and the services Pacer needs.
# Sourced, not executed. Every function prints what it does; failures stop with a reason.

PACER_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PACER_VAR=${PACER_VAR_DIR:-$PACER_ROOT/var}
VENV=${PACER_VENV:-$PACER_ROOT/.venv}
PY=$VENV/bin/python
mkdir -p "$PACER_VAR"
chmod 700 "$PACER_VAR"  # the SQLite database in it holds API tokens

say() { printf '\033[1m[pacer]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[pacer] error:\033[0m %s\n' "$*" >&2; exit 1; }

# Commands that tear down what this script started, run in reverse order on exit.
_cleanups=()
on_exit() { _cleanups+=("$1"); }
run_cleanups() {
  # A second Ctrl-C while a service takes its time to stop must not cut the teardown short.
  trap '' INT TERM HUP
  local i
  for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[i]}" || true; done
  _cleanups=()
}

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [[ -n $candidate ]] && command -v "$candidate" >/dev/null || continue
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  die "Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)"
}

# Installs the project (with the given extras, "" for none) into the virtualenv, again only
# when pyproject.toml changed since. An install with the test extras also serves a plain run
# (and the vLLM demo's trainer: the test extras hold the trainer's).
ensure_venv() {
  local extras=$1 hash target
  # A venv without pip is one that python3-venv's absence left half made: start it again.
  if ! "$PY" -m pip --version >/dev/null 2>&1; then
    if [[ -e $VENV ]]; then
      [[ -f $VENV/pyvenv.cfg ]] || die "$VENV is not a virtualenv: move it away, or set PACER_VENV"
      rm -rf "$VENV"
    fi
    say "creating the virtualenv in $VENV"
    "$(find_python)" -m venv "$VENV" || {
      rm -rf "$VENV"
      die "could not create a virtualenv (on Debian and Ubuntu: install python3-venv)"
    }
  fi
  hash=$(sha256sum "$PACER_ROOT/pyproject.toml" | cut -d' ' -f1)
  [[ $(cat "$VENV/.pacer-installed-test" 2>/dev/null) == "$hash" ]] && return 0
  [[ $(cat "$VENV/.pacer-installed-${extras:-base}" 2>/dev/null) == "$hash" ]] && return 0
  say "installing Pacer and its dependencies${extras:+ [$extras]} (first time: a few minutes)"
  ensure_torch
  target=$PACER_ROOT${extras:+[$extras]}
  "$PY" -m pip install --quiet -e "$target" || die "pip install failed (see above)"
  echo "$hash" >"$VENV/.pacer-installed-${extras:-base}"
}

# torch first, so that the project install finds it satisfied. PyPI's Linux wheel is the CUDA
# build, several GB that a CPU machine must never pull: unless pip's own candidate is a CPU
# build (a wheel on local disk, say) or an NVIDIA driver is present, take PyTorch's CPU index.
TORCH_VERSION=2.13.0
ensure_torch() {
  "$PY" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$TORCH_VERSION'))" \
    2>/dev/null && return 0
  local candidate
  candidate=$("$PY" -m pip install --quiet --dry-run --no-deps --report - "torch==$TORCH_VERSION" \
    2>/dev/null | "$PY" -c 'import json, sys, urllib.parse as u; print(u.unquote(json.load(sys.stdin)["install"][0]["download_info"]["url"]))' \
    2>/dev/null)
  if [[ $candidate == *+cpu* ]] || command -v nvidia-smi >/dev/null; then
    "$PY" -m pip install --quiet "torch==$TORCH_VERSION"
  else
    say "no NVIDIA driver: installing the CPU build of torch $TORCH_VERSION from PyTorch's index"
    "$PY" -m pip install --quiet "torch==$TORCH_VERSION" \
      --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple
  fi || die "torch $TORCH_VERSION could not be installed"
}

# Runs a command as root: directly when we are root, through sudo when it is available.
as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

apt_install() {
  command -v apt-get >/dev/null || return 1
  say "installing $* with apt-get"
  as_root apt-get update -qq >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq "$@" >/dev/null
}

redis_reachable() {
  "$PY" - "$REDIS_URL" <<'PYEOF' 2>/dev/null
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
PYEOF
}

# Uses a running Redis; otherwise starts a local redis-server (installing it when it can)
# and stops it again when the calling script exits.
ensure_redis() {
  export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
  redis_reachable && { say "Redis: using the one at $REDIS_URL"; return 0; }
  local port
  port=$("$PY" -c 'import sys,urllib.parse as u; print(u.urlparse(sys.argv[1]).port or 6379)' "$REDIS_URL")
  case $REDIS_URL in
    redis://127.0.0.1* | redis://localhost*) ;;
    *) die "Redis at $REDIS_URL is not reachable, and it is not local, so it cannot be started here" ;;
  esac
  command -v redis-server >/dev/null || apt_install redis-server ||
    die "Redis is not reachable at $REDIS_URL and redis-server could not be installed: install Redis, or set REDIS_URL"
  say "Redis: starting redis-server on port $port"
  local pidfile=$PACER_VAR/redis-$port.pid  # one per port: two scripts may each start one
  rm -f "$pidfile"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --pidfile "$pidfile" --logfile "$PACER_VAR/redis-$port.log" --dir "$PACER_VAR" ||
    die "redis-server did not start (see $PACER_VAR/redis-$port.log)"
  on_exit "kill \$(cat '$pidfile' 2>/dev/null) 2>/dev/null; rm -f '$pidfile'; say 'Redis stopped'"
  for _ in $(seq 50); do redis_reachable && return 0; sleep 0.1; done
  die "redis-server started but does not answer (see $PACER_VAR/redis-$port.log)"
}

postgres_reachable() {
  "$PY" - "$DATABASE_URL" <<'PYEOF' 2>/dev/null
import sys, psycopg
psycopg.connect(sys.argv[1], connect_timeout=2).close()
PYEOF
}

# Uses a running PostgreSQL; otherwise starts the local cluster (installing PostgreSQL from
# the system packages when it can) and stops it on exit if it was not running before. Only a
# cluster installed here gets the password of the default URL: an existing cluster's postgres
# role is never changed behind its owner's back.
ensure_postgres() {
  local default_url=postgres://postgres:postgres@127.0.0.1:5432/postgres
  export DATABASE_URL=${DATABASE_URL:-$default_url}
  local where=${DATABASE_URL##*@}  # host, port and database: no credentials in the output
  postgres_reachable && { say "PostgreSQL: using the one at $where"; return 0; }
  local installed=""
  if ! command -v pg_ctlcluster >/dev/null; then
    apt_install postgresql ||
      die "PostgreSQL is not reachable at DATABASE_URL and could not be installed: install PostgreSQL, or set DATABASE_URL"
    installed=yes
  fi
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  [[ -n $version ]] || die "PostgreSQL is installed but has no cluster in /etc/postgresql"
  if as_root pg_ctlcluster "$version" main status >/dev/null 2>&1; then
    say "PostgreSQL: cluster $version/main is running"
  else
    say "PostgreSQL: starting cluster $version/main"
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start ||
      die "PostgreSQL cluster $version/main did not start"
    on_exit "as_root pg_ctlcluster --skip-systemctl-redirect $version main stop; say 'PostgreSQL stopped'"
    for _ in $(seq 50); do postgres_reachable && return 0; sleep 0.2; done
  fi
  if [[ -n $installed && $DATABASE_URL == "$default_url" ]]; then
    # A fresh Debian cluster asks for a password on TCP that its postgres role does not have.
    as_root su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null 2>&1
    postgres_reachable && return 0
  fi
  die "PostgreSQL cluster $version/main refuses the login in DATABASE_URL ($where): set DATABASE_URL to a role that may create databases (e.g. sudo -u postgres psql -c \"ALTER USER postgres PASSWORD 'postgres'\" for the default)"
}

# Node and npm, for the dashboard's browser packages: the ones on PATH, or the system's
# packages when missing (as ensure_redis does for Redis).
ensure_node() {
  command -v node >/dev/null && command -v npm >/dev/null && return 0
  apt_install nodejs npm ||
    die "Node.js and npm are needed for the dashboard's packages and could not be installed: install them"
}

# The dashboard's browser packages (uPlot, pinned in package-lock.json): `npm ci` again only
# when the lockfile changed since, then uPlot's built files copied into the app's static
# folder (gitignored), where Django (DEBUG on) or collectstatic and whitenoise find them.
DASHBOARD_VENDOR=$PACER_ROOT/controlplane/dashboard/static/dashboard/vendor
ensure_assets() {
  local hash stamp=$PACER_ROOT/node_modules/.pacer-lock-hash
  hash=$(sha256sum "$PACER_ROOT/package-lock.json" | cut -d' ' -f1)
  if [[ $(cat "$stamp" 2>/dev/null) != "$hash" ]]; then
    ensure_node
    say "dashboard packages: npm ci (package-lock.json changed)"
    (cd "$PACER_ROOT" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed (see above)"
    echo "$hash" >"$stamp"
  fi
  mkdir -p "$DASHBOARD_VENDOR/uplot"
  cp "$PACER_ROOT"/node_modules/uplot/dist/{uPlot.iife.min.js,uPlot.min.css} "$DASHBOARD_VENDOR/uplot/" ||
    die "uPlot's files are missing from node_modules: remove node_modules and run again"
}

# Debian's Chromium, which the browser tests drive through Playwright (never a browser
# download of Playwright's own: none can be fetched here).
CHROMIUM=${PACER_CHROMIUM:-/usr/bin/chromium}
ensure_chromium() {
  [[ -x $CHROMIUM ]] && return 0
  apt_install chromium || die "Chromium is needed by the browser tests and could not be installed: install chromium"
  [[ -x $CHROMIUM ]] || die "chromium was installed but $CHROMIUM is not there: set PACER_CHROMIUM"
}
