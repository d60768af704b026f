# shellcheck shell=bash disable=SC2153 # TEMPORAL_BIN & co. come from stack-install.sh
# The "cluster" profile of scripts/stack (--profile cluster): sourced after stack-services.sh, it replaces the
# service list and ports and adds the services the default profile does not have. Everything listens on ports
# of its own, so it runs next to the default profile; STACK_DIR is already .stack/cluster here.
#
#   postgres            5433         PostgreSQL 15, Temporal's persistence + visibility
#   mariadb             3307         the application database (the default profile's functions)
#   redis-1 .. redis-6  7001-7006    Redis Cluster, 3 masters + 3 replicas
#   rocketmq-namesrv    9877
#   rocketmq-broker-a   10921 (+10919, 10922)   one cluster (DefaultCluster), topics on both brokers
#   rocketmq-broker-b   10931 (+10929, 10932)
#   temporal-server     7333 frontend (history 7334, matching 7335, worker 7339, membership 6943-6949, http 7343)
#   temporal-ui         8333

# shellcheck disable=SC2034 # read by scripts/stack and stack-services.sh
SERVICES=(postgres mariadb redis-1 redis-2 redis-3 redis-4 redis-5 redis-6
  rocketmq-namesrv rocketmq-broker-a rocketmq-broker-b temporal-server temporal-ui)
REDIS_NODES=(redis-1 redis-2 redis-3 redis-4 redis-5 redis-6)
# shellcheck disable=SC2034
BROKER_SERVICES=(rocketmq-broker-a rocketmq-broker-b)

REDIS_CLUSTER_BASE_PORT=${SECKILL_CLUSTER_REDIS_BASE_PORT:-7000}   # redis-N listens on base+N
MYSQL_PORT=${SECKILL_CLUSTER_MYSQL_PORT:-3307}
PG_PORT=${SECKILL_CLUSTER_PG_PORT:-5433}
NAMESRV_PORT=${SECKILL_CLUSTER_NAMESRV_PORT:-9877}
BROKER_A_PORT=${SECKILL_CLUSTER_BROKER_A_PORT:-10921}
BROKER_B_PORT=${SECKILL_CLUSTER_BROKER_B_PORT:-10931}
TEMPORAL_PORT=${SECKILL_CLUSTER_TEMPORAL_PORT:-7333}
TEMPORAL_UI_PORT=${SECKILL_CLUSTER_TEMPORAL_UI_PORT:-8333}
TEMPORAL_HISTORY_SHARDS=${SECKILL_CLUSTER_HISTORY_SHARDS:-8}
# history, matching, worker gRPC; membership (frontend history matching worker); frontend HTTP; metrics
TEMPORAL_OTHER_PORTS="$((TEMPORAL_PORT + 1)) $((TEMPORAL_PORT + 2)) $((TEMPORAL_PORT + 6))"
TEMPORAL_MEMBERSHIP_PORT=${SECKILL_CLUSTER_TEMPORAL_MEMBERSHIP_PORT:-6943}
TEMPORAL_HTTP_PORT=$((TEMPORAL_PORT + 10))
TEMPORAL_METRICS_PORT=$((TEMPORAL_PORT + 57))
[[ $TEMPORAL_HISTORY_SHARDS =~ ^[1-9][0-9]*$ ]] || die "SECKILL_CLUSTER_HISTORY_SHARDS must be a positive number"

PG_USER=temporal
PG_PASSWORD=temporal
PG_DIR="$STACK_DIR/postgres"
TEMPORAL_DIR="$STACK_DIR/temporal"
TEMPORAL_UI_DIR_STATE="$STACK_DIR/temporal-ui"
# same behaviour as the default profile's dev server (eager activities; eager workflow start and the
# search attribute / persistence QPS settings the Temporal CLI dev server applies itself)
TEMPORAL_DYNAMIC_CONFIG+=(system.enableEagerWorkflowStart=true system.forceSearchAttributesCacheRefreshOnRead=true
  frontend.persistenceMaxQPS=10000 history.persistenceMaxQPS=45000)

