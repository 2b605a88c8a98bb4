#!/usr/bin/env bash
# A real Apache Kafka broker (KRaft, no ZooKeeper) on 127.0.0.1 for tests and local runs.
# Needs Java 17+ and Maven (first run only: the jars come from Maven Central, tools/kafka/pom.xml).
#
#   kafka.sh libs                       resolve the broker's jars (cached), print their directory
#   kafka.sh start [options]            format and start a single node or a 3-node cluster, wait
#                                       until every node serves metadata, print brokers= and dir=
#       --dir DIR        state directory (default: a new mktemp -d); node N keeps DIR/node-N/
#       --nodes 1|3      1 (default): one combined broker+controller, replication 1;
#                        3: three combined nodes, replication factor 3, min.insync.replicas 2
#       --port PORT      client port of node 1 (node N: PORT+N-1); default: free ports
#       --owner-pid PID  stop every node (kill -9) once process PID has exited
#       --secure         (1 node) also a SASL_SSL listener: TLS with a CA made for the run
#                        (DIR/tls/ca.pem), SASL PLAIN and SCRAM-SHA-512, user `sluice` whose
#                        password is in DIR/tls/sluice.password; prints secure= and ca=
#   kafka.sh stop [--dir DIR] [--kill]  stop every node of DIR (SIGTERM, --kill: SIGKILL)
#   kafka.sh stop-node --dir DIR N... [--kill]  stop the nodes N... only
#   kafka.sh start-node --dir DIR N...  start the nodes N... again (same ports, same data); wait
#                                       until they serve metadata
#   kafka.sh wait --dir DIR [N...]      wait until every running node (or nodes N...) serves metadata
#
# Logs: DIR/node-N/logs/server.log (broker log), DIR/node-N/console.log (JVM stdout/stderr).
# Env: KAFKA_LIBS (jar cache dir, default ~/.cache/sluice/kafka-<hash of pom.xml>),
#      KAFKA_HEAP_OPTS (default -Xms128m -Xmx512m), KAFKA_JVM_OPTS (extra JVM flags),
#      KAFKA_READY_TIMEOUT_S (default 90).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

die() { echo "kafka.sh: $*" >&2; exit 1; }

pom_hash() { sha256sum "$here/pom.xml" | cut -c1-12; }
libs_dir() { echo "${KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/kafka-$(pom_hash)}"; }

# Copies the broker's runtime classpath into libs_dir once; a later call with the same pom.xml
# finds the .complete marker and does nothing. A failed or interrupted copy leaves no marker.
cmd_libs() {
  local dir; dir=$(libs_dir)
  if [ ! -f "$dir/.complete" ]; then
    command -v mvn >/dev/null || die "Maven (mvn) is needed once to fetch the Kafka jars"
    mkdir -p "$dir"
    local log="$dir/.mvn.log"
    echo "kafka.sh: resolving the Kafka broker's jars into $dir (Maven, once)" >&2
    if ! mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DoutputDirectory="$dir" \
      -DincludeScope=runtime >"$log" 2>&1; then
      tail -n 30 "$log" >&2
      die "mvn dependency:copy-dependencies failed (full log: $log)"
    fi
    ls "$dir"/kafka_2.13-*.jar >/dev/null 2>&1 || die "no kafka_2.13 jar in $dir after mvn"
    touch "$dir/.complete"
  fi
  echo "$dir"
}

java_cmd() { command -v java >/dev/null || die "Java 17+ is needed (java not on PATH)"; echo java; }

# N free TCP ports on 127.0.0.1, one per line (the OS picks them).
free_ports() {
  node -e '
    const net = require("net"); const n = Number(process.argv[1]); const ports = []; const socks = []
    const next = () => {
      if (ports.length === n) { socks.forEach((s) => s.close()); console.log(ports.join("\n")); return }
      const s = net.createServer().listen(0, "127.0.0.1", () => { ports.push(s.address().port); socks.push(s); next() })
    }
    next()' "$1"
}

