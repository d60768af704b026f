# shellcheck shell=bash
# Helpers shared by scripts/stack, scripts/run and scripts/bench: messages, and the processes a script starts
# and stops again by recorded pid (never by name).
#
# The sourcing script sets:
#   SCRIPT_TAG   its message prefix: say/warn/die print "[$SCRIPT_TAG] ..."
#   PID_DIR      where pid files live: PID_DIR/NAME.pid holds "PID STARTTIME"
# and may redefine these hooks (defaults below):
#   svc_pattern NAME        what /proc/PID/cmdline of NAME must contain (seckill-ROLE[-N]: "seckill ROLE")
#   svc_stop_signal NAME    the signal that asks NAME to stop (TERM)
#   svc_stop_timeout NAME   seconds between that signal and SIGKILL (20)
#   svc_port NAME           a port named in failure messages (none)

say()  { printf '[%s] %s\n' "$SCRIPT_TAG" "$*"; }
warn() { printf '[%s] WARNING: %s\n' "$SCRIPT_TAG" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$SCRIPT_TAG" "$*" >&2; exit 1; }

# now_ms: milliseconds since the epoch; elapsed START_MS: "12.3s".
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }
elapsed() { local d=$(( $(now_ms) - $1 )); printf '%d.%ds' $((d / 1000)) $(((d % 1000) / 100)); }

# ---------------------------------------------------------------- hooks (defaults)
# seckill-api, seckill-worker-2: a `seckill api` / `seckill worker` process started by scripts/run or scripts/bench.
svc_pattern() { case $1 in seckill-*) echo "seckill $(role_of "$1")" ;; esac; }
# role_of NAME: the seckill subcommand NAME runs (seckill-api-2: api).
role_of() { local role=${1#seckill-}; echo "${role%%-[0-9]*}"; }
svc_stop_signal() { echo TERM; }
svc_stop_timeout() { echo 20; }

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

pid_file() { echo "$PID_DIR/$1.pid"; }

# cmdline_pattern NAME: svc_pattern NAME, never empty (an empty pattern would match any process).
cmdline_pattern() {
  local pattern; pattern=$(svc_pattern "$1")
  [[ -n $pattern ]] || die "no command-line pattern for '$1' (svc_pattern)"
  echo "$pattern"
}

# record_pid NAME PID: store "PID STARTTIME" so a recycled pid is never mistaken for ours.
record_pid() {
  local st; st=$(proc_start_time "$2") || return 1
  mkdir -p "$PID_DIR"
  echo "$2 $st" >"$(pid_file "$1")"
}

# live_pid NAME: print our recorded pid if that exact process is still alive (same start time, and its
# command line contains svc_pattern NAME). Removes a stale pid file.
live_pid() {
  local f pid st cur pattern
  f=$(pid_file "$1")
  [[ -s $f ]] || return 1
  pattern=$(cmdline_pattern "$1") || return 2
  read -r pid st <"$f" || true
  if [[ $pid =~ ^[0-9]+$ ]] && cur=$(proc_start_time "$pid") && [[ $cur == "$st" ]]; then
    if [[ $(proc_cmdline "$pid") == *"$pattern"* ]]; then
      echo "$pid"; return 0
    fi
  fi
  rm -f "$f"
  return 1
}

# launch NAME LOGFILE CMD...: start CMD detached (own session, stdin from /dev/null, output appended to LOGFILE,
# no inherited descriptors beyond 0-2) so it survives the calling shell, make and CI steps; record its pid and
# start time once it has exec'd. Sets LAUNCHED_PID; fails with the log's tail when CMD exits at once.
launch() {
  local name=$1 logf=$2; shift 2
  # setsid execs in place (the child of & is not a group leader), so $! is the process's own pid.
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid bash -c 'for fd in /proc/$$/fd/*; do fd=${fd##*/}; ((fd > 2)) && eval "exec ${fd}>&-"; done; exec "$@"' \
    stack-launch "$@" </dev/null >>"$logf" 2>&1 &
  LAUNCHED_PID=$!
  local pattern i; pattern=$(cmdline_pattern "$name") || exit 1
  for ((i = 0; i < 50; i++)); do          # wait for the exec (up to 5 s), then record pid + start time
    [[ $(proc_cmdline "$LAUNCHED_PID") == *"$pattern"* ]] && break
    proc_alive "$LAUNCHED_PID" || break
    sleep 0.1
  done
  record_pid "$name" "$LAUNCHED_PID" || fail_with_log "$name" "exited immediately" "$logf"
}

# stop_process NAME: svc_stop_signal (SIGTERM) our recorded process, wait up to svc_stop_timeout s, then SIGKILL;
# remove its pid file. Sets STOPPED_PID; fails (quietly) when NAME is not running. Never by name.
stop_process() {
  local name=$1 pid i limit sig
  pid=$(live_pid "$name") || return 1
  sig=$(svc_stop_signal "$name") limit=$(svc_stop_timeout "$name")
  kill -"$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < limit * 10; i++)); do
    proc_alive "$pid" || break
    sleep 0.1
  done
  if proc_alive "$pid"; then
    warn "$name: pid $pid still running ${limit}s after SIG$sig, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do proc_alive "$pid" || break; sleep 0.1; done
  fi
  rm -f "$(pid_file "$name")"
  # shellcheck disable=SC2034 # read by the callers
  STOPPED_PID=$pid
}

# fail_with_log NAME WHY [LOGFILE]: die with the last 30 lines of NAME's log (default: log_file NAME).
fail_with_log() {
  local name=$1 why=$2 f=${3:-} port=""
  [[ -n $f ]] || f=$(log_file "$name")
  if declare -F svc_port >/dev/null; then port=" (port $(svc_port "$name"))"; fi
  {
    printf '[%s] ERROR: %s: %s%s. Last 30 lines of %s:\n' "$SCRIPT_TAG" "$name" "$why" "$port" "$f"
    tail -n 30 "$f" 2>/dev/null | sed 's/^/    /'
  } >&2
  exit 1
}
