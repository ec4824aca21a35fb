#!/usr/bin/env bash
# Installs what driftd needs to build and test on Debian 12: compilers, CMake, the libraries,
# Java + Maven for the test Kafka broker. Safe to run again. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  librdkafka-dev librocksdb-dev libyaml-cpp-dev libyaml-dev libspdlog-dev libfmt-dev libsimdjson-dev
  libssl-dev
  catch2 libcli11-dev libcpp-httplib-dev libexpected-dev libsystemd-dev libbenchmark-dev
  libboost-dev
  # The avro and protobuf value formats; protoc compiles the tests' descriptor set.
  libavro-dev libprotobuf-dev protobuf-compiler
  clang-14 libclang-rt-14-dev
  openjdk-17-jre-headless maven python3 python3-venv curl systemd
  podman runc debootstrap
  # The status page's browser test (headless), promtool and a real Prometheus for the metrics
  # and dashboard tests, PyYAML for the Kubernetes manifests' test.
  chromium prometheus python3-yaml
)

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
