# shellcheck shell=bash
# Helpers shared by scripts/stack: logging, pid files, ports, detached launch, waiting.

log()  { printf '[stack] %s\n' "$*"; }
warn() { printf '[stack] WARNING: %s\n' "$*" >&2; }
die()  { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

# now_ms: milliseconds since the epoch; elapsed START_MS: "12.3s".
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }
elapsed() { local d=$(( $(now_ms) - $1 )); printf '%d.%ds' $((d / 1000)) $(((d % 1000) / 100)); }

# ---------------------------------------------------------------- processes
# proc_start_time PID: the kernel start time (clock ticks since boot) of PID, field 22 of /proc/PID/stat.
proc_start_time() {
  local stat rest
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }          # drop "pid (comm) ", comm may contain spaces
  # shellcheck disable=SC2086
  set -- $rest               # $1 = state (field 3) ... field 22 = ${20}
  echo "${20}"
}
# proc_alive PID: running and not a zombie (an exited daemon stays a zombie until init reaps it).
proc_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}
proc_cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null; }

pid_file() { echo "$STACK_DIR/pids/$1.pid"; }

# record_pid SERVICE PID: store "PID STARTTIME" so a recycled pid is never mistaken for ours.
record_pid() {
  local st; st=$(proc_start_time "$2") || return 1
  echo "$2 $st" >"$(pid_file "$1")"
}

# live_pid SERVICE: print our recorded pid if that exact process is still alive (same start time, and its
# command line contains the service's expected pattern). Removes a stale pid file.
live_pid() {
  local f pid st cur pattern
  f=$(pid_file "$1")
  [[ -s $f ]] || return 1
  read -r pid st <"$f" || true
  if [[ $pid =~ ^[0-9]+$ ]] && cur=$(proc_start_time "$pid") && [[ $cur == "$st" ]]; then
    pattern=$(svc_pattern "$1")
    if [[ $(proc_cmdline "$pid") == *"$pattern"* ]]; then
      echo "$pid"; return 0
    fi
  fi
  rm -f "$f"
  return 1
}

# launch SERVICE LOGFILE CMD...: start CMD detached (own session, stdin from /dev/null, output to LOGFILE,
# no inherited descriptors beyond 0-2) so it survives the calling shell, make and CI steps. Sets LAUNCHED_PID.
launch() {
  local svc=$1 logf=$2; shift 2
  # setsid execs in place (the child of & is not a group leader), so $! is the service's own pid.
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid bash -c 'for fd in /proc/$$/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec ${fd}>&-"; done; exec "$@"' \
    stack-launch "$@" </dev/null >>"$logf" 2>&1 &
  LAUNCHED_PID=$!
  local pattern i; pattern=$(svc_pattern "$svc")
  for ((i = 0; i < 50; i++)); do          # wait for the exec (up to 5 s), then record pid + start time
    [[ $(proc_cmdline "$LAUNCHED_PID") == *"$pattern"* ]] && break
    proc_alive "$LAUNCHED_PID" || break
    sleep 0.1
  done
  record_pid "$svc" "$LAUNCHED_PID" || { fail_with_log "$svc" "exited immediately"; }
}

# stop_service_process SERVICE: SIGTERM (or the service's svc_stop_signal) our recorded process, wait up to
# svc_stop_timeout s, then SIGKILL. Never by name.
stop_service_process() {
  local svc=$1 pid t0 i
  if ! pid=$(live_pid "$svc"); then
    log "$svc: not running"
    return 0
  fi
  t0=$(now_ms)
  kill -"$(svc_stop_signal "$svc")" "$pid" 2>/dev/null || true
  local limit; limit=$(svc_stop_timeout "$svc")
  for ((i = 0; i < limit * 10; i++)); do
    proc_alive "$pid" || break
    sleep 0.1
  done
  if proc_alive "$pid"; then
    warn "$svc: pid $pid still running ${limit}s after SIG$(svc_stop_signal "$svc"), sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do proc_alive "$pid" || break; sleep 0.1; done
  fi
  rm -f "$(pid_file "$svc")"
  log "$svc: stopped (pid $pid) in $(elapsed "$t0")"
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

fail_with_log() {
  local svc=$1 why=$2 f
  f=$(log_file "$svc")
  {
    printf '[stack] ERROR: %s: %s (port %s). Last 30 lines of %s:\n' "$svc" "$why" "$(svc_port "$svc")" "$f"
    tail -n 30 "$f" 2>/dev/null | sed 's/^/    /'
  } >&2
  exit 1
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
