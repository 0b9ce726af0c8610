# Sourced by the scripts that start servers (services.sh, beam_portable.sh): each server in
# its own session and process group, its group id recorded in $ROOT/NAME.pgid, so that stop
# ends exactly what start began. The sourcing script defines `running NAME` (whether the
# recorded group still belongs to its server) and sets ROOT.

group_launch() {  # NAME COMMAND...: start in a new session, group id recorded, output to $ROOT/NAME.log
  local name="$1"; shift
  # 9>&-: the server must not inherit the lock the calling script holds (it would hold it forever).
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$ROOT/$name.pgid" "$@" \
    >>"$ROOT/$name.log" 2>&1 </dev/null 9>&- &
}

group_stop() {  # NAME SECONDS LABEL: TERM the group, KILL what is left after SECONDS
  local name="$1" secs="$2" label="$3"
  running "$name" || { rm -f "$ROOT/$name.pgid"; return 0; }
  local pgid; pgid="$(cat "$ROOT/$name.pgid")"
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 1 "$secs"); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  rm -f "$ROOT/$name.pgid"
  echo "$label: $name stopped" >&2
}
