# shellcheck shell=bash
# The services of the default profile. Each one has: svc_pattern (what its /proc cmdline contains),
# svc_port(s), install, launch, healthy (fast check), ready (full check after a start), prepare (idempotent
# setup), timeout. Those functions are called through svc_do with the service name as argument, so one set
# of functions serves several instances of a kind (the cluster profile's redis-1..6, rocketmq-broker-a/b).

# shellcheck disable=SC2034 # used by scripts/stack
SERVICES=(redis mariadb rocketmq-namesrv rocketmq-broker temporal prometheus)

REDIS_PORT=${SECKILL_REDIS_PORT:-6379}
MYSQL_PORT=${SECKILL_MYSQL_PORT:-3306}
MYSQL_DATABASE=${SECKILL_MYSQL_DATABASE:-seckill}
MYSQL_USER=${SECKILL_MYSQL_USER:-seckill}
MYSQL_PASSWORD=${SECKILL_MYSQL_PASSWORD:-seckill}
NAMESRV_PORT=${SECKILL_ROCKETMQ_NAMESRV_PORT:-9876}
BROKER_PORT=${SECKILL_ROCKETMQ_BROKER_PORT:-10911}
TEMPORAL_PORT=${SECKILL_TEMPORAL_PORT:-7233}
TEMPORAL_UI_PORT=${SECKILL_TEMPORAL_UI_PORT:-8233}
PROMETHEUS_PORT=${SECKILL_PROMETHEUS_PORT:-9090}
TEMPORAL_NAMESPACE=default
TEMPORAL_SEARCH_ATTRIBUTES=(SeckillItemId=Int SeckillUserId=Int SeckillOrderStatus=Keyword)
# Dynamic config of the dev server: a saga's activities (MarkPaid, the
# compensations, Notify) run on the worker that completed the workflow task,
# handed back with the completion instead of through a task queue poll.
TEMPORAL_DYNAMIC_CONFIG=(system.enableActivityEagerExecution=true)
ROCKETMQ_CLUSTER=DefaultCluster
ROCKETMQ_BROKER_NAME=broker-a
# topic:queues (read = write queues)
ROCKETMQ_TOPICS=(seckill-orders:4 seckill-order-events:4 seckill-test:4 seckill-smoke:1)
ROCKETMQ_GROUPS=(seckill-order-consumer)
BROKER_SERVICES=(rocketmq-broker)
REDIS_EXTRA_ARGS=()

[[ $MYSQL_DATABASE =~ ^[A-Za-z0-9_]+$ ]] || die "SECKILL_MYSQL_DATABASE must be [A-Za-z0-9_]+"
[[ $MYSQL_USER =~ ^[A-Za-z0-9_]+$ ]] || die "SECKILL_MYSQL_USER must be [A-Za-z0-9_]+"

