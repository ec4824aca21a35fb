#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, combined broker+controller) for driftd's tests.
#
#   broker.sh start         resolve the jars (first time), format a fresh log dir, start, wait ready
#   broker.sh start --keep  start again on the log dir of the previous start (topics, records,
#                           committed offsets and transactions kept): a broker outage and its
#                           recovery. Fails when there is no formatted log dir to keep.
#   broker.sh stop          stop the broker started from this run dir and wait for it to exit
#                           (SIGTERM: a controlled shutdown; its log dir stays for --keep)
#   broker.sh status        exit 0 when a broker answers on the port, 1 otherwise
#   broker.sh env           print `export DRIFTD_KAFKA_BOOTSTRAP=...` for eval
#
# Environment:
#   DRIFTD_KAFKA_HOME     cache dir for jars, data and logs (default ~/.cache/driftd-kafka)
#   DRIFTD_KAFKA_PORT     PLAINTEXT port on 127.0.0.1 (default 19092); the controller uses PORT+1
#   DRIFTD_KAFKA_RUN_DIR  config, log dir, pid file and broker log of this broker (default
#                         $DRIFTD_KAFKA_HOME/run-$DRIFTD_KAFKA_PORT); a test that stops and
#                         restarts its own broker points it at a temporary directory, while the
#                         jars stay shared in the cache
#   DRIFTD_KAFKA_VERSION  org.apache.kafka:kafka_2.13 version from Maven Central (default 3.9.1)
#   DRIFTD_KAFKA_START_TIMEOUT  seconds to wait for readiness (default 180)
#
# `start` is idempotent: a broker already answering on the port is reused. Every fresh start
# formats a new log dir, so tests never see topics of an earlier run; `start --keep` does not.
# The shared broker on 19092 serves several test runs at once: stop only a broker of your own.
set -euo pipefail

KAFKA_HOME="${DRIFTD_KAFKA_HOME:-$HOME/.cache/driftd-kafka}"
KAFKA_VERSION="${DRIFTD_KAFKA_VERSION:-3.9.1}"
PORT="${DRIFTD_KAFKA_PORT:-19092}"
CONTROLLER_PORT="$((PORT + 1))"
START_TIMEOUT="${DRIFTD_KAFKA_START_TIMEOUT:-180}"
HOST=127.0.0.1
BOOTSTRAP="$HOST:$PORT"

JAR_DIR="$KAFKA_HOME/kafka-$KAFKA_VERSION/jars"
RUN_DIR="${DRIFTD_KAFKA_RUN_DIR:-$KAFKA_HOME/run-$PORT}"
PID_FILE="$RUN_DIR/broker.pid"
LOG_FILE="$RUN_DIR/broker.log"

log() { echo "broker.sh: $*" >&2; }

