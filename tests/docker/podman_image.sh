#!/usr/bin/env bash
# Builds driftd's container image with podman (no Docker engine on these machines) and prints
# its size. The debian:bookworm-slim base comes from debootstrap, cached as a tarball under
# ~/.cache/driftd-podman so that only the first run pays for it.
#   podman_image.sh check    exit 0 if podman can run here
#   podman_image.sh base     make sure the debian:bookworm-slim base image exists
#   podman_image.sh build    build localhost/driftd:test, print "image-size-bytes N" and the
#                            size of the base it was built on, "base-size-bytes N"
#   podman_image.sh fixture  the ctest fixture that builds the image before the image test
#                            (or waits for the build tests/run.sh started, then finds it done)
#                            (tests/docker/properties.cmake): `build` where podman can run; where
#                            it cannot, a failure with CI=true and a warning otherwise (the image
#                            test then skips)
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${DRIFTD_PODMAN_CACHE:-$HOME/.cache/driftd-podman}"
image="${DRIFTD_IMAGE:-localhost/driftd:test}"
base="docker.io/library/debian:bookworm-slim"
mkdir -p "$cache"
# Containers' default ulimits exceed what these sandboxes allow.
printf '[containers]\ndefault_ulimits = []\n' > "$cache/containers.conf"
export CONTAINERS_CONF="$cache/containers.conf"
podman=(podman --runtime runc --cgroup-manager=cgroupfs)
# --format docker keeps the HEALTHCHECK (the OCI format has no field for it).

ensure_base() {
    if ! "${podman[@]}" image exists "$base"; then
      if [ ! -s "$cache/bookworm-minbase.tar" ]; then
        command -v debootstrap >/dev/null || { echo "debootstrap is missing" >&2; exit 1; }
        rootfs="$(mktemp -d /tmp/driftd-rootfs.XXXXXX)"
        trap 'rm -rf "$rootfs"' EXIT
        debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >&2
        tar -C "$rootfs" -cf "$cache/bookworm-minbase.tar.tmp" .
        mv "$cache/bookworm-minbase.tar.tmp" "$cache/bookworm-minbase.tar"
      fi
      "${podman[@]}" import "$cache/bookworm-minbase.tar" "$base" >&2
    fi
}

case "${1:-build}" in
  check)
    command -v podman >/dev/null && command -v runc >/dev/null && "${podman[@]}" info >/dev/null
    ;;
  base)
    ensure_base
    ;;
  fixture)
    if ! "$0" check >/dev/null 2>&1; then
      if [ "${CI:-}" = true ]; then
        echo "podman cannot run here (CI=true, so this is a failure)" >&2
        exit 1
      fi
      echo "warning: podman cannot run here; the container image test will skip" >&2
      exit 0
    fi
    exec nice -n 10 "$0" build
    ;;
  build)
    # One build at a time: tests/run.sh starts one in the background beside the tests and runs
    # the fixture once it is done; a fixture started earlier (ctest alone) waits for it, then
    # finds every layer built (podman's cache) and is done at once.
    exec 9>"$cache/build.lock"
    flock 9
    ensure_base
    "${podman[@]}" build --pull=never --format docker --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
      -t "$image" -f "$repo/deploy/docker/Dockerfile" "$repo" >&2
    echo "image-size-bytes $("${podman[@]}" image inspect --format '{{.Size}}' "$image")"
    echo "base-size-bytes $("${podman[@]}" image inspect --format '{{.Size}}' "$base")"
    ;;
  *)
    echo "usage: $0 check|base|build|fixture" >&2
    exit 2
    ;;
esac