# A random Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as Uuid.toString),
# not starting with '-' (the tools would read it as an option).
cluster_id() {
  node -e '
    const c = require("crypto"); let id
    do id = c.randomBytes(16).toString("base64url"); while (id.startsWith("-"))
    console.log(id)'
}

node_pid() { local f="$1/node-$2/pid"; [ -f "$f" ] && cat "$f" || true; }
node_alive() { local pid; pid=$(node_pid "$1" "$2"); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

# Writes DIR/node-N/server.properties. Args: dir n nodes voters client_port controller_port.
write_config() {
  local dir=$1 n=$2 nodes=$3 voters=$4 port=$5 cport=$6 sport=${7:-} rf=1 isr=1
  [ "$nodes" -eq 3 ] && rf=3 && isr=2
  mkdir -p "$dir/node-$n/data" "$dir/node-$n/logs"
  local extra='' extra_map=''
  if [ -n "$sport" ]; then extra=",SASL_SSL://127.0.0.1:$sport"; extra_map=",SASL_SSL:SASL_SSL"; fi
  cat >"$dir/node-$n/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport$extra
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport$extra
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT$extra_map
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/node-$n/data
num.partitions=1
auto.create.topics.enable=false
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=8
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=1000
unclean.leader.election.enable=false
log.segment.bytes=16777216
EOF
  if [ -n "$sport" ]; then
    local pw; pw=$(cat "$dir/tls/sluice.password")
    cat >>"$dir/node-$n/server.properties" <<EOF
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$dir/tls/broker.pem
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_sluice="$pw";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  fi
}

# A CA and a broker certificate for 127.0.0.1/localhost (openssl), and the password of user
# `sluice`, under DIR/tls. The broker reads tls/broker.pem (key and certificate, PEM).
make_tls() {
  local t="$1/tls"; mkdir -p "$t"
  command -v openssl >/dev/null || die "--secure needs openssl"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice test CA" \
    -keyout "$t/ca.key" -out "$t/ca.pem" >/dev/null 2>&1 || die "openssl: CA failed"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$t/broker.key" \
    -out "$t/broker.csr" >/dev/null 2>&1 || die "openssl: broker key failed"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$t/san.ext"
  openssl x509 -req -in "$t/broker.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
    -days 2 -extfile "$t/san.ext" -out "$t/broker.crt" >/dev/null 2>&1 || die "openssl: broker cert failed"
  openssl pkcs8 -topk8 -nocrypt -in "$t/broker.key" -out "$t/broker.pk8" >/dev/null 2>&1 || die "openssl: pkcs8 failed"
  cat "$t/broker.pk8" "$t/broker.crt" >"$t/broker.pem"
  node -e 'console.log(require("crypto").randomBytes(18).toString("base64url"))' >"$t/sluice.password"
  chmod 600 "$t"/*.key "$t"/*.pk8 "$t/broker.pem" "$t/sluice.password"
}

start_jvm() {
  local dir=$1 n=$2 libs; libs=$(cmd_libs)
  local nd="$dir/node-$n"
  # shellcheck disable=SC2086
  nohup "$(java_cmd)" ${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} -XX:+UseSerialGC ${KAFKA_JVM_OPTS:-} \
    -Dkafka.logs.dir="$nd/logs" -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -cp "$libs/*" kafka.Kafka "$nd/server.properties" >"$nd/console.log" 2>&1 </dev/null &
  echo $! >"$nd/pid"
}

# Waits until the nodes (all running ones, or node N) answer a Metadata request that lists them
# (tools/kafka/ready.mjs, kafkajs admin). Bounded by KAFKA_READY_TIMEOUT_S.
cmd_wait() {
  local dir=$1 ports=() ids=() warm=''; shift
  if [ "${1:-}" = --warm ]; then warm=warm; shift; fi
  local only=" $* "
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
  for n in $(seq 1 "$NODES"); do
    if [ "$only" != "  " ] && [[ "$only" != *" $n "* ]]; then continue; fi
    node_alive "$dir" "$n" || continue
    ids+=("$n"); ports+=("127.0.0.1:$(sed -n 's/^listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\),.*/\1/p' "$dir/node-$n/server.properties")")
  done
  [ ${#ids[@]} -gt 0 ] || die "no running node in $dir"
  local pids=() n
  for n in "${ids[@]}"; do pids+=("$(node_pid "$dir" "$n")"); done
  if ! node "$here/ready.mjs" "$(IFS=,; echo "${ports[*]}")" "$(IFS=,; echo "${ids[*]}")" \
    "${KAFKA_READY_TIMEOUT_S:-90}" "$(IFS=,; echo "${pids[*]}")" $warm; then
    for n in "${ids[@]}"; do
      echo "--- node $n: last lines of $dir/node-$n/console.log and logs/server.log" >&2
      tail -n 5 "$dir/node-$n/console.log" >&2 || true
      grep -E ' (ERROR|FATAL) ' "$dir/node-$n/logs/server.log" 2>/dev/null | tail -n 10 >&2 || true
    done
    exit 1
  fi
}

cmd_start() {
  local dir='' nodes=1 port='' owner='' secure=0
  while [ $# -gt 0 ]; do
    case $1 in
      --dir) dir=$2; shift 2 ;;
      --secure) secure=1; shift ;;
      --nodes) nodes=$2; shift 2 ;;
      --port) port=$2; shift 2 ;;
      --owner-pid) owner=$2; shift 2 ;;
      *) die "start: unknown option $1" ;;
    esac
  done
  [ "$nodes" = 1 ] || [ "$nodes" = 3 ] || die "start: --nodes must be 1 or 3, got $nodes"
  [ "$secure" = 0 ] || [ "$nodes" = 1 ] || die "start: --secure is for one node"
  [ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-kafka-XXXXXX")
  mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
  [ -f "$dir/cluster.env" ] && die "start: $dir already holds a cluster (kafka.sh stop --dir $dir; rm -r it)"
  local libs; libs=$(cmd_libs)
  local all; all=$(free_ports $((nodes * 2 + 1)))
  mapfile -t free <<<"$all"
  local cports=() bports=() voters='' n
  for n in $(seq 1 "$nodes"); do
    cports+=("${free[$((nodes + n - 1))]}")
    if [ -n "$port" ]; then bports+=($((port + n - 1))); else bports+=("${free[$((n - 1))]}"); fi
    voters+="${voters:+,}$n@127.0.0.1:${cports[$((n - 1))]}"
  done
  local id; id=$(cluster_id)
  local brokers='' sport='' scram=()
  if [ "$secure" = 1 ]; then
    make_tls "$dir"; sport=${free[$((nodes * 2))]}
    scram=(--add-scram "SCRAM-SHA-512=[name=sluice,password=$(cat "$dir/tls/sluice.password")]")
  fi
  for n in $(seq 1 "$nodes"); do
    write_config "$dir" "$n" "$nodes" "$voters" "${bports[$((n - 1))]}" "${cports[$((n - 1))]}" "$sport"
    brokers+="${brokers:+,}127.0.0.1:${bports[$((n - 1))]}"
  done
  printf 'NODES=%s\nCLUSTER_ID=%s\nBROKERS=%s\n' "$nodes" "$id" "$brokers" >"$dir/cluster.env"
  # Format every node's storage with the one cluster id (in parallel: one JVM each).
  local fpids=()
  for n in $(seq 1 "$nodes"); do
    "$(java_cmd)" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
      -Dlog4j2.configurationFile="$here/log4j2.properties" -Dkafka.logs.dir="$dir/node-$n/logs" \
      -cp "$libs/*" kafka.tools.StorageTool format -t "$id" -c "$dir/node-$n/server.properties" \
      "${scram[@]}" >"$dir/node-$n/format.log" 2>&1 &
    fpids+=($!)
  done
  for n in $(seq 1 "$nodes"); do
    wait "${fpids[$((n - 1))]}" || { cat "$dir/node-$n/format.log" >&2; die "formatting node $n failed"; }
  done
  for n in $(seq 1 "$nodes"); do start_jvm "$dir" "$n"; done
  if [ -n "$owner" ]; then
    # Watchdog: once the owner is gone, kill -9 every node (pid files are re-read: nodes restart).
    nohup bash -c '
      while kill -0 "$1" 2>/dev/null && [ -f "$2/cluster.env" ]; do sleep 1; done
      for f in "$2"/node-*/pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
      true' watchdog "$owner" "$dir" >/dev/null 2>&1 </dev/null &
    echo $! >"$dir/watchdog.pid"
  fi
  if ! (cmd_wait "$dir" --warm); then cmd_stop --dir "$dir" --kill; exit 1; fi
  echo "brokers=$brokers"
  echo "dir=$dir"
  if [ "$secure" = 1 ]; then echo "secure=127.0.0.1:$sport"; echo "ca=$dir/tls/ca.pem"; fi
}