port_open() {
  # A bare TCP connect; the subshell closes the descriptor again.
  (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

pid_alive() {
  [[ -f "$PID_FILE" ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null
}

# Metadata round trip through the admin client: the port alone opens before the broker has
# caught up with the controller's metadata log.
metadata_ok() {
  timeout 30 java -Xmx128m -XX:TieredStopAtLevel=1 -cp "$JAR_DIR/*" \
    -Dlog4j.configuration="file:$RUN_DIR/tools-log4j.properties" \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --list >/dev/null 2>&1
}

resolve_jars() {
  if [[ -f "$JAR_DIR/.complete" ]]; then
    return 0
  fi
  mkdir -p "$JAR_DIR"
  local pom="$KAFKA_HOME/kafka-$KAFKA_VERSION/pom.xml"
  cat >"$pom" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>driftd.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
</project>
EOF
  log "resolving Apache Kafka $KAFKA_VERSION from Maven Central (first time only)"
  local started=$SECONDS
  if ! mvn -B -q -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$JAR_DIR" >"$KAFKA_HOME/mvn.log" 2>&1; then
    log "maven could not resolve the broker jars:"
    tail -n 40 "$KAFKA_HOME/mvn.log" >&2
    return 1
  fi
  touch "$JAR_DIR/.complete"
  log "resolved $(ls "$JAR_DIR" | wc -l) jars in $((SECONDS - started))s"
}

write_config() {
  local data_dir="$1"
  cat >"$RUN_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data_dir
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
log.segment.bytes=1048576
log.retention.check.interval.ms=5000
log.cleaner.backoff.ms=1000
num.network.threads=2
num.io.threads=4
EOF
  cat >"$RUN_DIR/log4j.properties" <<EOF
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.controller=WARN
EOF
  cat >"$RUN_DIR/tools-log4j.properties" <<EOF
log4j.rootLogger=ERROR, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%p %m%n
EOF
}

fail_start() {
  log "$1"
  if [[ -f "$LOG_FILE" ]]; then
    log "last lines of $LOG_FILE:"
    tail -n 40 "$LOG_FILE" >&2
  fi
  stop_broker || true
  exit 1
}

start_broker() {
  local keep="$1"
  mkdir -p "$RUN_DIR"
  if pid_alive && port_open && metadata_ok; then
    log "already running (pid $(cat "$PID_FILE")) on $BOOTSTRAP"
    return 0
  fi
  if ! pid_alive && port_open; then
    if metadata_ok; then
      log "a broker started elsewhere already answers on $BOOTSTRAP; reusing it"
      return 0
    fi
    fail_start "port $PORT is taken by something that is not a Kafka broker"
  fi
  stop_broker || true

  command -v java >/dev/null || fail_start "java not found (OpenJDK 17 is required)"
  resolve_jars || exit 1

  local started=$SECONDS
  local data_dir="$RUN_DIR/data"
  if [[ "$keep" == keep ]]; then
    # The cluster id lives in the log dir's meta.properties: reusing the dir keeps everything.
    [[ -f "$data_dir/meta.properties" ]] ||
      fail_start "--keep: no formatted log dir at $data_dir (start once without --keep)"
    write_config "$data_dir"
  else
    rm -rf "$data_dir"
    mkdir -p "$data_dir"
    : >"$LOG_FILE"
    write_config "$data_dir"

    # A KRaft cluster id is 16 random bytes in URL-safe base64 without padding. One in 64
    # starts with '-', which the storage tool's argument parser takes for an option (and then
    # fails on a missing --cluster-id): draw again.
    local cluster_id="-"
    while [[ "$cluster_id" == -* ]]; do
      cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    if ! java -Xmx256m -XX:TieredStopAtLevel=1 -cp "$JAR_DIR/*" \
        -Dlog4j.configuration="file:$RUN_DIR/tools-log4j.properties" \
        kafka.tools.StorageTool format -t "$cluster_id" -c "$RUN_DIR/server.properties" \
        >"$RUN_DIR/format.log" 2>&1; then
      cat "$RUN_DIR/format.log" >&2
      fail_start "formatting the KRaft log dir failed"
    fi
  fi

  # setsid: the broker outlives this script and is not killed with ctest's process group.
  # 9>&-: the broker must not inherit (and so hold) the start lock.
  # >>: a restart with --keep appends, so the log of the first life stays readable.
  setsid nohup java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$RUN_DIR/log4j.properties" \
    -cp "$JAR_DIR/*" kafka.Kafka "$RUN_DIR/server.properties" \
    >>"$LOG_FILE" 2>&1 </dev/null 9>&- &
  echo $! >"$PID_FILE"

  local deadline=$((SECONDS + START_TIMEOUT))
  until port_open; do
    pid_alive || fail_start "the broker exited during start-up"
    ((SECONDS < deadline)) || fail_start "the broker did not open port $PORT in ${START_TIMEOUT}s"
    sleep 0.2
  done
  until metadata_ok; do
    pid_alive || fail_start "the broker exited during start-up"
    ((SECONDS < deadline)) || fail_start "the broker did not answer metadata in ${START_TIMEOUT}s"
    sleep 0.5
  done
  log "started Kafka $KAFKA_VERSION (pid $(cat "$PID_FILE")) on $BOOTSTRAP in $((SECONDS - started))s${keep:+ (log dir kept)}"
}

stop_broker() {
  if [[ ! -f "$PID_FILE" ]]; then
    return 0
  fi
  local pid
  pid="$(cat "$PID_FILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    # A controlled shutdown of a single combined node takes a few seconds; do not wait forever.
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "broker pid $pid ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    log "stopped broker pid $pid"
  fi
  rm -f "$PID_FILE"
}

main() {
  mkdir -p "$KAFKA_HOME"
  case "${1:-}" in
    start)
      local keep=""
      case "${2:-}" in
        "") ;;
        --keep) keep=keep ;;
        *) echo "usage: $0 start [--keep]" >&2; exit 2 ;;
      esac
      # One start at a time per cache dir (several test runs may race for the fixture).
      exec 9>"$KAFKA_HOME/.lock-$PORT"
      flock 9
      start_broker "$keep"
      ;;
    stop)
      exec 9>"$KAFKA_HOME/.lock-$PORT"
      flock 9
      stop_broker
      ;;
    status)
      if port_open && metadata_ok 2>/dev/null; then
        echo "running on $BOOTSTRAP${PID_FILE:+ (pid file $PID_FILE)}"
      else
        echo "not running on $BOOTSTRAP"
        exit 1
      fi
      ;;
    env)
      echo "export DRIFTD_KAFKA_BOOTSTRAP=$BOOTSTRAP"
      ;;
    *)
      echo "usage: $0 start [--keep]|stop|status|env" >&2
      exit 2
      ;;
  esac
}

main "$@"
