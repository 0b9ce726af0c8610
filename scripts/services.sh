#!/usr/bin/env bash
# Database servers for the cluster mode and its tests, from Debian's packages: each with its
# own data directory under $RETRAIN_SERVICES (default .services/), a loopback port, and its
# own process group, so `stop` ends exactly what `start` began. Nothing system-wide is
# started or changed (the packages' own units stay off).
#   scripts/services.sh start [mariadb|postgres|redis ...]   install if missing, init once, start, wait until ready
#   scripts/services.sh stop  [mariadb|postgres|redis ...]
#   scripts/services.sh status
#   scripts/services.sh mariadb-db NAME     (re)create an empty MariaDB database NAME for the MLMD user
#   scripts/services.sh postgres-db NAME    (re)create an empty PostgreSQL database NAME for Airflow
#   scripts/services.sh env                 the connection settings (and Airflow's fernet key for its
#                                           database), as shell exports
#   scripts/services.sh install PACKAGE BINARY ...  Debian's PACKAGEs whose BINARY is missing, in one
#                                           apt-get call (benchmark tools, chromium)
#   scripts/services.sh packages [PACKAGE BINARY ...]  the servers' packages (and those named), in one
#                                           apt-get call: what `make test` installs while the venvs build
# RETRAIN_AIRFLOW_DATABASE (airflow) and RETRAIN_REDIS_DB (0) pick Airflow's database and broker DB.
# Ports: RETRAIN_MARIADB_PORT (13306), RETRAIN_POSTGRES_PORT (15432), RETRAIN_REDIS_PORT (16379).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="$(mkdir -p "${RETRAIN_SERVICES:-$REPO/.services}" && cd "${RETRAIN_SERVICES:-$REPO/.services}" && pwd)"
MARIADB_PORT="${RETRAIN_MARIADB_PORT:-13306}"
POSTGRES_PORT="${RETRAIN_POSTGRES_PORT:-15432}"
REDIS_PORT="${RETRAIN_REDIS_PORT:-16379}"
MLMD_USER=retrain
AIRFLOW_DB="${RETRAIN_AIRFLOW_DATABASE:-airflow}"

die() { echo "services: $*" >&2; exit 1; }
# shellcheck source=scripts/process_group.sh
. "$REPO/scripts/process_group.sh"

