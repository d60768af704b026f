# shellcheck shell=bash
# One-time installs into the machine (Debian packages) and the cache dir (RocketMQ jars, Temporal CLI).
# Everything here is skipped when already present: a second run downloads nothing.

TEMPORAL_VERSION=1.5.1
ROCKETMQ_VERSION=5.3.3
TEMPORAL_BIN="$CACHE/temporal-$TEMPORAL_VERSION/bin/temporal"
ROCKETMQ_LIB="$CACHE/rocketmq-$ROCKETMQ_VERSION/lib"

APT_UPDATED=0
# apt_install PKG...: install Debian packages without letting their init scripts start system services.
apt_install() {
  command -v apt-get >/dev/null || die "apt-get not found: install $* by hand"
  ((EUID == 0)) || die "installing $* needs root (apt-get); run as root or install them first"
  local own_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    # policy-rc.d exit 101 = "action forbidden": the packages' postinst will not start redis/mariadb.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  local apt_log="$CACHE/logs/apt.log" rc=0
  mkdir -p "$CACHE/logs"
  if ((APT_UPDATED == 0)); then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$apt_log" 2>&1 || rc=$?
    APT_UPDATED=1
  fi
  if ((rc == 0)); then
    say "apt-get install $* (log: $apt_log)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$apt_log" 2>&1 || rc=$?
  fi
  if ((own_policy)); then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
  ((rc == 0)) || { tail -n 20 "$apt_log" >&2; die "apt-get failed for $* (exit $rc), see $apt_log"; }
}