stop_node() {
  local dir=$1 n=$2 kill=$3 pid; pid=$(node_pid "$dir" "$n")
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    if [ "$kill" = 1 ]; then
      kill -9 "$pid" 2>/dev/null || true
    else
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  rm -f "$dir/node-$n/pid"
}

cmd_stop() {
  local dir='' kill=0
  while [ $# -gt 0 ]; do
    case $1 in
      --dir) dir=$2; shift 2 ;;
      --kill) kill=1; shift ;;
      *) die "stop: unknown option $1" ;;
    esac
  done
  [ -n "$dir" ] || die "stop: --dir DIR is needed (the dir= line start printed)"
  [ -f "$dir/cluster.env" ] || die "stop: no cluster in $dir"
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
  for n in $(seq 1 "$NODES"); do stop_node "$dir" "$n" "$kill" & done
  wait
  if [ -f "$dir/watchdog.pid" ]; then kill "$(cat "$dir/watchdog.pid")" 2>/dev/null || true; rm -f "$dir/watchdog.pid"; fi
}

node_arg() {
  local dir=$1 n=$2
  [ -f "$dir/cluster.env" ] || die "no cluster in $dir"
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$NODES" ] || die "node must be 1..$NODES, got $n"
}

parse_node_args() {
  dir=''; ns=(); kill=0
  while [ $# -gt 0 ]; do
    case $1 in
      --dir) dir=$2; shift 2 ;;
      --kill) kill=1; shift ;;
      *) ns+=("$1"); shift ;;
    esac
  done
  [ -n "$dir" ] && [ ${#ns[@]} -gt 0 ] || die "usage: --dir DIR N..."
  for n in "${ns[@]}"; do node_arg "$dir" "$n"; done
}

case ${1:-} in
  libs) cmd_libs ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  stop-node)
    shift; parse_node_args "$@"
    for n in "${ns[@]}"; do stop_node "$dir" "$n" "$kill" & done
    wait ;;
  start-node)
    shift; parse_node_args "$@"
    for n in "${ns[@]}"; do node_alive "$dir" "$n" && die "node $n is running"; done
    for n in "${ns[@]}"; do start_jvm "$dir" "$n"; done
    cmd_wait "$dir" "${ns[@]}" ;;
  wait)
    shift; dir=''; ns=()
    while [ $# -gt 0 ]; do case $1 in --dir) dir=$2; shift 2 ;; *) ns+=("$1"); shift ;; esac; done
    [ -n "$dir" ] || die "wait: --dir DIR is needed"; cmd_wait "$dir" "${ns[@]}" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ] && exit 2 || exit 0 ;;
esac