svc_kind() {
  case $1 in
    redis-[0-9]*) echo redis-node ;;
    rocketmq-broker-*) echo rocketmq-broker ;;
    *) echo "$1" ;;
  esac
}
svc_group() {
  case $1 in
    redis) echo "${REDIS_NODES[@]}" ;;
    redis-70[0-9][0-9]) echo "redis-$((${1#redis-} - REDIS_CLUSTER_BASE_PORT))" ;;
    rocketmq) echo rocketmq-namesrv "${BROKER_SERVICES[@]}" ;;
    namesrv) echo rocketmq-namesrv ;;
    broker | rocketmq-broker) echo "${BROKER_SERVICES[@]}" ;;
    broker-a | broker-b) echo "rocketmq-$1" ;;
    temporal) echo temporal-server temporal-ui ;;
    mysql) echo mariadb ;;
    postgresql | pg) echo postgres ;;
    *) return 1 ;;
  esac
}
svc_pattern() {
  case $1 in
    postgres) echo "bin/postgres -D" ;;
    redis-*) echo redis-server ;;
    mariadb) echo mariadbd ;;
    rocketmq-namesrv) echo org.apache.rocketmq.namesrv.NamesrvStartup ;;
    rocketmq-broker-*) echo org.apache.rocketmq.broker.BrokerStartup ;;
    temporal-server) echo "temporal-server --root" ;;
    temporal-ui) echo "temporal-ui-server --root" ;;
  esac
}
svc_ports() {
  local p
  case $1 in
    postgres) echo "$PG_PORT" ;;
    mariadb) echo "$MYSQL_PORT" ;;
    redis-*) p=$((REDIS_CLUSTER_BASE_PORT + ${1#redis-})); echo "$p $((p + 10000))" ;;  # + cluster bus
    rocketmq-namesrv) echo "$NAMESRV_PORT" ;;
    rocketmq-broker-a) p=$BROKER_A_PORT; echo "$p $((p - 2)) $((p + 1))" ;;
    rocketmq-broker-b) p=$BROKER_B_PORT; echo "$p $((p - 2)) $((p + 1))" ;;
    temporal-server)
      echo "$TEMPORAL_PORT $TEMPORAL_OTHER_PORTS $TEMPORAL_MEMBERSHIP_PORT $((TEMPORAL_MEMBERSHIP_PORT + 1))" \
        "$((TEMPORAL_MEMBERSHIP_PORT + 2)) $((TEMPORAL_MEMBERSHIP_PORT + 6)) $TEMPORAL_HTTP_PORT $TEMPORAL_METRICS_PORT"
      ;;
    temporal-ui) echo "$TEMPORAL_UI_PORT" ;;
  esac
}
svc_timeout() {
  case $1 in rocketmq-broker-*) echo 120 ;; temporal-server) echo 120 ;; *) echo 60 ;; esac
}
svc_stop_timeout() {
  case $1 in rocketmq-broker-*) echo 45 ;; temporal-server | mariadb | postgres) echo 30 ;; *) echo 20 ;; esac
}
# postgres: SIGINT is its "fast" shutdown (SIGTERM would wait for every client to disconnect)
svc_stop_signal() { case $1 in postgres) echo INT ;; *) echo TERM ;; esac; }
svc_parallel() { [[ $1 == redis-node || $1 == rocketmq-broker ]]; }

background_installs() {
  if [[ " $* " == *" temporal-"* ]] &&
    [[ ! -x $TEMPORAL_BIN || ! -x $TEMPORAL_SERVER_BIN || ! -x $TEMPORAL_SQL_TOOL || ! -x $TEMPORAL_UI_BIN ]]; then
    say "building the Temporal CLI, server and UI server in the background (logs: $CACHE/logs/)"
    (
      exec 9>&-
      ensure_temporal_installed && ensure_temporal_server_installed && ensure_temporal_ui_installed
    ) >/dev/null 2>&1 &
  fi
}

