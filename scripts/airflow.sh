#!/usr/bin/env bash
# The local Airflow 3 control plane for this repo: start, stop, and the demo run.
#   scripts/airflow.sh start   airflow standalone on 127.0.0.1:8080, in its own process group
#   scripts/airflow.sh stop    stop that whole process group (scheduler, API server, workers...)
#   scripts/airflow.sh demo    run the taxi DAG once through Airflow (airflow dags test), then its summary
#   scripts/airflow.sh test-dag DATE [airflow dags test options]
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
  # setsid: its own session and process group, so `stop` can end every process it starts.
  setsid bash -c 'echo $$ > "$0"; exec "$1/airflow" standalone' "$PIDFILE" "$AF" \
    >"$AIRFLOW_HOME/standalone.log" 2>&1 < /dev/null &
  for _ in $(seq 1 180); do
    if curl -fsS "$URL/api/v2/monitor/health" >/dev/null 2>&1; then
      echo "Airflow UI: $URL  (user: ${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS%%:*})"
      echo "password:   $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
      echo "logs:       $AIRFLOW_HOME/standalone.log; stop with: make airflow-stop"
      return 0
    fi
    sleep 1
  done
  echo "Airflow did not answer on $URL within 180 s; see $AIRFLOW_HOME/standalone.log" >&2
  stop; exit 1
}

stop() {
  [ -f "$PIDFILE" ] || { echo "Airflow is not running (no $PIDFILE)"; return 0; }
  local pgid; pgid="$(cat "$PIDFILE")"
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 1 30); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  rm -f "$PIDFILE"
  echo "Airflow stopped (process group $pgid)"
}

test_dag() {  # DATE [options]: one DAG run through Airflow; progress per task, full log kept
  migrate
  local date="$1"; shift
  local log="$RETRAIN_WORKDIR/logs/airflow-dags-test-$(date +%Y%m%dT%H%M%S).log"
  mkdir -p "$(dirname "$log")"
  echo "airflow dags test taxi_retraining $date (full log: $log)" >&2
  set +e
  "$AF/airflow" dags test taxi_retraining "$date" "$@" 2>&1 | tee "$log" \
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

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  demo) demo ;;
  test-dag) shift; test_dag "$@" ;;
  *) sed -n '2,6p' "$0"; exit 2 ;;
esac