apt_install() {  # PACKAGE BINARY [PACKAGE BINARY ...]: Debian's packages whose BINARY is missing,
  # in one apt-get call (one index update; Debian 12 and 13 name them alike)
  local missing=()
  while [ $# -ge 2 ]; do
    { command -v "$2" >/dev/null 2>&1 || [ -x "$2" ]; } || missing+=("$1")
    shift 2
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] || die "${missing[*]} not installed; run as root or: apt-get install ${missing[*]}"
  echo "services: installing ${missing[*]} (apt-get)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

secret() {  # NAME: a generated password, made once, readable only by its owner
  local f="$ROOT/$1.password"
  [ -s "$f" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$f")
  cat "$f"
}

fernet_key() {  # DATABASE: the key Airflow encrypts that database's connections with, made once.
  # It belongs to the database, not to an Airflow home: every home using it must share it.
  local f="$ROOT/postgres-$1.fernet.key"
  [ -s "$f" ] || (umask 077; head -c 32 /dev/urandom | base64 | tr '+/' '-_' > "$f")
  cat "$f"
}

# The process that leads each server's group (what `launch` execs). A recorded group id can
# belong to another process by now (pids are reused after a reboot or a restored machine):
# a group is ours only if its leader is still the server, so `status` does not report a
# dead server as running and `stop` never signals someone else's processes.
declare -A LEADER=([mariadb]="mariadbd" [postgres]="runuser" [redis]="redis-server")
running() {
  [ -f "$ROOT/$1.pgid" ] || return 1
  local pgid; pgid="$(cat "$ROOT/$1.pgid")"
  kill -0 -- "-$pgid" 2>/dev/null && [ "$(cat "/proc/$pgid/comm" 2>/dev/null)" = "${LEADER[$1]}" ]
}

port_free() {  # NAME PORT: refuse a port something else (another checkout's servers?) holds
  if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then
    die "$1: 127.0.0.1:$2 is already in use by another process (another checkout's services? stop them there, or set RETRAIN_${1^^}_PORT)"
  fi
}

launch() { group_launch "$@"; }

wait_for() {  # NAME SECONDS CHECK...
  local name="$1" secs="$2"; shift 2
  for _ in $(seq 1 "$secs"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  tail -20 "$ROOT/$name.log" >&2 || true
  die "$name did not become ready within $secs s (log: $ROOT/$name.log)"
}

# --- MariaDB: ML Metadata's store -------------------------------------------------------
MARIADB_DIR="$ROOT/mariadb"
MARIADB_SOCK="$ROOT/mariadb.sock"
# --skip-ssl: Debian 13's client (the runtime root's) asks for TLS by default, which a local
# socket does not need and Debian 12's server does not offer.
mariadb_admin() { mariadb --no-defaults --skip-ssl --socket="$MARIADB_SOCK" -uroot "$@"; }

start_mariadb() {
  # A running server is enough (the TFX runtime's root, whose tests reach the host's server
  # through the shared .services/ socket, has only the client).
  running mariadb && return 0
  apt_install "${SERVER_PACKAGES[@]:0:2}"
  port_free mariadb "$MARIADB_PORT"
  if [ ! -d "$MARIADB_DIR/mysql" ]; then
    mkdir -p "$MARIADB_DIR"
    mariadb-install-db --no-defaults --datadir="$MARIADB_DIR" --user=root \
      --auth-root-authentication-method=socket --skip-test-db >"$ROOT/mariadb-init.log" 2>&1 \
      || { tail -20 "$ROOT/mariadb-init.log" >&2; die "mariadb-install-db failed"; }
  fi
  # Snapshot isolation off (MariaDB 11.6+ turned it on by default; older servers ignore the
  # loose- option): ml-metadata 1.21 reads with LOCK IN SHARE MODE inside its transactions and
  # does not retry MariaDB's error 1020 ("Record has changed since last read"), which
  # concurrent runs on one store then hit (tests/runner/test_parallel_runs.py).
  launch mariadb /usr/sbin/mariadbd --no-defaults --datadir="$MARIADB_DIR" --port="$MARIADB_PORT" \
    --bind-address=127.0.0.1 --socket="$MARIADB_SOCK" --pid-file="$ROOT/mariadb.pid" --user=root \
    --skip-name-resolve --max-connections=500 --innodb-buffer-pool-size=128M \
    --loose-innodb-snapshot-isolation=OFF
  wait_for mariadb 60 mariadb_admin -e "SELECT 1"
  # ml-metadata 1.16's bundled client speaks only mysql_native_password.
  local pw; pw="$(secret mariadb-$MLMD_USER)"
  mariadb_admin -e "CREATE USER IF NOT EXISTS '$MLMD_USER'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('$pw');
    ALTER USER '$MLMD_USER'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('$pw');
    GRANT ALL PRIVILEGES ON *.* TO '$MLMD_USER'@'127.0.0.1';"
}

mariadb_db() {  # NAME: an empty database (dropped first if it exists)
  [[ "$1" =~ ^[A-Za-z0-9_]+$ ]] || die "database name must be letters, digits, _: $1"
  running mariadb || start_mariadb
  mariadb_admin -e "DROP DATABASE IF EXISTS \`$1\`; CREATE DATABASE \`$1\`;"
}

# --- PostgreSQL: Airflow's metadata database ------------------------------------------
PG_DIR="$ROOT/postgres"
# Empty before PostgreSQL is installed (and in the TFX runtime's root, which never has it).
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start_postgres() {
  apt_install "${SERVER_PACKAGES[@]:2:2}"
  local bin; bin="$(pg_bin)"; [ -n "$bin" ] || die "PostgreSQL binaries not found under /usr/lib/postgresql"
  running postgres && return 0
  port_free postgres "$POSTGRES_PORT"
  # PostgreSQL refuses to run as root: its data dir belongs to the package's postgres user,
  # which must be able to reach it (a checkout under a 0700 home or mkdtemp folder is not).
  if [ "$(id -u)" = 0 ] && ! as_pg test -x "$ROOT"; then
    local d="" part; IFS=/ read -ra parts <<< "${ROOT#/}"
    for part in "${parts[@]}"; do d="$d/$part"; as_pg test -x "$d" || break; done  # the first folder it cannot enter
    die "postgres: the postgres user cannot reach $ROOT ($d is not open to others: $(stat -c %A "$d")); set RETRAIN_SERVICES to a folder it can reach, or chmod o+x $d"
  fi
  if [ ! -f "$PG_DIR/PG_VERSION" ]; then
    mkdir -p "$PG_DIR"; [ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"; chmod 700 "$PG_DIR"
    as_pg "$bin/initdb" -D "$PG_DIR" -U postgres --auth=trust -E UTF8 >"$ROOT/postgres-init.log" 2>&1 \
      || { tail -20 "$ROOT/postgres-init.log" >&2; die "initdb failed"; }
  fi
  [ "$(id -u)" = 0 ] && chown postgres: "$ROOT" 2>/dev/null; touch "$ROOT/postgres.log"; chmod 666 "$ROOT/postgres.log"
  launch postgres runuser -u postgres -- "$bin/postgres" -D "$PG_DIR" -p "$POSTGRES_PORT" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories="$ROOT" -c max_connections=300
  wait_for postgres 60 "$bin/pg_isready" -h 127.0.0.1 -p "$POSTGRES_PORT"
  local pw; pw="$(secret postgres-airflow)"
  "$bin/psql" -h 127.0.0.1 -p "$POSTGRES_PORT" -U postgres -qtAc \
    "SELECT 1 FROM pg_roles WHERE rolname='airflow'" | grep -q 1 \
    || "$bin/psql" -h 127.0.0.1 -p "$POSTGRES_PORT" -U postgres -qc "CREATE ROLE airflow LOGIN PASSWORD '$pw'"
  postgres_db "$AIRFLOW_DB" keep
}

postgres_db() {  # NAME [keep]: a database owned by the airflow role (recreated empty unless keep)
  [[ "$1" =~ ^[a-z0-9_]+$ ]] || die "database name must be lower-case letters, digits, _: $1"
  local bin; bin="$(pg_bin)"; local psql=("$bin/psql" -h 127.0.0.1 -p "$POSTGRES_PORT" -U postgres)
  if [ "${2:-}" != keep ]; then "${psql[@]}" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)"; rm -f "$ROOT/postgres-$1.fernet.key"; fi
  "${psql[@]}" -qtAc "SELECT 1 FROM pg_database WHERE datname='$1'" | grep -q 1 \
    || "${psql[@]}" -qc "CREATE DATABASE $1 OWNER airflow"
}

# --- Redis: the Celery broker -----------------------------------------------------------
start_redis() {
  apt_install "${SERVER_PACKAGES[@]:4:2}"
  running redis && return 0
  port_free redis "$REDIS_PORT"
  mkdir -p "$ROOT/redis"
  launch redis /usr/bin/redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$ROOT/redis" \
    --save "" --appendonly no --protected-mode yes
  wait_for redis 30 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping
}

stop_one() { group_stop "$1" 30 services; }

env_exports() {
  running mariadb && echo "export RETRAIN_METADATA_URL='mysql://$MLMD_USER@127.0.0.1:$MARIADB_PORT/mlmd'" \
    && echo "export RETRAIN_METADATA_PASSWORD='$(secret mariadb-$MLMD_USER)'"
  running postgres && echo "export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='postgresql+psycopg2://airflow:$(secret postgres-airflow)@127.0.0.1:$POSTGRES_PORT/$AIRFLOW_DB'" \
    && echo "export AIRFLOW__CORE__FERNET_KEY='$(fernet_key "$AIRFLOW_DB")'"
  running redis && echo "export AIRFLOW__CELERY__BROKER_URL='redis://127.0.0.1:$REDIS_PORT/${RETRAIN_REDIS_DB:-0}'"
  return 0
}

ALL=(mariadb postgres redis)
# Each server's Debian package and the binary that shows it is installed (start_* install
# them one by one; `packages` all at once).
SERVER_PACKAGES=(mariadb-server /usr/sbin/mariadbd postgresql "$(pg_bin)/postgres" redis-server /usr/bin/redis-server)
cmd="${1:-}"; shift || true
# One caller at a time (the two test suites start the same servers side by side).
exec 9>"$ROOT/.lock"; flock 9
names=("$@"); [ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
case "$cmd" in
  # A server that fails to start stops those this call started before it (not ones already
  # running), so a failed start never leaves a port held for the next one.
  start) started=()
    for n in "${names[@]}"; do
      running "$n" || started+=("$n")
      ( "start_$n" ) || { for s in "${started[@]}"; do stop_one "$s" >&2 || true; done; exit 1; }
    done ;;
  stop) for n in "${names[@]}"; do stop_one "$n"; done ;;
  status) for n in "${ALL[@]}"; do running "$n" && echo "$n: running" || echo "$n: stopped"; done ;;
  mariadb-db) mariadb_db "${names[0]}" ;;
  postgres-db) running postgres || start_postgres; postgres_db "${names[0]}" ;;
  env) env_exports ;;
  install) { [ ${#names[@]} -ge 2 ] && [ $(( ${#names[@]} % 2 )) -eq 0 ]; } || die "install PACKAGE BINARY [PACKAGE BINARY ...]"
    apt_install "${names[@]}" ;;
  packages) { [ $(( $# % 2 )) -eq 0 ]; } || die "packages [PACKAGE BINARY ...]"
    apt_install "${SERVER_PACKAGES[@]}" "$@" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