# ================================================================= postgres
install_postgres() { ensure_postgres_installed; }
# as_pg CMD...: run CMD as the postgres user when we are root (postgres refuses to run as root)
PG_AS=()
if ((EUID == 0)); then PG_AS=(setpriv --reuid=postgres --regid=postgres --init-groups --); fi
as_pg() { "${PG_AS[@]}" "$@"; }
pg_own() { if ((EUID == 0)); then chown -R postgres:postgres "$@"; fi; }
launch_postgres() {
  local data="$PG_DIR/data"
  mkdir -p "$PG_DIR"
  pg_own "$PG_DIR"
  if [[ ! -s $data/PG_VERSION ]]; then
    say "postgres: initialising data directory $data"
    rm -rf "$data.tmp"
    as_pg "$PG_BIN/initdb" -D "$data.tmp" -U postgres -E UTF8 --locale=C.UTF-8 --auth-local=trust \
      --auth-host=scram-sha-256 >>"$(log_file postgres)" 2>&1 || fail_with_log postgres "initdb failed"
    rm -rf "$data" && mv "$data.tmp" "$data"
  fi
  launch postgres "$(log_file postgres)" "${PG_AS[@]}" "$PG_BIN/postgres" -D "$data" -p "$PG_PORT" -k "$PG_DIR" \
    -h 127.0.0.1 -c max_connections=300 -c shared_buffers=128MB -c synchronous_commit=off \
    -c logging_collector=off -c log_min_messages=warning
}
healthy_postgres() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 2; }
ready_postgres() { healthy_postgres; }
pg_super() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres "$@"; }
pg_app_login() {
  PGPASSWORD=$PG_PASSWORD "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres \
    -tAc 'select 1' >/dev/null 2>&1
}
prepare_postgres() {
  pg_super <<SQL || fail_with_log postgres "creating role $PG_USER failed"
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_USER') THEN
    CREATE ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASSWORD';
  END IF;
END \$\$;
ALTER ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASSWORD';
SQL
  pg_app_login || die "postgres: TCP login as $PG_USER@127.0.0.1:$PG_PORT failed"
  say "postgres: role '$PG_USER' ready (TCP login ok)"
}
check_postgres() { pg_app_login || prepare_postgres; }

# ================================================================= redis cluster
install_redis-node() { ensure_redis_installed; }
# every Redis of this profile is a cluster node; nodes.conf (in .stack/cluster/redis-N) keeps its identity
REDIS_EXTRA_ARGS=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000)
launch_redis-node() { launch_redis "$1"; }
redis_cli() { redis-cli -h 127.0.0.1 -p "$(svc_port "$1")" "${@:2}"; }
redis_cluster_field() { redis_cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"; }
healthy_redis-node() { healthy_redis "$1" && [[ $(redis_cluster_field "$1" cluster_state) == ok ]]; }
ready_redis-node() { healthy_redis "$1"; }
# prepare_redis-node SERVICE: once all six nodes run, create the cluster (only when every node is still
# alone: a cluster that exists is never re-created, its nodes.conf files keep it) and wait for
# cluster_state:ok. A node started again on its own rejoins from its nodes.conf (a former master as a replica).
prepare_redis-node() {
  local n addrs=() fresh=1 t0
  for n in "${REDIS_NODES[@]}"; do
    if ! live_pid "$n" >/dev/null || ! healthy_redis "$n"; then
      [[ $n == "$1" ]] || { say "$1: cluster not formed yet ($n is not running)"; return 0; }
    fi
    addrs+=("127.0.0.1:$(svc_port "$n")")
    [[ $(redis_cluster_field "$n" cluster_known_nodes) == 1 ]] || fresh=0
  done
  [[ $(redis_cluster_field "$1" cluster_state) == ok ]] && return 0
  if ((fresh)); then
    say "redis: creating the cluster ${addrs[*]} (3 masters, 3 replicas)"
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
      >"$STACK_DIR/logs/redis-cluster-create.log" 2>&1 ||
      { tail -n 20 "$STACK_DIR/logs/redis-cluster-create.log" >&2; die "redis: cluster create failed"; }
  fi
  t0=$(now_ms)
  for n in "${REDIS_NODES[@]}"; do
    wait_until "$n" "$(live_pid "$n")" 60 healthy_redis-node "$n"
  done
  say "redis: cluster_state:ok on all nodes in $(elapsed "$t0")"
}

# ================================================================= rocketmq (two brokers, one name server)
rmq_broker() {
  B_NAME=${1#rocketmq-} B_ROLE=${1#rocketmq-}
  B_PORT=$(svc_port "$1")
  B_STORE="$RMQ_DIR/$B_ROLE/store" B_CONF="$RMQ_DIR/$B_ROLE.conf"
}

# ================================================================= temporal server (PostgreSQL)
install_temporal-server() { ensure_temporal_installed; ensure_temporal_server_installed; }
temporal_sql() { # DB ARGS...
  "$TEMPORAL_SQL_TOOL" --plugin postgres12 --ep 127.0.0.1 -p "$PG_PORT" -u "$PG_USER" --pw "$PG_PASSWORD" \
    --db "$1" "${@:2}"
}
# temporal_schema: databases temporal + temporal_visibility, created and brought to the schema version of
# the built server (update-schema is idempotent; setup-schema only on a database without schema_version).
temporal_schema() {
  local db dir t0 slog="$STACK_DIR/logs/temporal-schema.log" shards="$TEMPORAL_DIR/history-shards"
  live_pid postgres >/dev/null ||
    die "temporal-server: postgres is not running (start it first: scripts/stack start --profile cluster postgres)"
  for db in temporal temporal_visibility; do
    case $db in temporal) dir=temporal ;; *) dir=visibility ;; esac
    t0=$(now_ms)
    if ! pg_super -tAc "select 1 from pg_database where datname = '$db'" | grep -q 1; then
      say "temporal-server: creating database $db"
      temporal_sql "$db" create >>"$slog" 2>&1 || fail_schema "$db create"
      if [[ $db == temporal ]]; then mkdir -p "$TEMPORAL_DIR" && echo "$TEMPORAL_HISTORY_SHARDS" >"$shards"; fi
    fi
    if ! PGPASSWORD=$PG_PASSWORD "$PG_BIN/psql" -X -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d "$db" -tAc \
      "select 1 from information_schema.tables where table_name = 'schema_version'" | grep -q 1; then
      say "temporal-server: setup-schema $db"
      temporal_sql "$db" setup-schema -v 0.0 >>"$slog" 2>&1 || fail_schema "$db setup-schema"
    fi
    temporal_sql "$db" update-schema -d "$TEMPORAL_SERVER_DIR/schema/postgresql/v12/$dir/versioned" \
      >>"$slog" 2>&1 || fail_schema "$db update-schema"
    say "temporal-server: schema of $db up to date ($(elapsed "$t0"))"
  done
  # the shard count is fixed when the database is first used
  if [[ -s $shards && $(<"$shards") != "$TEMPORAL_HISTORY_SHARDS" ]]; then
    die "temporal-server: its database has $(<"$shards") history shards, SECKILL_CLUSTER_HISTORY_SHARDS=$TEMPORAL_HISTORY_SHARDS \
needs a new one: scripts/stack down --profile cluster; rm -rf $PG_DIR $TEMPORAL_DIR"
  fi
}
fail_schema() { tail -n 20 "$STACK_DIR/logs/temporal-schema.log" >&2; die "temporal-server: schema step '$1' failed"; }

