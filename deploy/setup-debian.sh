#!/usr/bin/env bash
# Installs what driftd needs on Debian 12. Safe to run again. Run as root (or with sudo).
#   setup-debian.sh          what building the daemon needs: a compiler, CMake, Ninja and the
#                            -dev libraries (the README's demo command)
#   setup-debian.sh --test   that, and what the tests need on top: Catch2, Google Benchmark,
#                            protoc, clang (the fuzz harnesses), Java + Maven (the test Kafka
#                            broker), podman and lintian (the container image and package
#                            tests), Chromium, Prometheus, Alertmanager, PyYAML (tests/run.sh
#                            runs this)
set -euo pipefail

case "${1:-}" in
  "") with_tests=0 ;;
  --test) with_tests=1 ;;
  *) echo "usage: $0 [--test]" >&2; exit 64 ;;
esac

# Building the daemon (`cmake --build build --target driftd`), as deploy/docker/Dockerfile's
# build stage does.
packages=(
  g++ cmake ninja-build pkg-config
  librdkafka-dev librocksdb-dev libyaml-cpp-dev libyaml-dev libspdlog-dev libfmt-dev libsimdjson-dev
  libssl-dev libcli11-dev libcpp-httplib-dev libexpected-dev libsystemd-dev libboost-dev
  # The PCA of multivariate drift.
  libeigen3-dev
  # The avro and protobuf value formats.
  libavro-dev libprotobuf-dev
)
if ((with_tests)); then
  packages+=(
    build-essential git catch2 libbenchmark-dev
    # protoc compiles the tests' descriptor set.
    protobuf-compiler
    # The libFuzzer harnesses of tests/fuzz.
    clang-14 libclang-rt-14-dev
    # The test Kafka broker (tests/kafka/broker.sh), the tests' own producers and checks, and
    # `systemd-analyze verify` for the units.
    openjdk-17-jre-headless maven python3 python3-venv curl systemd
    # The container image and .deb tests (tests/docker, tests/ops/package_test.cc); lintian
    # checks the .deb as Debian's archive would.
    podman runc debootstrap dpkg-dev lintian
    # The status page's browser test (headless), promtool and a real Prometheus for the metrics
    # and dashboard tests, a real Alertmanager for the alertmanager template's test, PyYAML for
    # the Kubernetes manifests' test.
    chromium prometheus prometheus-alertmanager python3-yaml
  )
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
# A machine may carry its own JDK and Maven outside Debian's packages; that is fine too.
if command -v java >/dev/null && command -v mvn >/dev/null; then
  filtered=()
  for package in "${missing[@]}"; do
    case "$package" in openjdk-*|maven) ;; *) filtered+=("$package") ;; esac
  done
  missing=("${filtered[@]}")
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
