# shellcheck shell=bash
# Helpers of scripts/stack: ports, service logs, waiting; messages and processes come from common.sh.
# shellcheck source-path=SCRIPTDIR
source "${BASH_SOURCE[0]%/*}/common.sh"
SCRIPT_TAG=stack

# stop_service_process SERVICE: stop_process with the stack's messages.
stop_service_process() {
  local svc=$1 t0; t0=$(now_ms)
  if ! stop_process "$svc"; then
    say "$svc: not running"
    return 0
  fi
  say "$svc: stopped (pid $STOPPED_PID) in $(elapsed "$t0")"
}

# ---------------------------------------------------------------- ports
# port_holder PORT: describe whatever listens on PORT (any address), e.g. "python3 (pid 123) on 127.0.0.1:9876".
port_holder() {
  ss -Hltnp "( sport = :$1 )" 2>/dev/null | head -n 3 | while read -r _ _ _ addr _ procs; do
    if [[ $procs =~ \(\(\"([^\"]*)\",pid=([0-9]+) ]]; then
      printf '%s (pid %s, %s) on %s; ' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" \
        "$(proc_cmdline "${BASH_REMATCH[2]}" | cut -c1-120 | sed 's/ *$//')" "$addr"
    else
      printf 'unknown process on %s; ' "$addr"
    fi
  done
}
port_open() { timeout 2 bash -c ": >/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# ensure_ports_free SERVICE PORT...: refuse to start when another process owns one of our ports.
ensure_ports_free() {
  local svc=$1 p holder; shift
  for p in "$@"; do
    holder=$(port_holder "$p")
    if [[ -n $holder ]]; then
      die "$svc: port $p is already in use by another process, not started by this script: ${holder%; }
[stack]        stop that process (or choose another port) and run '${STACK_CMD:-scripts/stack} up' again"
    fi
  done
}

# ---------------------------------------------------------------- logs and waiting
log_file() { echo "$STACK_DIR/logs/$1.log"; }

# rotate_log SERVICE: keep the previous run's output as .log.1 so a fresh log holds this run only.
rotate_log() {
  local f; f=$(log_file "$1")
  [[ -s $f ]] && mv -f "$f" "$f.1"
  : >"$f"
}

# wait_until SERVICE PID TIMEOUT_S CHECK_FN [ARG...]: poll CHECK_FN ARG... every 0.5 s until it succeeds; fail
# with the log tail when the process dies or the time runs out.
wait_until() {
  local svc=$1 pid=$2 limit=$3 check=$4 deadline
  shift 4
  deadline=$(($(now_ms) + limit * 1000))
  while :; do
    if ! proc_alive "$pid"; then
      rm -f "$(pid_file "$svc")"
      fail_with_log "$svc" "process $pid exited before it was ready"
    fi
    "$check" "$@" && return 0
    (($(now_ms) < deadline)) || fail_with_log "$svc" "not ready after ${limit}s"
    sleep 0.5
  done
}