# render_template TEMPLATE OUT: TEMPLATE with every ${NAME} replaced by the value of the shell variable NAME (set or
# local in the caller), its comment lines (# ...) left out; a placeholder without a variable stops the script.
render_template() {
  local line probe name names text=""
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line == '#'* ]] && continue
    probe=$line names=()
    while [[ $probe =~ \$\{([A-Z0-9_]+)\} ]]; do # the names first: a value is never read as a placeholder
      names+=("${BASH_REMATCH[1]}")
      probe=${probe//"\${${BASH_REMATCH[1]}}"/}
    done
    for name in "${names[@]}"; do
      [[ -v $name ]] || die "$1: no value for \${$name}"
      line=${line//"\${$name}"/"${!name}"}
    done
    text+=$line$'\n'
  done <"$1"
  printf '%s' "$text" >"$2"
}
temporal_server_config() {
  local cfg="$TEMPORAL_DIR/config" kv
  mkdir -p "$cfg" "$TEMPORAL_DIR/archival"
  {
    for kv in "${TEMPORAL_DYNAMIC_CONFIG[@]}"; do
      printf '%s:\n  - value: %s\n' "${kv%%=*}" "${kv#*=}"
    done
  } >"$cfg/dynamicconfig.yaml"
  # deploy/temporal/server.yaml: the module's config/development-postgres12.yaml with our ports, shards and paths
  local TEMPORAL_CONFIG_DIR=$cfg
  local TEMPORAL_HISTORY_PORT=$((TEMPORAL_PORT + 1)) TEMPORAL_MATCHING_PORT=$((TEMPORAL_PORT + 2))
  local TEMPORAL_WORKER_PORT=$((TEMPORAL_PORT + 6)) TEMPORAL_HISTORY_MEMBERSHIP_PORT=$((TEMPORAL_MEMBERSHIP_PORT + 1))
  local TEMPORAL_MATCHING_MEMBERSHIP_PORT=$((TEMPORAL_MEMBERSHIP_PORT + 2))
  local TEMPORAL_WORKER_MEMBERSHIP_PORT=$((TEMPORAL_MEMBERSHIP_PORT + 6))
  # TLS to PostgreSQL: off, the profile's postgres serves loopback only (test/secure runs it with TLS)
  local PG_TLS=false PG_TLS_CA="" PG_TLS_CERT="" PG_TLS_KEY="" PG_TLS_VERIFY_HOST=true
  render_template "$REPO/deploy/temporal/server.yaml" "$cfg/development.yaml"
}
launch_temporal-server() {
  temporal_schema
  temporal_server_config
  launch temporal-server "$(log_file temporal-server)" "$TEMPORAL_SERVER_BIN" --root "$TEMPORAL_DIR" \
    --config config --env development --allow-no-auth start
}
healthy_temporal-server() { temporal_cli operator cluster health 2>/dev/null | grep -q SERVING; }
ready_temporal-server() { healthy_temporal-server; }
temporal_search_attributes_ok() {
  local list sa
  list=$(temporal_cli operator search-attribute list --namespace "$TEMPORAL_NAMESPACE" 2>/dev/null) || return 1
  for sa in "${TEMPORAL_SEARCH_ATTRIBUTES[@]}"; do grep -q "${sa%%=*}" <<<"$list" || return 1; done
}
temporal_namespace_ok() { temporal_cli operator namespace describe --namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1; }
# prepare_temporal-server: namespace default and the search attributes (what start-dev does itself);
# retried while the freshly started frontend does not answer yet.
prepare_temporal-server() {
  local i sa names=() types=() t0
  t0=$(now_ms)
  for ((i = 0; i < 60; i++)); do
    temporal_namespace_ok && break
    temporal_cli operator namespace create --namespace "$TEMPORAL_NAMESPACE" --retention 72h \
      >>"$(log_file temporal-server)" 2>&1 && break
    sleep 1
  done
  temporal_namespace_ok || fail_with_log temporal-server "namespace $TEMPORAL_NAMESPACE could not be created"
  for sa in "${TEMPORAL_SEARCH_ATTRIBUTES[@]}"; do names+=(--name "${sa%%=*}"); types+=(--type "${sa#*=}"); done
  for ((i = 0; i < 30; i++)); do
    temporal_search_attributes_ok && break
    temporal_cli operator search-attribute create --namespace "$TEMPORAL_NAMESPACE" "${names[@]}" "${types[@]}" \
      >>"$(log_file temporal-server)" 2>&1 || sleep 1
  done
  temporal_search_attributes_ok || fail_with_log temporal-server "search attributes could not be registered"
  say "temporal-server: namespace $TEMPORAL_NAMESPACE and search attributes ready ($(elapsed "$t0"))"
}
check_temporal-server() { temporal_search_attributes_ok || prepare_temporal-server; }

# ================================================================= temporal web UI
install_temporal-ui() { ensure_temporal_ui_installed; }
launch_temporal-ui() {
  mkdir -p "$TEMPORAL_UI_DIR_STATE/config"
  render_template "$REPO/deploy/temporal/ui.yaml" "$TEMPORAL_UI_DIR_STATE/config/development.yaml"
  launch temporal-ui "$(log_file temporal-ui)" "$TEMPORAL_UI_BIN" --root "$TEMPORAL_UI_DIR_STATE" \
    --config config --env development start
}
healthy_temporal-ui() { curl -sf -o /dev/null --max-time 3 "http://127.0.0.1:$TEMPORAL_UI_PORT/"; }
ready_temporal-ui() { healthy_temporal-ui; }
prepare_temporal-ui() { :; }

cmd_env() {
  local n addrs=()
  for n in "${REDIS_NODES[@]}"; do addrs+=("127.0.0.1:$(svc_port "$n")"); done
  cat <<ENV
SECKILL_STACK_PROFILE=cluster
SECKILL_REDIS_ADDRS=$(IFS=,; echo "${addrs[*]}")
SECKILL_REDIS_ADDR=${addrs[0]}
SECKILL_REDIS_WAIT_REPLICAS=1
SECKILL_MYSQL_HOST=127.0.0.1
SECKILL_MYSQL_PORT=$MYSQL_PORT
SECKILL_MYSQL_USER=$MYSQL_USER
SECKILL_MYSQL_PASSWORD=$MYSQL_PASSWORD
SECKILL_MYSQL_DATABASE=$MYSQL_DATABASE
SECKILL_ROCKETMQ_NAMESRV=127.0.0.1:$NAMESRV_PORT
SECKILL_ROCKETMQ_BROKER=127.0.0.1:$BROKER_A_PORT,127.0.0.1:$BROKER_B_PORT
SECKILL_TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
SECKILL_TEMPORAL_NAMESPACE=$TEMPORAL_NAMESPACE
SECKILL_TEMPORAL_UI=http://127.0.0.1:$TEMPORAL_UI_PORT
SECKILL_TEMPORAL_UI_URL=http://127.0.0.1:$TEMPORAL_UI_PORT
SECKILL_TEMPORAL_CLI=$TEMPORAL_BIN
ENV
}