# ensure_tools: the small tools the script itself relies on.
ensure_tools() {
  local pkgs=()
  command -v ss >/dev/null || pkgs+=(iproute2)
  command -v curl >/dev/null || pkgs+=(curl)
  command -v setsid >/dev/null || pkgs+=(util-linux)
  command -v flock >/dev/null || pkgs+=(util-linux)
  ((${#pkgs[@]} == 0)) || apt_install "${pkgs[@]}"
}

ensure_redis_installed() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
  apt_install redis-server
}

ensure_mariadb_installed() {
  command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null && command -v mariadb >/dev/null &&
    command -v mariadb-admin >/dev/null && return 0
  apt_install mariadb-server mariadb-client
}

ensure_prometheus_installed() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  apt_install prometheus
}

# ensure_browser_installed: Debian's Chromium, which test/browser drives headless (the pages' tests).
ensure_browser_installed() {
  command -v chromium >/dev/null && return 0
  apt_install chromium
}

ensure_java() {
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
}

# ensure_rocketmq_installed: jars from Maven Central into $CACHE/rocketmq-5.3.3/lib. The download goes to
# lib.tmp and is renamed only after Maven succeeded, so a half download is never taken as complete.
ensure_rocketmq_installed() {
  ensure_java
  if [[ -d $ROCKETMQ_LIB ]] && compgen -G "$ROCKETMQ_LIB/rocketmq-broker-*.jar" >/dev/null; then return 0; fi
  command -v mvn >/dev/null || apt_install maven
  exec 8>"$CACHE/.rocketmq.lock"; flock 8        # another 'stack up' may be downloading right now
  if [[ ! -d $ROCKETMQ_LIB ]]; then
    local tmp="$ROCKETMQ_LIB.tmp" mlog="$CACHE/logs/mvn.log" t0
    t0=$(now_ms)
    say "downloading RocketMQ $ROCKETMQ_VERSION jars from Maven Central (log: $mlog)..."
    mkdir -p "$CACHE/logs"
    if ! mvn -B -q -f "$REPO/scripts/rocketmq/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" >>"$mlog" 2>&1; then
      tail -n 20 "$mlog" >&2
      die "RocketMQ jar download failed, see $mlog"
    fi
    mv "$tmp" "$ROCKETMQ_LIB"
    say "RocketMQ jars ready ($(find "$ROCKETMQ_LIB" -name '*.jar' | wc -l) jars) in $(elapsed "$t0")"
  fi
  exec 8>&-
}

# ensure_temporal_installed: build the Temporal CLI (server + UI inside) with the Go toolchain.
ensure_temporal_installed() {
  [[ -x $TEMPORAL_BIN ]] && return 0
  command -v go >/dev/null || die "go not found: the Temporal CLI is built with 'go install' (install Go first)"
  exec 8>"$CACHE/.temporal.lock"; flock 8
  if [[ ! -x $TEMPORAL_BIN ]]; then
    local dir tmp tlog="$CACHE/logs/temporal-install.log" t0
    dir=$(dirname "$TEMPORAL_BIN"); tmp="$dir.tmp"
    t0=$(now_ms)
    mkdir -p "$CACHE/logs" && rm -rf "$tmp"
    say "installing Temporal CLI v$TEMPORAL_VERSION (takes a few minutes)... (log: $tlog)"
    # Outside any module and with the project's GOFLAGS cleared: this must not touch the repo's go.mod.
    if ! (cd "$CACHE" && GOFLAGS="" GOBIN="$tmp" go install \
      "github.com/temporalio/cli/cmd/temporal@v$TEMPORAL_VERSION") >>"$tlog" 2>&1; then
      tail -n 20 "$tlog" >&2
      die "Temporal CLI build failed, see $tlog"
    fi
    mkdir -p "$dir" && mv -f "$tmp/temporal" "$TEMPORAL_BIN" && rm -rf "$tmp"
    say "Temporal CLI ready in $(elapsed "$t0")"
  fi
  exec 8>&-
}

STRIPE_MOCK_VERSION=0.203.0
STRIPE_MOCK_BIN="$CACHE/stripe-mock-$STRIPE_MOCK_VERSION/bin/stripe-mock"

# ensure_stripe_mock_installed: Stripe's API mock, which only the payment provider's tests call (like Chromium,
# `make run` never needs it). Built with the Go toolchain into the cache dir, like the Temporal CLI.
ensure_stripe_mock_installed() {
  [[ -x $STRIPE_MOCK_BIN ]] && return 0
  command -v go >/dev/null || die "go not found: stripe-mock is built with 'go install' (install Go first)"
  exec 8>"$CACHE/.stripe-mock.lock"; flock 8
  if [[ ! -x $STRIPE_MOCK_BIN ]]; then
    local dir tmp slog="$CACHE/logs/stripe-mock-install.log" t0
    dir=$(dirname "$STRIPE_MOCK_BIN"); tmp="$dir.tmp"
    t0=$(now_ms)
    mkdir -p "$CACHE/logs" && rm -rf "$tmp"
    say "installing stripe-mock v$STRIPE_MOCK_VERSION... (log: $slog)"
    # Outside any module and with the project's GOFLAGS cleared: this must not touch the repo's go.mod.
    if ! (cd "$CACHE" && GOFLAGS="" GOBIN="$tmp" go install \
      "github.com/stripe/stripe-mock@v$STRIPE_MOCK_VERSION") >>"$slog" 2>&1; then
      tail -n 20 "$slog" >&2
      die "stripe-mock build failed, see $slog"
    fi
    mkdir -p "$dir" && mv -f "$tmp/stripe-mock" "$STRIPE_MOCK_BIN" && rm -rf "$tmp"
    say "stripe-mock ready in $(elapsed "$t0")"
  fi
  exec 8>&-
}

# progress PID MSG: wait for PID (a child), saying "MSG... <time so far>" every 30 s and once it is done;
# returns its exit status.
progress() {
  local pid=$1 t0 n=0 rc=0
  t0=$(now_ms)
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    ((++n % 30)) || say "$2... $(elapsed "$t0")"
  done
  wait "$pid" || rc=$?
  if ((rc == 0)); then say "$2: done in $(elapsed "$t0")"; else say "$2: failed (exit $rc)"; fi
  return $rc
}

# go_module_build DEST MODULE VERSION PKG=BIN...: build the main packages PKG (paths inside MODULE) at
# VERSION into DEST/bin/BIN, in a scratch module of its own under $CACHE/gobuild (never the repo's go.mod).
# Skipped when every BIN is present; DEST is filled as DEST.tmp and renamed only after all builds succeeded.
# GO_BUILD_HOOK, when set, runs inside the scratch module with the module dir and DEST.tmp as arguments.
go_module_build() {
  local dest=$1 mod=$2 ver=$3; shift 3
  local pb missing=0 t0
  for pb in "$@"; do [[ -x $dest/bin/${pb#*=} ]] || missing=1; done
  ((missing)) || return 0
  command -v go >/dev/null || die "go not found: $mod is built from source (install Go first)"
  local name; name=$(basename "$dest")
  mkdir -p "$CACHE/logs" "$CACHE/gobuild/$name"
  exec 8>"$CACHE/.$name.lock"
  if ! flock -n 8; then
    t0=$(now_ms)
    say "waiting for the build of $name running elsewhere (log: $CACHE/logs/$name-build.log)..."
    until flock -w 30 8; do say "  still building $name... $(elapsed "$t0")"; done
  fi
  missing=0
  for pb in "$@"; do [[ -x $dest/bin/${pb#*=} ]] || missing=1; done
  if ((missing)); then
    local src="$CACHE/gobuild/$name" tmp="$dest.tmp" blog="$CACHE/logs/$name-build.log" pkgs=() moddir
    t0=$(now_ms)
    rm -rf "$tmp" && mkdir -p "$tmp/bin"
    for pb in "$@"; do pkgs+=("$mod/${pb%%=*}@$ver"); done
    say "building $mod $ver: ${*#*=} (a few minutes; log: $blog)"
    (
      cd "$src" || exit 1
      export GOFLAGS="" GOWORK=off
      [[ -f go.mod ]] || go mod init "seckill-build/$name" || exit 1
      go get "${pkgs[@]}" & progress $! "  go get ${pkgs[*]}" >&3 || exit 1
      moddir=$(go list -m -f '{{.Dir}}' "$mod") || exit 1
      for pb in "$@"; do
        go build -mod=mod -o "$tmp/bin/${pb#*=}" "$mod/${pb%%=*}" & progress $! "  building ${pb#*=}" >&3 || exit 1
      done
      if [[ -n ${GO_BUILD_HOOK:-} ]]; then "$GO_BUILD_HOOK" "$moddir" "$tmp" || exit 1; fi
    ) 3>&1 >>"$blog" 2>&1 || { tail -n 20 "$blog" >&2; die "building $mod $ver failed, see $blog"; }
    rm -rf "$dest" && mv "$tmp" "$dest"
    say "$mod $ver ready in $dest in $(elapsed "$t0")"
  fi
  exec 8>&-
}

PG_VERSION=15
PG_BIN=/usr/lib/postgresql/$PG_VERSION/bin
ensure_postgres_installed() {
  [[ -x $PG_BIN/postgres && -x $PG_BIN/initdb && -x $PG_BIN/pg_ctl && -x $PG_BIN/psql ]] && return 0
  apt_install postgresql
}

TEMPORAL_SERVER_VERSION=1.29.1
TEMPORAL_UI_VERSION=2.42.1
TEMPORAL_SERVER_DIR="$CACHE/temporal-server-$TEMPORAL_SERVER_VERSION"
TEMPORAL_UI_DIR="$CACHE/temporal-ui-$TEMPORAL_UI_VERSION"
TEMPORAL_SERVER_BIN="$TEMPORAL_SERVER_DIR/bin/temporal-server"
TEMPORAL_SQL_TOOL="$TEMPORAL_SERVER_DIR/bin/temporal-sql-tool"
TEMPORAL_UI_BIN="$TEMPORAL_UI_DIR/bin/temporal-ui-server"
# the server's schema files and config template are copied next to the binaries: the install does not
# depend on the Go module cache staying around
temporal_server_files() { # MODULE_DIR DEST
  mkdir -p "$2/schema" "$2/config" &&
    cp -r "$1/schema/postgresql" "$2/schema/" && cp "$1/config/development-postgres12.yaml" "$2/config/" &&
    chmod -R u+w "$2/schema" "$2/config"
}
ensure_temporal_server_installed() {
  [[ -x $TEMPORAL_SERVER_BIN && -x $TEMPORAL_SQL_TOOL ]] && return 0
  GO_BUILD_HOOK=temporal_server_files go_module_build "$TEMPORAL_SERVER_DIR" go.temporal.io/server \
    "v$TEMPORAL_SERVER_VERSION" cmd/server=temporal-server cmd/tools/sql=temporal-sql-tool
}
ensure_temporal_ui_installed() {
  [[ -x $TEMPORAL_UI_BIN ]] && return 0
  go_module_build "$TEMPORAL_UI_DIR" github.com/temporalio/ui-server/v2 "v$TEMPORAL_UI_VERSION" \
    cmd/server=temporal-ui-server
}
