#!/usr/bin/env bash
# End-to-end check of the container image: build it with podman, run its default pipeline
# (deploy/examples/kafka-drift.yaml, configured by environment) with --network host against the
# test broker, feed it inference logs in which one model drifts, wait for alerts on the output
# topic, stop it with SIGTERM and check the exit code. Prints key lines the test asserts on:
#   image-size-bytes N / ldd-missing N / ldd-packages P... / avro-schemas N / healthcheck ok /
#   alerts N / exit-code N
# DRIFTD_IMAGE_REUSE=1 skips the build when the image exists (for iterating on this script).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bootstrap="${DRIFTD_KAFKA_BOOTSTRAP:-127.0.0.1:${DRIFTD_KAFKA_PORT:-19092}}"
jars="${DRIFTD_KAFKA_HOME:-$HOME/.cache/driftd-kafka}/kafka-${DRIFTD_KAFKA_VERSION:-3.9.1}/jars"
image="${DRIFTD_IMAGE:-localhost/driftd:test}"
export DRIFTD_IMAGE="$image"
export CONTAINERS_CONF="${DRIFTD_PODMAN_CACHE:-$HOME/.cache/driftd-podman}/containers.conf"
podman=(podman --runtime runc --cgroup-manager=cgroupfs)
run_id="$$-$RANDOM"
input="e2e-input-$run_id"
alerts="e2e-alerts-$run_id"
stats="e2e-stats-$run_id"
container="driftd-e2e-$run_id"
work="$(mktemp -d /tmp/driftd-docker-e2e.XXXXXX)"

cleanup() {
  "${podman[@]}" rm -f -t 0 "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

kafka_tool() {  # class, args...
  local class="$1"
  shift
  printf 'log4j.rootLogger=ERROR, stderr\nlog4j.appender.stderr=org.apache.log4j.ConsoleAppender\nlog4j.appender.stderr.Target=System.err\nlog4j.appender.stderr.layout=org.apache.log4j.PatternLayout\nlog4j.appender.stderr.layout.ConversionPattern=%%p %%m%%n\n' \
    > "$work/log4j.properties"
  java -Xmx256m -XX:TieredStopAtLevel=1 -cp "$jars/*" \
    -Dlog4j.configuration="file:$work/log4j.properties" "$class" "$@"
}

if [ "${DRIFTD_IMAGE_REUSE:-0}" = 1 ] && "${podman[@]}" image exists "$image"; then
  # Iterating on this script: keep the image of the last build.
  echo "image-size-bytes $("${podman[@]}" image inspect --format '{{.Size}}' "$image")"
  echo "base-size-bytes $("${podman[@]}" image inspect --format '{{.Size}}' docker.io/library/debian:bookworm-slim)"
else
  "$here/podman_image.sh" build
fi

# What the runtime stage holds: every shared library the binary loads found (ldd-missing 0),
# the packages those libraries come from (the test compares them with the Dockerfile's list),
# and the Avro schemas.
"${podman[@]}" run --rm --entrypoint /bin/sh "$image" -c '
  ldd /usr/bin/driftd > /tmp/ldd.txt
  echo "ldd-missing $(grep -c "not found" /tmp/ldd.txt)"
  for lib in $(awk "/=> \// {print \$3}" /tmp/ldd.txt); do
    dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")"
  done | cut -d: -f1 | sort -u | tr "\n" " " | sed "s/^/ldd-packages /; s/ *$/\n/"
  echo "avro-schemas $(ls /usr/share/driftd/avro/*.avsc | wc -l)"'

for topic in "$input" "$alerts" "$stats"; do
  kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create \
    --topic "$topic" --partitions 1 --replication-factor 1 >/dev/null
done

# Inference logs of two models; model-1's feature 0 shifts by 3 sigma after its first 6000
# records (the pipeline's baseline is each model's first 5000).
python3 - > "$work/input.jsonl" <<'PY'
import random
from datetime import datetime, timedelta, timezone
rng = random.Random(5)
start = datetime(2026, 1, 1, tzinfo=timezone.utc)
seen = {0: 0, 1: 0}
for i in range(24000):
    model = i % 2
    seen[model] += 1
    features = [rng.gauss(0.0, 1.0) for _ in range(4)]
    if model == 1 and seen[model] > 6000:
        features[0] += 3.0
    prediction = 0.5 + 0.1 * features[1] + rng.gauss(0.0, 0.05)
    t = (start + timedelta(milliseconds=i)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    print('{"model_id":"model-%d","event_time":"%s","feature_vector":[%s],"prediction":%.4f,'
          '"ground_truth":%.4f}' % (model, t, ",".join("%.4f" % f for f in features), prediction,
                                     prediction + rng.gauss(0.0, 0.05)))
PY
kafka_tool kafka.tools.ConsoleProducer --bootstrap-server "$bootstrap" --topic "$input" \
  < "$work/input.jsonl"

# A free port for the HTTP endpoint (the host network is shared with everything else).
http_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"${podman[@]}" run -d --name "$container" --network host --ulimit host \
  -e KAFKA_BROKERS="$bootstrap" -e INPUT_TOPIC="$input" -e ALERTS_TOPIC="$alerts" \
  -e STATS_TOPIC="$stats" -e TRIGGER_INTERVAL="2 seconds" -e DRIFTD_HTTP_PORT="$http_port" \
  -e DRIFT_WINDOW="1 second" -e WATERMARK_DELAY="1 second" \
  "$image" run --http "127.0.0.1:$http_port" --shutdown-timeout 8 /etc/driftd/pipelines >/dev/null

# The image's HEALTHCHECK, run once the endpoint listens.
healthy=0
for _ in $(seq 1 60); do
  if "${podman[@]}" healthcheck run "$container" >/dev/null 2>&1; then
    healthy=1
    break
  fi
  if [ "$("${podman[@]}" inspect --format '{{.State.Running}}' "$container")" != "true" ]; then
    break
  fi
  sleep 1
done
[ "$healthy" = 1 ] && echo "healthcheck ok" || echo "healthcheck failed"

# Alerts, as a read_committed consumer sees them.
count=0
deadline=$((SECONDS + 240))
while [ "$SECONDS" -lt "$deadline" ]; do
  count="$(kafka_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bootstrap" \
    --topic "$alerts" --from-beginning --isolation-level read_committed --timeout-ms 5000 \
    2>/dev/null | tee "$work/alerts.jsonl" | grep -c '"alert_id"' || true)"
  [ "$count" -gt 0 ] && break
  if [ "$("${podman[@]}" inspect --format '{{.State.Running}}' "$container")" != "true" ]; then
    break
  fi
done
echo "alerts $count"
head -n 3 "$work/alerts.jsonl" || true

"${podman[@]}" stop -t 30 "$container" >/dev/null
echo "exit-code $("${podman[@]}" inspect --format '{{.State.ExitCode}}' "$container")"
echo "--- container log (tail)"
"${podman[@]}" logs "$container" 2>&1 | tail -n 15
