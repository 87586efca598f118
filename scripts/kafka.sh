#!/usr/bin/env bash
# Ensures Apache Kafka (KRaft, each node broker and controller at once)
# answers on loopback.
#
#   scripts/kafka.sh                       the stack's broker: one node,
#                                          clients on 127.0.0.1:9092
#   scripts/kafka.sh --brokers 3 --port 19092 --dir DIR
#                                          a cluster of 3 nodes, clients on
#                                          19092..19094, data and logs in DIR
#   scripts/kafka.sh --port 19092 --dir DIR --node 2
#                                          (re)starts node 2 of that cluster
#   --advertise PORT                       (one node) tells clients to
#                                          connect to PORT instead, a proxy
#                                          in front of it, say
#
# Node n of N listens for clients on PORT+n-1 and for its controllers on
# PORT+N+n-1; its pid is DIR/node-n/pid, its log DIR/node-n/broker.log.
# The stack's broker also listens on 127.0.0.1:9094 with TLS and SASL
# (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512): a CA and a server certificate for
# 127.0.0.1/localhost generated here, and one user, `execplane`, whose
# password is generated too:
#   .stack/kafka/tls/ca.pem              the CA clients verify against
#   .stack/kafka/tls/client-password     the user's password (0600)
# The broker and its dependencies come from Maven Central once, through a
# small pom (org.apache.kafka:kafka_2.13 $KAFKA_VERSION), and are kept in
# .stack/kafka/libs. Idempotent: a node that answers is left as it is; a
# node's log directory is formatted once.
source "$(dirname "$0")/lib.sh"

KAFKA_VERSION="4.4.0"
LOG4J_VERSION="2.26.1"
SLF4J_VERSION="2.0.17"
HOME_DIR="$STACK_DIR/kafka"
LIBS="$HOME_DIR/libs"

brokers=1
port=9092
dir="$HOME_DIR/stack"
only=""
advertise=""
while [ $# -gt 0 ]; do
  case "$1" in
    --brokers) brokers="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --node) only="$2"; shift 2 ;;
    --advertise) advertise="$2"; shift 2 ;;
    *) die "kafka.sh: unknown argument $1 (see the top of scripts/kafka.sh)" ;;
  esac
done
case "$brokers" in 1 | 3) ;; *) die "kafka.sh: --brokers is 1 or 3, not $brokers" ;; esac
[ -z "$advertise" ] || [ "$brokers" -eq 1 ] || die "kafka.sh: --advertise is for one node"
if [ -n "$only" ] && [ -f "$dir/brokers" ]; then brokers="$(cat "$dir/brokers")"; fi
# Only the stack's own broker has the secure listener.
secure=0
[ "$dir" = "$HOME_DIR/stack" ] && [ "$brokers" -eq 1 ] && secure=1

