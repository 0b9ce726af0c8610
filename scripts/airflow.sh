#!/usr/bin/env bash
# The local Airflow 3 control plane for this repo: start, stop, and the demo run.
#   scripts/airflow.sh start   airflow standalone on 127.0.0.1:8080, in its own process group
#   scripts/airflow.sh stop    stop that whole process group (scheduler, API server, workers...)
#   scripts/airflow.sh demo    run the taxi DAG once through Airflow (airflow dags test), then its summary
#   scripts/airflow.sh test-dag DATE [airflow dags test options]   (RETRAIN_DAG=<dag id>, default taxi_retraining)
#   scripts/airflow.sh cluster-start   Airflow as teams run it: PostgreSQL metadata DB, CeleryExecutor with a
#                                      Redis broker, scheduler, API server, dag-processor, triggerer and two
#                                      Celery workers as separate processes; ML Metadata on MariaDB
#   scripts/airflow.sh cluster-stop    stop all of it, the database servers too
# Each mode also starts a warm TFX runtime (python -m task_host.warm_server, one per host) that
# the tasks' operators fork nodes from instead of paying TensorFlow's imports per task;
# RETRAIN_WARM=0 runs every task in a cold interpreter instead.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
AF="$REPO/.venv-airflow/bin"
# standalone starts its scheduler, API server... as `airflow ...` from PATH.
export PATH="$AF:$PATH"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
# Serves governance reports at /retrain/reports/ (the tasks' "Governance report" links).
export AIRFLOW__CORE__PLUGINS_FOLDER="$REPO/airflow_tfx/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="${AIRFLOW_PORT:-8080}"
# Task processes report to the API server's execution API: same host and port.
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$AIRFLOW__API__PORT/execution/"
# Simple auth manager: user "reviewer" (admin); Airflow generates its password into
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated on first start.
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW_USERS:-reviewer:admin}"
export RETRAIN_WORKDIR="${RETRAIN_WORKDIR:-$REPO/work}"
export RETRAIN_TFX_PYTHON="${RETRAIN_TFX_PYTHON:-$REPO/.venv/bin/python}"
PIDFILE="$AIRFLOW_HOME/standalone.pgid"
# The warm TFX runtime's socket (the operators read RETRAIN_WARM_SOCKET); none with RETRAIN_WARM=0.
warm_socket() { [ "${RETRAIN_WARM:-1}" = 0 ] && echo "" || echo "$AIRFLOW_HOME/tfx-runtime.sock"; }
export RETRAIN_WARM_SOCKET="$(warm_socket)"
URL="http://127.0.0.1:$AIRFLOW__API__PORT"

migrate() {
  mkdir -p "$AIRFLOW_HOME"
  "$AF/airflow" db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 \
    || { tail -20 "$AIRFLOW_HOME/db-migrate.log" >&2; exit 1; }
}

start() {
  if [ -f "$PIDFILE" ] && kill -0 -- "-$(cat "$PIDFILE")" 2>/dev/null; then
    echo "Airflow is already running (process group $(cat "$PIDFILE")): $URL"; return 0
  fi
  migrate
  # setsid: its own session and process group, so `stop` can end every process it starts
  # (the warm TFX runtime too).
  setsid bash -c 'echo $$ > "$0"
    [ -z "$RETRAIN_WARM_SOCKET" ] || (cd "$2" && exec "$RETRAIN_TFX_PYTHON" -m task_host.warm_server \
      --socket "$RETRAIN_WARM_SOCKET" > "$3" 2>&1) &
    exec "$1/airflow" standalone' "$PIDFILE" "$AF" "$REPO" "$AIRFLOW_HOME/warm-runtime.log" \
    >"$AIRFLOW_HOME/standalone.log" 2>&1 < /dev/null &
  for _ in $(seq 1 180); do
    if curl -fsS "$URL/api/v2/monitor/health" >/dev/null 2>&1; then
      warm_wait "$AIRFLOW_HOME/warm-runtime.log"
      echo "Airflow UI: $URL  (user: ${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS%%:*})"
      echo "password:   $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
      echo "logs:       $AIRFLOW_HOME/standalone.log; stop with: make airflow-stop"
      [ -z "$RETRAIN_WARM_SOCKET" ] || echo "warm TFX runtime: $RETRAIN_WARM_SOCKET (log: $AIRFLOW_HOME/warm-runtime.log)"
      return 0
    fi
    sleep 1
  done
  echo "Airflow did not answer on $URL within 180 s; see $AIRFLOW_HOME/standalone.log" >&2
  stop; exit 1
}

warm_wait() {  # until the warm runtime answers (its imports take ~15 s; tasks run cold until then)
  [ -n "$RETRAIN_WARM_SOCKET" ] || return 0
  for _ in $(seq 1 120); do
    "$RETRAIN_TFX_PYTHON" -m task_host.warm_server --socket "$RETRAIN_WARM_SOCKET" --ping >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "the warm TFX runtime does not answer at $RETRAIN_WARM_SOCKET (tasks run cold); see $1" >&2
}

