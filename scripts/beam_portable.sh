#!/usr/bin/env bash
# Beam's portable runner on this machine: the job service (apache_beam's
# local_job_service_main: job submission, artifact staging) and an SDK worker pool for the
# EXTERNAL environment (runner/beam_worker_pool.py: workers are separate processes of the
# TFX runtime, started with the `python` on PATH, which this script sets to the runtime's).
# The same submission, staging and out-of-process workers as Flink's and Spark's portable
# runners. Each server in its own process group, on loopback, state under $RETRAIN_SERVICES/beam.
#   scripts/beam_portable.sh start      start both, wait until they answer
#   scripts/beam_portable.sh stop
#   scripts/beam_portable.sh status
#   scripts/beam_portable.sh run-args   the `retrain run` flags that use them (the portable profile)
# Ports: RETRAIN_BEAM_JOB_PORT (18099), RETRAIN_BEAM_WORKER_PORT (15000).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="$(mkdir -p "${RETRAIN_SERVICES:-$REPO/.services}/beam" && cd "${RETRAIN_SERVICES:-$REPO/.services}/beam" && pwd)"
VENV="${RETRAIN_TFX_VENV:-$REPO/.venv}"
JOB_PORT="${RETRAIN_BEAM_JOB_PORT:-18099}"
WORKER_PORT="${RETRAIN_BEAM_WORKER_PORT:-15000}"
declare -A MODULE=([job]="apache_beam.runners.portability.local_job_service_main" [workers]="runner.beam_worker_pool")

die() { echo "beam_portable: $*" >&2; exit 1; }
# shellcheck source=scripts/process_group.sh
. "$REPO/scripts/process_group.sh"

# A recorded group is ours only while its leader still runs our module (pids are reused).
running() {
  [ -f "$ROOT/$1.pgid" ] || return 1
  local pgid; pgid="$(cat "$ROOT/$1.pgid")"
  kill -0 -- "-$pgid" 2>/dev/null && tr '\0' ' ' < "/proc/$pgid/cmdline" 2>/dev/null | grep -q -- "-m ${MODULE[$1]}"
}

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

launch() {  # NAME PORT COMMAND...
  local name="$1" port="$2"; shift 2
  running "$name" && return 0
  answers "$port" && die "$name: 127.0.0.1:$port is already in use by another process (set RETRAIN_BEAM_${name^^}_PORT)"
  [ -x "$VENV/bin/python" ] || die "no TFX runtime at $VENV (make venv)"
  group_launch "$name" env PATH="$VENV/bin:$PATH" "$@"
  for _ in $(seq 1 60); do answers "$port" && { echo "beam_portable: $name on 127.0.0.1:$port" >&2; return 0; }; sleep 0.5; done
  tail -20 "$ROOT/$name.log" >&2 || true
  die "$name did not answer on 127.0.0.1:$port within 30 s (log: $ROOT/$name.log)"
}

stop_one() { group_stop "$1" 10 beam_portable; }

cmd="${1:-}"
exec 9>"$ROOT/.lock"; flock 9
case "$cmd" in
  start)
    mkdir -p "$ROOT/staging"
    launch workers "$WORKER_PORT" "$VENV/bin/python" -m "${MODULE[workers]}" --port "$WORKER_PORT"
    launch job "$JOB_PORT" "$VENV/bin/python" -m "${MODULE[job]}" --port "$JOB_PORT" --staging_dir "$ROOT/staging" ;;
  stop) stop_one job; stop_one workers ;;
  status) for n in job workers; do running "$n" && echo "$n: running" || echo "$n: stopped"; done ;;
  run-args) echo "--beam-profile portable --set beam.options.job_endpoint=localhost:$JOB_PORT" \
              "--set beam.options.environment_config=localhost:$WORKER_PORT" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