# The broker's jars, once.
if [ ! -f "$LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
  command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null 2>&1 || apt_install maven
  log "fetching Apache Kafka $KAFKA_VERSION and its dependencies from Maven Central"
  mkdir -p "$HOME_DIR"
  cat >"$HOME_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.execplane.stack</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <!-- The broker logs through SLF4J 2; log4j2 writes it. -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$LIBS.partial"
  mvn -q -B -f "$HOME_DIR/pom.xml" -Dmaven.repo.local="$HOME_DIR/m2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIBS.partial" \
    || die "cannot fetch Apache Kafka $KAFKA_VERSION from Maven Central"
  rm -rf "$LIBS" && mv "$LIBS.partial" "$LIBS"
fi

if [ ! -f "$HOME_DIR/log4j2.yaml" ]; then
  cat >"$HOME_DIR/log4j2.yaml" <<'YAML'
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
YAML
fi

# A broker holds a file and two memory maps per log segment, and the suite
# makes thousands of partitions (a topic prefix per test).
if [ "$(cat /proc/sys/vm/max_map_count)" -lt 262144 ]; then
  as_root sysctl -q -w vm.max_map_count=262144 || log "cannot raise vm.max_map_count (the broker may run out of maps)"
fi

TLS="$HOME_DIR/tls"
if [ "$secure" -eq 1 ] && [ ! -f "$TLS/server.p12" ]; then
  command -v openssl >/dev/null 2>&1 || apt_install openssl
  log "generating the secure listener's CA, server certificate and user password"
  rm -rf "$TLS" && mkdir -p "$TLS" && chmod 700 "$TLS"
  (
    cd "$TLS"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=execplane stack CA" \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
      -keyout server-key.pem -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
      -days 3650 -extfile server.ext -out server.pem 2>/dev/null
    openssl rand -hex 16 >store-password
    openssl pkcs12 -export -in server.pem -inkey server-key.pem -name broker \
      -passout "file:store-password" -out server.p12
    openssl rand -hex 24 >client-password
    rm -f server.csr server.ext ca.srl
    chmod 644 ca.pem
  ) || die "cannot generate the secure listener's certificates"
fi

replicas=$((brokers < 3 ? brokers : 3))
voters=""
for n in $(seq 1 "$brokers"); do
  voters="${voters:+$voters,}$n@127.0.0.1:$((port + brokers + n - 1))"
done
bootstrap=""
for n in $(seq 1 "$brokers"); do
  bootstrap="${bootstrap:+$bootstrap,}127.0.0.1:$((port + n - 1))"
done

mkdir -p "$dir"
echo "$brokers" >"$dir/brokers"
[ -f "$dir/cluster-id" ] || java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null >"$dir/cluster-id"
cluster_id="$(cat "$dir/cluster-id")"
heap=$((brokers == 1 ? 768 : 384))

start_node() {
  local n="$1" node="$dir/node-$1"
  local client=$((port + n - 1)) controller=$((port + brokers + n - 1))
  local listeners="PLAINTEXT://127.0.0.1:$client,CONTROLLER://127.0.0.1:$controller"
  local advertised="PLAINTEXT://127.0.0.1:${advertise:-$client}"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  local secure_settings="" scram=()
  if [ "$secure" -eq 1 ]; then
    local password store_password
    password="$(cat "$TLS/client-password")"
    store_password="$(cat "$TLS/store-password")"
    listeners="$listeners,SASL_SSL://127.0.0.1:$((port + 2))"
    advertised="$advertised,SASL_SSL://127.0.0.1:$((port + 2))"
    protocols="$protocols,SASL_SSL:SASL_SSL"
    secure_settings="sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS/server.p12
ssl.keystore.password=$store_password
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_execplane=\"$password\";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;"
    scram=(--add-scram "SCRAM-SHA-256=[name=execplane,password=$password]"
      --add-scram "SCRAM-SHA-512=[name=execplane,password=$password]")
  fi
  if port_open "$client"; then
    log "Kafka node $n already answering on 127.0.0.1:$client"
    return 0
  fi
  mkdir -p "$node/data"
  (umask 077; cat >"$node/server.properties") <<PROPERTIES
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
$secure_settings
log.dirs=$node/data
offsets.topic.replication.factor=$replicas
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$((replicas < 2 ? 1 : 2))
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$((replicas < 2 ? 1 : 2))
default.replication.factor=$replicas
# A group forms at once rather than after 3 s: every test starts groups.
group.initial.rebalance.delay.ms=0
PROPERTIES
  if [ ! -f "$node/data/meta.properties" ]; then
    # SCRAM users are written into the metadata log as it is formatted.
    java -cp "$LIBS/*" kafka.tools.StorageTool format --ignore-formatted \
      -t "$cluster_id" -c "$node/server.properties" "${scram[@]}" >"$node/format.log" 2>&1 \
      || die "cannot format Kafka node $n's log directory (see $node/format.log)"
  fi
  log "starting Kafka $KAFKA_VERSION node $n of $brokers on 127.0.0.1:$client"
  (
    ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
    cd "$node"
    exec nohup java -Xms"${heap}m" -Xmx"${heap}m" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -Djava.awt.headless=true -Dlog4j2.configurationFile="$HOME_DIR/log4j2.yaml" \
      -cp "$LIBS/*" kafka.Kafka "$node/server.properties" >"$node/broker.log" 2>&1
  ) &
  echo $! >"$node/pid"
}

if [ -n "$only" ]; then
  start_node "$only"
  wait_port "$((port + only - 1))" 180 "Kafka node $only"
  exit 0
fi
for n in $(seq 1 "$brokers"); do start_node "$n"; done
for n in $(seq 1 "$brokers"); do wait_port "$((port + n - 1))" 180 "Kafka node $n"; done
[ "$secure" -eq 0 ] || wait_port "$((port + 2))" 60 "Kafka's secure listener"
log "Kafka ready on $bootstrap (logs: $dir/node-*/broker.log)"