stop_group() {  # PGID_FILE WHAT: TERM the whole process group, KILL what is left after 45 s
  [ -f "$1" ] || { echo "$2 is not running (no $1)"; return 0; }
  local pgid; pgid="$(cat "$1")"
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 1 45); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  rm -f "$1"
  echo "$2 stopped (process group $pgid)"
}

stop() { stop_group "$PIDFILE" Airflow; }

test_dag() {  # DATE [options]: one DAG run through Airflow ($RETRAIN_DAG, default taxi_retraining)
  migrate
  local dag="${RETRAIN_DAG:-taxi_retraining}"
  local date="$1"; shift
  local log="$RETRAIN_WORKDIR/logs/airflow-dags-test-$(date +%Y%m%dT%H%M%S).log"
  mkdir -p "$(dirname "$log")"
  echo "airflow dags test $dag $date (full log: $log)" >&2
  local warm_pid=""
  if [ -n "$RETRAIN_WARM_SOCKET" ] \
     && ! "$RETRAIN_TFX_PYTHON" -m task_host.warm_server --socket "$RETRAIN_WARM_SOCKET" --ping >/dev/null 2>&1; then
    # The tasks fork from it (unless one answers already); stopped when the test ends.
    (cd "$REPO" && exec setsid "$RETRAIN_TFX_PYTHON" -m task_host.warm_server --socket "$RETRAIN_WARM_SOCKET") \
      >"$AIRFLOW_HOME/warm-runtime.log" 2>&1 </dev/null &
    warm_pid=$!
    trap '[ -z "'"$warm_pid"'" ] || kill -TERM -- "-'"$warm_pid"'" 2>/dev/null || true' EXIT
    warm_wait "$AIRFLOW_HOME/warm-runtime.log"
  fi
  set +e
  # No deadline alert under `dags test`: Airflow 3.3.2's test loop cannot settle a DAG run
  # that carries one (it reads the serialized alert as an id: "'dict' object has no
  # attribute 'hex'" when the run ends). The scheduler handles them; the cluster and
  # standalone tests check the alert there.
  RETRAIN_RUN_DEADLINE_HOURS=0 "$AF/airflow" dags test "$dag" "$date" "$@" 2>&1 | tee "$log" \
    | grep --line-buffered -oE '\[DAG TEST\] (starting|end) task task_id=[^ ]+' >&2
  local rc=${PIPESTATUS[0]}
  set -e
  grep -oE 'DagRun Finished: .*state=[a-z]+' "$log" | grep -oE 'run_id=[^,]+|state=[a-z]+' | paste -sd' ' >&2 || true
  return "$rc"
}

demo() {
  local rc=0
  test_dag 2017-01-01 || rc=$?
  local run_dir; run_dir="$(ls -td "$RETRAIN_WORKDIR"/runs/taxi/*/ 2>/dev/null | head -1)"
  [ -n "$run_dir" ] || { echo "no run folder under $RETRAIN_WORKDIR/runs/taxi" >&2; return 1; }
  "$RETRAIN_TFX_PYTHON" -m retrain.cli summary --run-dir "$run_dir" || rc=$?
  return "$rc"
}

# --- cluster mode ---------------------------------------------------------------------
CLUSTER_HOME="${AIRFLOW_CLUSTER_HOME:-$REPO/.airflow-cluster}"
CLUSTER_PGID="$CLUSTER_HOME/cluster.pgid"
SERVICES="$REPO/scripts/services.sh"

cluster_env() {  # the settings every cluster process shares (secrets generated once, 0600)
  mkdir -p "$CLUSTER_HOME"
  export AIRFLOW_HOME="$CLUSTER_HOME"
  eval "$("$SERVICES" env)"
  export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
  export AIRFLOW__CELERY__RESULT_BACKEND="db+$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
  export AIRFLOW__CELERY__WORKER_CONCURRENCY="${RETRAIN_WORKER_SLOTS:-4}"
  # The same login as `make airflow`: the user list and the generated password file are shared.
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$REPO/.airflow/simple_auth_manager_passwords.json.generated"
  mkdir -p "$REPO/.airflow"
  # Processes that must trust each other's tokens. (The fernet key that encrypts connections
  # comes with the database settings above: it belongs to the database, not to this home.)
  [ -s "$CLUSTER_HOME/jwt.secret" ] || (umask 077; head -c 32 /dev/urandom | base64 > "$CLUSTER_HOME/jwt.secret")
  export AIRFLOW__API_AUTH__JWT_SECRET="$(cat "$CLUSTER_HOME/jwt.secret")"
  export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=30
  export RETRAIN_WARM_SOCKET="$(warm_socket)"  # this host's warm TFX runtime, for both workers
  # ML Metadata: the URL (no password) for every process, DAG parsing included; the password
  # lives only in the Airflow connection `retrain_metadata` that the tasks read.
  export RETRAIN_METADATA_URL="mysql://retrain@127.0.0.1:${RETRAIN_MARIADB_PORT:-13306}/${RETRAIN_MLMD_DATABASE:-mlmd}"
  MLMD_PASSWORD="$RETRAIN_METADATA_PASSWORD"; unset RETRAIN_METADATA_PASSWORD
  CLUSTER_URL="http://127.0.0.1:$AIRFLOW__API__PORT"
}