MARIADB_DIR="$STACK_DIR/mariadb"
MARIADB_SOCK="$MARIADB_DIR/mysqld.sock"
# unix socket paths are limited to 107 bytes: fall back to /tmp for deep checkouts
((${#MARIADB_SOCK} < 100)) || MARIADB_SOCK="/tmp/seckill-mariadb-$(printf %s "$STACK_DIR" | md5sum | cut -c1-10).sock"
RMQ_DIR="$STACK_DIR/rocketmq"

svc_pattern() {
  case $1 in
    redis) echo redis-server ;;
    mariadb) echo mariadbd ;;
    rocketmq-namesrv) echo org.apache.rocketmq.namesrv.NamesrvStartup ;;
    rocketmq-broker) echo org.apache.rocketmq.broker.BrokerStartup ;;
    temporal) echo "temporal server start-dev" ;;
    prometheus) echo "prometheus --config.file=" ;;
  esac
}
svc_ports() {
  case $1 in
    redis) echo "$REDIS_PORT" ;;
    mariadb) echo "$MYSQL_PORT" ;;
    rocketmq-namesrv) echo "$NAMESRV_PORT" ;;
    # 10911 clients, 10909 = listenPort-2 (fast/VIP channel), 10912 = listenPort+1 (HA)
    rocketmq-broker) echo "$BROKER_PORT $((BROKER_PORT - 2)) $((BROKER_PORT + 1))" ;;
    temporal) echo "$TEMPORAL_PORT $TEMPORAL_UI_PORT" ;;
    prometheus) echo "$PROMETHEUS_PORT" ;;
  esac
}
svc_port() { local p; p=$(svc_ports "$1"); echo "${p%% *}"; }
# svc_kind SERVICE: which set of install_/launch_/healthy_/... functions serves SERVICE
svc_kind() { echo "$1"; }
# svc_do ACTION SERVICE: run ACTION (install launch healthy ready prepare check) for SERVICE
svc_do() { "${1}_$(svc_kind "$2")" "$2"; }
# svc_group NAME: the services a group name or alias stands for (fails for unknown names)
svc_group() {
  case $1 in
    rocketmq) echo rocketmq-namesrv rocketmq-broker ;;
    namesrv) echo rocketmq-namesrv ;;
    broker) echo rocketmq-broker ;;
    mysql) echo mariadb ;;
    *) return 1 ;;
  esac
}
svc_stop_signal() { echo TERM; }
# svc_parallel KIND: services of KIND listed next to each other are launched together, then waited for
svc_parallel() { return 1; }
# background_installs SERVICE...: the Temporal CLI build is the longest install (minutes, mostly CPU): on a
# fresh machine it runs in the background while the other services install and start; install_temporal then
# waits on its lock.
background_installs() {
  if [[ ! -x $TEMPORAL_BIN && " $* " == *" temporal "* ]]; then
    (exec 9>&-; ensure_temporal_installed >/dev/null 2>&1 || true) &
  fi
}
svc_timeout() { # seconds to become ready after a start
  case $1 in rocketmq-broker) echo 120 ;; *) echo 60 ;; esac
}
svc_stop_timeout() { # seconds between SIGTERM and SIGKILL; the broker's shutdown hook takes 5-15 s
  case $1 in rocketmq-broker) echo 45 ;; temporal | mariadb) echo 30 ;; *) echo 20 ;; esac
}

# ================================================================= redis
install_redis() { ensure_redis_installed; }
launch_redis() { # [SERVICE]: data in .stack/SERVICE
  local svc=${1:-redis}
  mkdir -p "$STACK_DIR/$svc"
  launch "$svc" "$(log_file "$svc")" redis-server --daemonize no --bind 127.0.0.1 --port "$(svc_port "$svc")" \
    --dir "$STACK_DIR/$svc" --appendonly yes --appendfsync everysec --save "" --logfile "" --protected-mode yes \
    "${REDIS_EXTRA_ARGS[@]}"
}
healthy_redis() { [[ $(redis-cli -h 127.0.0.1 -p "$(svc_port "${1:-redis}")" ping 2>/dev/null) == PONG ]]; }
ready_redis() { healthy_redis "$@"; }
prepare_redis() { :; }

