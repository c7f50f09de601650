#!/usr/bin/env bash
# kafka-entrypoint ROLE [ARGS]: run one part of a Kafka 0.9.0.1 cluster on the host's loopback.
#
#   zookeeper        ZooKeeper 3.4.6 on 127.0.0.1:$ZOOKEEPER_PORT, data in /data
#   broker           broker $BROKER_ID on 127.0.0.1:$BROKER_PORT, registered in $ZOOKEEPER_CONNECT,
#                    logs in /data; auto-created topics get $PARTITIONS partitions
#   zookeeper-ready  exit 0 when ZooKeeper answers "ruok" with "imok" (the healthcheck)
#   broker-ready     exit 0 when the broker accepts connections (the healthcheck)
#   tool CLASS ARGS  run a Kafka tool, e.g. kafka.tools.ConsumerOffsetChecker
#   anything else    exec'd as given
#
# Kafka's bin/*.sh do not start on Java 17 (their GC flags are gone), so the classes are
# started directly, with the settings the project's LocalCluster uses.
set -euo pipefail
KAFKA=/opt/kafka
JVM=(java "-Xmx${HEAP}" -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData
     -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true -cp "$KAFKA/libs/*")

answers() {  # answers PORT REQUEST: what a four-letter word gets back from 127.0.0.1:PORT
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf '%s' "$2" >&3
  timeout 2 cat <&3 || true
}

role="${1:-broker}"
[ "$#" -gt 0 ] && shift
case "$role" in
  zookeeper)
    mkdir -p /data/zookeeper
    cat > /tmp/zookeeper.properties <<PROPS
dataDir=/data/zookeeper
clientPort=$ZOOKEEPER_PORT
clientPortAddress=127.0.0.1
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
maxClientCnxns=0
autopurge.purgeInterval=0
PROPS
    exec "${JVM[@]}" -Dlog4j.configuration="file:$KAFKA/config/zkconsumer-log4j.properties" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zookeeper.properties ;;
  broker)
    mkdir -p /data/kafka
    cat > /tmp/server.properties <<PROPS
broker.id=$BROKER_ID
host.name=127.0.0.1
port=$BROKER_PORT
advertised.host.name=127.0.0.1
advertised.port=$BROKER_PORT
log.dirs=/data/kafka
zookeeper.connect=$ZOOKEEPER_CONNECT
zookeeper.session.timeout.ms=6000
zookeeper.connection.timeout.ms=10000
num.partitions=$PARTITIONS
default.replication.factor=1
auto.create.topics.enable=true
delete.topic.enable=true
offsets.topic.replication.factor=$REPLICAS
offsets.topic.num.partitions=4
auto.leader.rebalance.enable=false
controlled.shutdown.enable=true
controlled.shutdown.max.retries=1
controlled.shutdown.retry.backoff.ms=500
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.threads=1
PROPS
    exec "${JVM[@]}" -Dlog4j.configuration="file:$KAFKA/config/zkconsumer-log4j.properties" \
      kafka.Kafka /tmp/server.properties ;;
  zookeeper-ready)
    [ "$(answers "$ZOOKEEPER_PORT" ruok)" = imok ] ;;
  broker-ready)
    exec 3<>"/dev/tcp/127.0.0.1/$BROKER_PORT" ;;
  tool)
    exec "${JVM[@]}" -Dlog4j.configuration="file:$KAFKA/config/tools-log4j.properties" "$@" ;;
  *)
    exec "$role" "$@" ;;
esac