cluster_start() {
  if [ -f "$CLUSTER_PGID" ] && kill -0 -- "-$(cat "$CLUSTER_PGID")" 2>/dev/null; then
    echo "the Airflow cluster is already running (process group $(cat "$CLUSTER_PGID"))"; return 0
  fi
  "$SERVICES" start mariadb postgres redis
  cluster_env
  local logs="$CLUSTER_HOME/processes"; mkdir -p "$logs"
  "$AF/airflow" db migrate >"$logs/db-migrate.log" 2>&1 || { tail -20 "$logs/db-migrate.log" >&2; exit 1; }
  "$AF/airflow" connections delete retrain_metadata >/dev/null 2>&1 || true
  "$AF/airflow" connections add retrain_metadata --conn-type mysql --conn-host 127.0.0.1 \
    --conn-port "${RETRAIN_MARIADB_PORT:-13306}" --conn-login retrain --conn-password "$MLMD_PASSWORD" \
    --conn-schema "${RETRAIN_MLMD_DATABASE:-mlmd}" >/dev/null
  # One pool per resource class, sized by the pipeline configs (the largest wins).
  "$AF/python" -m airflow_tfx.pools "$REPO"/dags/compiled/*.json | while read -r pool slots; do
    "$AF/airflow" pools set "$pool" "$slots" "retrain resource class $pool" >/dev/null
  done
  # The schema exists before parallel tasks start (ml-metadata creates it on first use).
  RETRAIN_METADATA_PASSWORD="$MLMD_PASSWORD" "$RETRAIN_TFX_PYTHON" -m retrain.cli metadata init \
    --workdir "$RETRAIN_WORKDIR"
  # Every process in one process group (setsid), each with its own log.
  setsid bash -c '
    echo $$ > "$0"; AF="$1"; logs="$2"
    [ -z "$RETRAIN_WARM_SOCKET" ] || (cd "$3" && exec "$RETRAIN_TFX_PYTHON" -m task_host.warm_server \
      --socket "$RETRAIN_WARM_SOCKET" > "$logs/warm-runtime.log" 2>&1) &
    "$AF/airflow" scheduler > "$logs/scheduler.log" 2>&1 &
    "$AF/airflow" dag-processor > "$logs/dag-processor.log" 2>&1 &
    "$AF/airflow" triggerer > "$logs/triggerer.log" 2>&1 &
    "$AF/airflow" api-server --host 127.0.0.1 --port "$AIRFLOW__API__PORT" > "$logs/api-server.log" 2>&1 &
    RETRAIN_WORKER_NAME=worker1 "$AF/airflow" celery worker --celery-hostname "worker1@%h" > "$logs/worker1.log" 2>&1 &
    RETRAIN_WORKER_NAME=worker2 "$AF/airflow" celery worker --celery-hostname "worker2@%h" --skip-serve-logs \
      > "$logs/worker2.log" 2>&1 &
    wait' "$CLUSTER_PGID" "$AF" "$logs" "$REPO" </dev/null >"$logs/cluster.log" 2>&1 &
  for _ in $(seq 1 180); do
    if curl -fsS "$CLUSTER_URL/api/v2/monitor/health" >/dev/null 2>&1; then
      warm_wait "$logs/warm-runtime.log"
      echo "Airflow cluster UI: $CLUSTER_URL  (user: ${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS%%:*})"
      echo "password:           $AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
      echo "processes:          scheduler, dag-processor, triggerer, api-server, worker1, worker2, warm TFX runtime (logs: $logs)"
      echo "ML Metadata:        $RETRAIN_METADATA_URL; stop with: make airflow-cluster-stop"
      return 0
    fi
    sleep 1
  done
  echo "the Airflow cluster did not answer on $CLUSTER_URL within 180 s; see $logs" >&2
  cluster_stop; exit 1
}

cluster_stop() {
  stop_group "$CLUSTER_PGID" "the Airflow cluster"
  [ -n "${KEEP_SERVICES:-}" ] || "$SERVICES" stop
}

cluster_airflow() {  # the airflow CLI against the cluster (e.g. backfill create)
  cluster_env
  exec "$AF/airflow" "$@"
}

case "${1:-}" in
  start) start ;;
  cluster-start) cluster_start ;;
  cluster-stop) cluster_stop ;;
  cluster-airflow) shift; cluster_airflow "$@" ;;
  stop) stop ;;
  demo) demo ;;
  test-dag) shift; test_dag "$@" ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