# ================================================================= mariadb
install_mariadb() { ensure_mariadb_installed; }
mariadb_root() { mariadb --no-defaults --socket="$MARIADB_SOCK" -uroot; }
launch_mariadb() {
  local data="$MARIADB_DIR/data"
  if [[ ! -d $data/mysql ]]; then
    say "mariadb: initialising data directory $data"
    rm -rf "$data.tmp" && mkdir -p "$data.tmp"
    # into data.tmp then renamed: an interrupted init is never mistaken for a complete one
    mariadb-install-db --no-defaults --datadir="$data.tmp" --user=root --skip-test-db \
      --auth-root-authentication-method=socket >>"$(log_file mariadb)" 2>&1 ||
      fail_with_log mariadb "mariadb-install-db failed"
    rm -rf "$data" && mv "$data.tmp" "$data"
  fi
  launch mariadb "$(log_file mariadb)" mariadbd --no-defaults --user=root --datadir="$data" \
    --socket="$MARIADB_SOCK" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
    --pid-file="$MARIADB_DIR/mariadbd.pid" --log-error="$(log_file mariadb)" \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=128M --innodb-flush-log-at-trx-commit=2 \
    --max-connections=500 --skip-name-resolve
}
healthy_mariadb() {
  mariadb-admin --no-defaults --socket="$MARIADB_SOCK" -uroot --connect-timeout=2 ping >/dev/null 2>&1
}
ready_mariadb() { healthy_mariadb; }
mariadb_app_login() {
  mariadb --no-defaults -h127.0.0.1 -P"$MYSQL_PORT" -u"$MYSQL_USER" -p"$MYSQL_PASSWORD" \
    --connect-timeout=5 -N -e 'select 1' "$MYSQL_DATABASE" >/dev/null 2>&1
}
prepare_mariadb() {
  local pw=${MYSQL_PASSWORD//\\/\\\\} like=${MYSQL_DATABASE//_/\\_} host
  pw=${pw//\'/\'\'}
  {
    echo "CREATE DATABASE IF NOT EXISTS \`$MYSQL_DATABASE\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
    for host in 127.0.0.1 localhost; do
      echo "CREATE USER IF NOT EXISTS '$MYSQL_USER'@'$host' IDENTIFIED BY '$pw';"
      echo "ALTER USER '$MYSQL_USER'@'$host' IDENTIFIED BY '$pw';"
      echo "GRANT ALL PRIVILEGES ON \`$MYSQL_DATABASE\`.* TO '$MYSQL_USER'@'$host';"
      # tests create and drop their own databases named <db>_<something>
      echo "GRANT ALL PRIVILEGES ON \`${like}\\_%\`.* TO '$MYSQL_USER'@'$host';"
    done
  } | mariadb_root || fail_with_log mariadb "creating database/user failed"
  mariadb_app_login || die "mariadb: TCP login as $MYSQL_USER@127.0.0.1:$MYSQL_PORT/$MYSQL_DATABASE failed"
  say "mariadb: database '$MYSQL_DATABASE' and user '$MYSQL_USER' ready (TCP login ok)"
}
# on "already running": only re-run the (cheap) setup when the application login does not work
check_mariadb() { mariadb_app_login || prepare_mariadb; }

# ================================================================= rocketmq
# -XX:TieredStopAtLevel=1 (C1 only): C2 kept compiling for minutes after a start, 73 s of CPU in the broker's first
# 4 minutes against 5 s with C1 only, most of the broker's CPU per message during a sale (docs/performance.md).
rmq_java_opts() { # ROLE HEAP
  echo "-server -Xms$2 -Xmx$2 -XX:+UseG1GC -XX:TieredStopAtLevel=1 -XX:MaxDirectMemorySize=384m -XX:-OmitStackTraceInFastThrow"
  echo "--add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED"
  echo "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED"
  echo "-Drocketmq.home.dir=$RMQ_DIR/home -Duser.home=$RMQ_DIR/$1"
  echo "-Drmq.logback.configurationFile=rmq.$1.logback.xml $RMQ_QUIET_LOGBACK"
}
# the broker's logback xml has a deprecated element, so logback dumps its whole status (~150 lines) to stdout
RMQ_QUIET_LOGBACK=-Dlogback.statusListenerClass=org.apache.rocketmq.logging.ch.qos.logback.core.status.NopStatusListener
# mqadmin ARGS...: the admin tool; a short-lived JVM (C1 only, serial GC) starts in a few seconds.
mqadmin() {
  mkdir -p "$RMQ_DIR/tools"
  java -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    -Drocketmq.home.dir="$RMQ_DIR/home" -Duser.home="$RMQ_DIR/tools" \
    -Drmq.logback.configurationFile=rmq.tools.logback.xml "$RMQ_QUIET_LOGBACK" \
    -cp "$ROCKETMQ_LIB/*" org.apache.rocketmq.tools.command.MQAdminStartup "$@"
}

install_rocketmq-namesrv() { ensure_rocketmq_installed; }
install_rocketmq-broker() { ensure_rocketmq_installed; }

launch_rocketmq-namesrv() {
  mkdir -p "$RMQ_DIR/home" "$RMQ_DIR/namesrv"
  cat >"$RMQ_DIR/namesrv.conf" <<CONF
listenPort=$NAMESRV_PORT
bindAddress=127.0.0.1
kvConfigPath=$RMQ_DIR/namesrv/kvConfig.json
configStorePath=$RMQ_DIR/namesrv/namesrv.properties
CONF
  # shellcheck disable=SC2046
  launch rocketmq-namesrv "$(log_file rocketmq-namesrv)" java $(rmq_java_opts namesrv 256m) \
    -cp "$ROCKETMQ_LIB/*" org.apache.rocketmq.namesrv.NamesrvStartup -c "$RMQ_DIR/namesrv.conf"
}
healthy_rocketmq-namesrv() {
  port_open "$NAMESRV_PORT" && grep -q "boot success" "$(log_file rocketmq-namesrv)"
}
ready_rocketmq-namesrv() { healthy_rocketmq-namesrv; }
# a name server restarted under a running broker knows no routes until the broker's next registration
# (registerNameServerPeriod, 10 s here): wait for it so clients started right after see the topics.
prepare_rocketmq-namesrv() {
  local b
  for b in "${BROKER_SERVICES[@]}"; do
    live_pid "$b" >/dev/null || continue
    say "rocketmq-namesrv: waiting for the running broker${b#rocketmq-broker} to register again..."
    BROKER_LAST_ADMIN=0
    wait_until rocketmq-namesrv "$(live_pid rocketmq-namesrv)" 60 ready_rocketmq-broker "$b"
  done
}

# rmq_broker [SERVICE]: set the broker's B_NAME, B_PORT (client port), B_ROLE (its user.home under RMQ_DIR),
# B_STORE and B_CONF.
rmq_broker() {
  B_NAME=$ROCKETMQ_BROKER_NAME B_PORT=$BROKER_PORT B_ROLE=broker
  B_STORE="$RMQ_DIR/store" B_CONF="$RMQ_DIR/broker.conf"
}

launch_rocketmq-broker() {
  local svc=${1:-rocketmq-broker}
  live_pid rocketmq-namesrv >/dev/null ||
    die "$svc: the name server is not running (start it first: ${STACK_CMD:-scripts/stack} start rocketmq-namesrv)"
  rmq_broker "$svc"
  local store=$B_STORE
  mkdir -p "$RMQ_DIR/home" "$RMQ_DIR/$B_ROLE" "$store"
  cat >"$B_CONF" <<CONF
brokerClusterName=$ROCKETMQ_CLUSTER
brokerName=$B_NAME
brokerId=0
brokerRole=ASYNC_MASTER
namesrvAddr=127.0.0.1:$NAMESRV_PORT
brokerIP1=127.0.0.1
listenPort=$B_PORT
bindAddress=127.0.0.1
storePathRootDir=$store
storePathCommitLog=$store/commitlog
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=1200000
mappedFileSizeTimerLog=16777216
flushDiskType=ASYNC_FLUSH
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
enablePropertyFilter=false
traceTopicEnable=false
deleteWhen=04
fileReservedTime=48
diskMaxUsedSpaceRatio=95
diskSpaceWarningLevelRatio=95
diskSpaceCleanForciblyRatio=90
osPageCacheBusyTimeOutMills=5000
waitTimeMillsInSendQueue=3000
registerNameServerPeriod=10000
transactionTimeOut=6000
transactionCheckInterval=10000
transactionCheckMax=15
messageIndexEnable=false
timerWheelEnable=false
popConsumerFSServiceInit=false
maxTransferCountOnMessageInMemory=256
CONF
  # messageIndexEnable=false: nothing queries messages by key (consumers still read the keys); saves the index
  # dispatch and its 400 MB mapped index file. timerWheelEnable=false: no timed messages (a retry's delay level is
  # the schedule service's); its threads cost ~3 % of a core on an idle broker. popConsumerFSServiceInit=false: no
  # client consumes by POP (the Go client pulls), so no pop buffer merge (a 5 ms loop) or pop revive service; an idle
  # broker went from 5.8 % to 4.1 % of a core. maxTransferCountOnMessageInMemory=256 (32 by default): a pull answers
  # up to the consumer's 256 (queue.pullBatch), fewer and fuller pulls.
  # shellcheck disable=SC2046
  launch "$svc" "$(log_file "$svc")" java $(rmq_java_opts "$B_ROLE" 512m) \
    -cp "$ROCKETMQ_LIB/*" org.apache.rocketmq.broker.BrokerStartup -c "$B_CONF"
}
healthy_rocketmq-broker() {
  local svc=${1:-rocketmq-broker}
  rmq_broker "$svc"
  port_open "$B_PORT" && grep -q "The broker\[.*boot success" "$(log_file "$svc")"
}
BROKER_LAST_ADMIN=0
ready_rocketmq-broker() {
  healthy_rocketmq-broker "$@" || return 1
  (($(now_ms) - BROKER_LAST_ADMIN > 3000)) || return 1   # mqadmin is a JVM: don't spin it
  BROKER_LAST_ADMIN=$(now_ms)
  mqadmin clusterList -n "127.0.0.1:$NAMESRV_PORT" 2>/dev/null | grep -q "$B_NAME"
}
# rmq_prepared: topics and groups are persisted by the broker in its store's config files; reading those
# avoids a JVM per 'up'. A fresh store has none, so setup runs again after the store was wiped.
# Setup goes through the cluster (-c): every broker registered at that time gets the topics.
rmq_prepared() {
  local cfg="$B_STORE/config" t g
  for t in "${ROCKETMQ_TOPICS[@]}"; do grep -q "\"${t%%:*}\"" "$cfg/topics.json" 2>/dev/null || return 1; done
  for g in "${ROCKETMQ_GROUPS[@]}"; do grep -q "\"$g\"" "$cfg/subscriptionGroup.json" 2>/dev/null || return 1; done
}
prepare_rocketmq-broker() {
  local svc=${1:-rocketmq-broker}
  rmq_broker "$svc"
  rmq_prepared && return 0
  # mqadmin's requests time out after a few hundred ms: on a busy machine (2 cores compiling) an
  # attempt can fail or silently create nothing, so setup is tried again before giving up.
  local attempt missing
  for attempt in 1 2 3 4; do
    missing=$(rmq_setup_attempt) && break
    ((attempt < 4)) && say "$svc: topic setup attempt $attempt incomplete (missing: $missing); retrying" && sleep 3
  done
  [[ -z $missing ]] || { tail -n 5 "$STACK_DIR"/logs/mqadmin-*.log >&2; die "$svc: topics missing after setup: $missing"; }
  say "$svc: topics ${ROCKETMQ_TOPICS[*]%%:*} and group(s) ${ROCKETMQ_GROUPS[*]} ready"
}
# rmq_setup_attempt creates the topics and groups through the name server, then prints the topics still
# missing (and fails) or prints nothing.
rmq_setup_attempt() {
  local ns="127.0.0.1:$NAMESRV_PORT" t g pids=() p rc=0 list missing=()
  for t in "${ROCKETMQ_TOPICS[@]}"; do
    mqadmin updateTopic -n "$ns" -c "$ROCKETMQ_CLUSTER" -t "${t%%:*}" -r "${t##*:}" -w "${t##*:}" \
      >"$STACK_DIR/logs/mqadmin-${t%%:*}.log" 2>&1 & pids+=($!)
  done
  for g in "${ROCKETMQ_GROUPS[@]}"; do
    mqadmin updateSubGroup -n "$ns" -c "$ROCKETMQ_CLUSTER" -g "$g" >"$STACK_DIR/logs/mqadmin-$g.log" 2>&1 & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  ((rc == 0)) || missing+=("(an mqadmin call failed)")
  list=$(mqadmin topicList -n "$ns" 2>/dev/null) || { echo "${ROCKETMQ_TOPICS[*]%%:*}"; return 1; }
  for t in "${ROCKETMQ_TOPICS[@]}"; do grep -qx "${t%%:*}" <<<"$list" || missing+=("${t%%:*}"); done
  ((${#missing[@]} == 0)) || { echo "${missing[*]}"; return 1; }
}
check_rocketmq-broker() { prepare_rocketmq-broker "$@"; }

# ================================================================= temporal
install_temporal() { ensure_temporal_installed; }
launch_temporal() {
  mkdir -p "$STACK_DIR/temporal"
  local sa args=()
  for sa in "${TEMPORAL_SEARCH_ATTRIBUTES[@]}"; do args+=(--search-attribute "$sa"); done
  launch temporal "$(log_file temporal)" "$TEMPORAL_BIN" server start-dev \
    --ip 127.0.0.1 --port "$TEMPORAL_PORT" --ui-port "$TEMPORAL_UI_PORT" \
    --db-filename "$STACK_DIR/temporal/temporal.db" \
    --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal \
    "${TEMPORAL_DYNAMIC_CONFIG[@]/#/--dynamic-config-value=}" \
    "${args[@]}" --log-level warn
}
temporal_cli() { "$TEMPORAL_BIN" "$@" --address "127.0.0.1:$TEMPORAL_PORT" --command-timeout 5s; }
healthy_temporal() {
  # The namespace read too: the dev server's SQLite can stay "interrupted" after a cancelled call while the
  # cluster still says SERVING (temporalio/temporal#3784, #8017); only a restart brings it back.
  temporal_cli operator cluster health 2>/dev/null | grep -q SERVING &&
    temporal_cli operator namespace describe -n "$TEMPORAL_NAMESPACE" >/dev/null 2>&1 &&
    curl -sf -o /dev/null --max-time 3 "http://127.0.0.1:$TEMPORAL_UI_PORT/"
}
ready_temporal() {
  healthy_temporal || return 1
  local list sa
  list=$(temporal_cli operator search-attribute list --namespace "$TEMPORAL_NAMESPACE" 2>/dev/null) || return 1
  for sa in "${TEMPORAL_SEARCH_ATTRIBUTES[@]}"; do grep -q "${sa%%=*}" <<<"$list" || return 1; done
}
prepare_temporal() { :; }

# ================================================================= prometheus
# Scrapes the API (8080) and the worker (9091) with deploy/prometheus/, the
# alert rules included; its UI: http://127.0.0.1:9090 (Alerts, Rules).
install_prometheus() { ensure_prometheus_installed; }
launch_prometheus() {
  mkdir -p "$STACK_DIR/prometheus"
  launch prometheus "$(log_file prometheus)" prometheus --config.file="$REPO/deploy/prometheus/prometheus.yml" \
    --storage.tsdb.path="$STACK_DIR/prometheus" --storage.tsdb.retention.time=2d \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT"
}
healthy_prometheus() { curl -sf -o /dev/null --max-time 3 "http://127.0.0.1:$PROMETHEUS_PORT/-/healthy"; }
ready_prometheus() { curl -sf -o /dev/null --max-time 3 "http://127.0.0.1:$PROMETHEUS_PORT/-/ready"; }
prepare_prometheus() { :; }
